"""GET /metrics (Prometheus text of the server's registry) and GET /healthz."""

from __future__ import annotations

import base64
import json

import pytest
from serverkit import PREPARE, chat, delta, serving, trickled_upload, wait_until, wav_b64

from audiogate.metrics import REJECTION_REASONS
from audiogate.server import ServerLimits
from audiogate.testing.audio import noise, wav_bytes
from audiogate.worker import OutcomeRecord

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


@pytest.mark.slow
def test_an_answer_refused_for_the_body_budget_counts_as_memory_limit() -> None:
    # The worker prepares the request, then its 2 MB answer finds no room in the body
    # budget (an upload holds most of it) within the body timeout: the client gets 413,
    # and the request counts once, as it was answered (memory_limit), not as completed.
    clip = base64.b64encode(wav_bytes(noise(samples=30_000, amplitude=0.1), rate_hz=1_000))
    body = json.dumps(chat(clip.decode())).encode()
    limits = ServerLimits(body_idle_timeout_s=2.0, max_inflight_body_bytes=1 << 20)
    with serving(limits=limits) as running:
        before = running.outcomes()
        latency = "audiogate_audio_preprocess_latency_seconds_total"
        latency_before = running.value(latency, family="gemma3n")
        with trickled_upload(running.server.port, 900_000):
            wait_until(lambda: running.gauges()[2] >= 900_000)
            response = running.client.post(PREPARE, content=body)
            assert response.status_code == 413
            error = response.json()["error"]
            assert (error["type"], error["limit"]) == (
                "MemoryLimitError",
                "in-flight request body bytes",
            )
            assert delta(before, running.outcomes()) == {"memory_limit": 1}
            # Only completed requests add their preprocessing time.
            assert running.value(latency, family="gemma3n") == latency_before
        wait_until(lambda: delta(before, running.outcomes()) == {"memory_limit": 1, "cancelled": 1})
        running.wait_idle()


def test_a_deferred_outcome_counts_once_in_either_order() -> None:
    # The server's record (defer_completion): the worker offers its success from its
    # thread, the handler settles on the event loop; whichever comes first, one count.
    counted: list[str] = []

    def record(*, offered: bool, settled_with: str | None, offer_after: bool = False) -> None:
        outcome = OutcomeRecord(recorded=True, defer_completion=True)  # the worker admitted it
        if offered and not offer_after:
            outcome.offer_completion(lambda: counted.append("completed"))
        failure = None if settled_with is None else lambda: counted.append(settled_with)
        outcome.settle(failure)
        outcome.settle(lambda: counted.append("settled twice"))
        if offered and offer_after:
            outcome.offer_completion(lambda: counted.append("completed"))

    record(offered=True, settled_with=None)  # answered: completed
    record(offered=True, settled_with="memory_limit")  # its answer refused
    record(offered=True, settled_with="cancelled", offer_after=True)  # the job outlived it
    record(offered=False, settled_with="cancelled")  # the worker counted its own failure
    assert counted == ["completed", "memory_limit", "cancelled"]
    text_only = OutcomeRecord(defer_completion=True)  # never reached the worker
    text_only.settle(None)
    assert counted == ["completed", "memory_limit", "cancelled"]
