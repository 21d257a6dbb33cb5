"""GET /metrics (Prometheus text of the server's registry) and GET /healthz."""

from __future__ import annotations

from serverkit import PREPARE, chat, wav_b64

from audiogate.metrics import REJECTION_REASONS

AUDIO_COUNTERS = [
    "audiogate_audio_source_seconds_total",
    "audiogate_audio_source_samples_total",
    "audiogate_audio_normalized_samples_total",
    "audiogate_audio_feature_frames_total",
    "audiogate_audio_effective_tokens_total",
    "audiogate_audio_effective_prefill_tokens_total",
    "audiogate_audio_preprocess_latency_seconds_total",
    "audiogate_audio_preprocess_cancelled_total",
    "audiogate_audio_preprocess_completed_total",
]


def test_metrics_is_prometheus_text_with_every_audio_series(gemma) -> None:
    response = gemma.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for name in AUDIO_COUNTERS:
        assert f'{name}{{family="gemma3n"}}' in text
    for reason in REJECTION_REASONS:
        assert (
            f'audiogate_audio_preprocess_rejections_total{{family="gemma3n",reason="{reason}"}}'
            in text
        )
    assert 'reason="all"' not in text
    assert "audiogate_audio_preprocess_queued_bytes " in text
    assert "audiogate_audio_preprocess_inflight_host_bytes " in text
    assert "audiogate_server_inflight_body_bytes " in text
    assert 'audiogate_server_prepare_responses_total{status="200"}' in text


def test_metrics_move_with_a_request(gemma) -> None:
    samples_before = gemma.scrape()
    response = gemma.client.post(PREPARE, json=chat(wav_b64(2.0, rate_hz=8_000)))
    assert response.status_code == 200
    body = response.json()
    gemma.wait_idle()
    after = gemma.scrape()
    fam = (("family", "gemma3n"),)

    def moved(name: str) -> float:
        return after[(name, fam)] - samples_before[(name, fam)]

    assert moved("audiogate_audio_preprocess_completed_total") == 1
    assert moved("audiogate_audio_source_samples_total") == 16_000
    assert moved("audiogate_audio_normalized_samples_total") == 32_000
    assert moved("audiogate_audio_source_seconds_total") == 2.0
    assert moved("audiogate_audio_feature_frames_total") == body["totals"]["frames"]
    assert moved("audiogate_audio_effective_tokens_total") == body["totals"]["tokens"]
    assert moved("audiogate_audio_preprocess_latency_seconds_total") > 0
    status = (("status", "200"),)
    assert (
        after[("audiogate_server_prepare_responses_total", status)]
        - samples_before[("audiogate_server_prepare_responses_total", status)]
        == 1
    )


def test_metrics_include_prometheus_client_process_series(gemma) -> None:
    text = gemma.client.get("/metrics").text
    assert "python_info" in text
    assert "python_gc_objects_collected_total" in text


def test_healthz_reports_the_family_and_the_worker(gemma) -> None:
    response = gemma.client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["family"] == "gemma3n"
    assert body["model"] == "gemma-3n-e4b-it"
    worker = body["worker"]
    assert worker["state"] == "running"
    assert worker["threads"] == 1
    assert worker["queue_depth"] == 8
    assert body["server"]["max_body_bytes"] > 64 * (1 << 20)


def test_effective_prefill_is_the_expanded_prompt_length(gemma) -> None:
    name = "audiogate_audio_effective_prefill_tokens_total"
    before = gemma.value(name, family="gemma3n")
    body = gemma.client.post(PREPARE, json=chat(wav_b64(1.0))).json()
    gemma.wait_idle()
    assert gemma.value(name, family="gemma3n") - before == len(body["input_ids"])
