"""The prompt text of a chat request: bounded before any template or tokenizer sees it,
rendered and tokenized off the event loop, and reserved on the worker like audio."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path
from typing import Any

import pytest

from audiogate import create_host
from audiogate.api import AudioGate, load_tokenizer
from audiogate.chat.prompt_text import (
    INLINE_RENDER_BYTES,
    MAX_PROMPT_TEXT_BYTES,
    PROMPT_TEXT_LIMIT,
    TEXT_HOST_BYTES_PER_BYTE,
    check_prompt_text,
    longest_token_bytes,
    prompt_text_bytes,
    prompt_text_limit,
    text_host_bytes,
)
from audiogate.errors import ContextLimitError, MemoryLimitError, QueueFullError
from audiogate.metrics import AudioMetrics
from audiogate.worker import AudioWorker, WorkerLimits

pytest.importorskip("transformers")

GEMMA = Path(__file__).resolve().parents[2] / "examples" / "models" / "gemma-3n-e4b-it"


@functools.cache
def _tokenizer() -> Any:
    return load_tokenizer(GEMMA)


def _gate(**options: Any) -> AudioGate:
    return AudioGate.from_model_dir(GEMMA, tokenizer=_tokenizer(), **options)


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# --- counting ----------------------------------------------------------------------------


def test_every_string_counts_in_utf8_and_a_media_part_as_its_sentinel() -> None:
    assert prompt_text_bytes(_user("abc")) == len("role") + len("user") + len("content") + 3
    assert prompt_text_bytes("é漢😀") == 2 + 3 + 4
    audio = {"type": "input_audio", "input_audio": {"data": "A" * 10_000, "format": "wav"}}
    parts = [{"role": "user", "content": [audio, {"type": "text", "text": "hi"}]}]
    # The 10,000 base64 characters never reach the template: the part counts 64.
    assert prompt_text_bytes(parts) == 4 + 4 + 7 + 64 + (4 + 4 + 4 + 2)
    assert prompt_text_bytes([{"role": "user", "content": None, "n": 12}]) == 4 + 4 + 7 + 1 + 2


def test_other_mappings_and_sequences_count_as_dicts_and_lists_do() -> None:
    from types import MappingProxyType

    audio = {"type": "input_audio", "input_audio": {"data": "A" * 100, "format": "wav"}}
    message = {"role": "user", "content": [audio, {"type": "text", "text": "héllo"}]}
    as_json = prompt_text_bytes([message])
    proxied = MappingProxyType(
        {"role": "user", "content": (MappingProxyType(audio), {"type": "text", "text": "héllo"})}
    )
    assert prompt_text_bytes((proxied,)) == as_json
    assert prompt_text_bytes([{"role": "user", "content": b"bytes are not text"}]) == 4 + 4 + 7


def test_a_type_that_is_not_a_string_is_counted_not_a_crash() -> None:
    # {"type": []} made the media-type look-up raise TypeError (unhashable): a 500.
    assert prompt_text_bytes([{"role": {"type": []}}]) == 4 + 4
    assert prompt_text_bytes([{"type": {"input_audio": 1}}]) == 4 + 11 + 1
    assert prompt_text_bytes([{"type": ["input_audio"]}]) == 4 + 11


def test_counting_stops_past_the_limit_without_encoding_a_long_string() -> None:
    assert prompt_text_bytes(_user("x" * 10_000), stop_after=100) > 100
    with pytest.raises(ContextLimitError) as caught:
        check_prompt_text(_user("漢" * 1000), 100)
    assert caught.value.limit == PROMPT_TEXT_LIMIT
    assert caught.value.maximum == 100
    assert check_prompt_text(_user("x" * 10), 100) == 25


def test_the_limit_is_the_prefill_cap_times_the_longest_token_under_the_absolute_cap() -> None:
    longest = longest_token_bytes(_tokenizer())
    assert longest is not None
    assert longest == max(len(k.encode()) for k in _tokenizer().get_vocab())
    limit = prompt_text_limit(max_prefill_tokens=100, tokenizer=_tokenizer())
    assert limit == 100 * longest
    huge = prompt_text_limit(max_prefill_tokens=10**9, tokenizer=_tokenizer())
    assert huge == MAX_PROMPT_TEXT_BYTES
    assert prompt_text_limit(max_prefill_tokens=None, tokenizer=_tokenizer(), cap=7) == 7
    assert prompt_text_limit(max_prefill_tokens=5, tokenizer=None, cap=7) == 7
    assert text_host_bytes(10) == 10 * TEXT_HOST_BYTES_PER_BYTE


# --- before the template -------------------------------------------------------------------


def test_a_text_over_the_limit_is_refused_before_rendering_or_tokenizing() -> None:
    rendered: list[int] = []
    base = _gate()

    def renderer(messages: Any) -> str:
        rendered.append(len(str(messages)))
        return base._render(messages)

    gate = _gate(renderer=renderer, max_prompt_text_bytes=1000)
    with pytest.raises(ContextLimitError) as caught:
        gate.prepare(_user("x" * 1000))
    assert caught.value.limit == PROMPT_TEXT_LIMIT
    assert caught.value.reason == "context_limit"
    assert rendered == []  # not even the probe of how the template prints parts
    with pytest.raises(ContextLimitError, match="prompt text bytes"):
        gate.prepare(prompt="y" * 1001)
    gate.prepare(_user("x" * 900))
    assert rendered


def test_the_prefill_cap_lowers_the_text_limit() -> None:
    gate = _gate(max_prefill_tokens=10)
    longest = longest_token_bytes(_tokenizer())
    assert longest is not None
    assert gate.max_prompt_text_bytes == 10 * longest
    with pytest.raises(ContextLimitError, match="prompt text bytes"):
        gate.prepare(_user("a" * (10 * longest)))


# --- off the event loop, reserved ----------------------------------------------------------


def _worker(**limits: Any) -> AudioWorker:
    host = create_host(load_entry_points=True)
    return AudioWorker(host, limits=WorkerLimits(**limits), metrics=AudioMetrics())


def test_a_text_request_renders_and_tokenizes_on_the_worker_holding_its_bytes() -> None:
    seen: list[tuple[str, int]] = []
    base = _gate()

    def renderer(messages: Any) -> str:
        seen.append((threading.current_thread().name, worker.inflight_host_bytes))
        return base._render(messages)

    with _worker() as worker:
        gate = _gate(renderer=renderer, worker=worker)
        messages = _user("hello " * 100)
        expected = text_host_bytes(prompt_text_bytes(messages))

        assert gate.prepare(messages).input_ids
        name, held = seen[-1]
        assert name.startswith("audiogate-audio")  # a worker thread, not the event loop
        assert held == expected
        assert worker.inflight_host_bytes == 0


def test_a_text_request_whose_reservation_does_not_fit_is_refused() -> None:
    messages = _user("x" * 1000)
    need = text_host_bytes(prompt_text_bytes(messages))
    with _worker(max_inflight_host_bytes=need - 1) as worker:
        gate = _gate(worker=worker)
        with pytest.raises(MemoryLimitError) as caught:
            gate.prepare(messages)
        assert caught.value.limit == "in-flight host bytes"
        assert worker.inflight_host_bytes == 0


def test_text_requests_take_queue_places_like_audio_jobs() -> None:
    entered = threading.Event()
    release = threading.Event()
    base = _gate()

    def renderer(messages: Any) -> str:
        if "block" in str(messages):
            entered.set()
            release.wait(10)
        return base._render(messages)

    with _worker(queue_depth=1) as worker:
        gate = _gate(renderer=renderer, worker=worker)

        async def main() -> None:
            first = asyncio.create_task(gate.prepare_async(_user("block")))
            await asyncio.to_thread(entered.wait, 10)  # the one thread is busy
            second = asyncio.create_task(gate.prepare_async(_user("queued")))
            while worker.queued_jobs < 1:
                await asyncio.sleep(0.001)
            with pytest.raises(QueueFullError):
                await gate.prepare_async(_user("refused"))
            second.cancel()  # a queued text job is withdrawn at once
            with pytest.raises(asyncio.CancelledError):
                await second
            assert worker.queued_jobs == 0
            release.set()
            await first

        asyncio.run(main())
        assert (worker.queued_encoded_bytes, worker.inflight_host_bytes) == (0, 0)
        # The gate counts what failed before the audio stages (none of this is audio).
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in worker.metrics.registry.collect()
            for s in metric.samples
        }
        assert (
            samples[
                (
                    "audiogate_audio_preprocess_rejections_total",
                    (("family", "gemma3n"), ("reason", "queue_full")),
                )
            ]
            == 1
        )
        completed = ("audiogate_audio_preprocess_completed_total", (("family", "gemma3n"),))
        assert samples[completed] == 0


def test_an_audio_request_with_long_text_renders_on_the_worker() -> None:
    import base64

    from audiogate.testing.audio import tone, wav_bytes

    threads: list[str] = []
    base = _gate()

    def renderer(messages: Any) -> str:
        threads.append(threading.current_thread().name)
        return base._render(messages)

    clip = base64.b64encode(wav_bytes(tone(seconds=0.5, rate_hz=16_000), rate_hz=16_000))
    audio = {"type": "input_audio", "input_audio": {"data": clip.decode(), "format": "wav"}}

    def messages(text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [audio, {"type": "text", "text": text}]}]

    with _worker() as worker:
        gate = _gate(renderer=renderer, worker=worker)
        gate.prepare(messages("short"))
        assert not threads[-1].startswith("audiogate-audio")  # inline, on the event loop
        gate.prepare(messages("x" * (INLINE_RENDER_BYTES + 1)))
        assert threads[-1].startswith("audiogate-audio")
