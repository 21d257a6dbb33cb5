"""The blocking ``AudioGate.prepare()``: the calling thread runs the request (no event loop
or thread of its own) without a worker, and submits it to the worker directly with one;
the results, checks, cancellation and metrics are those of ``prepare_async()``."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from shipped import shipped_families

from audiogate import create_host
from audiogate.acquire import AcquisitionPolicy, acquire_suspends
from audiogate.api import AudioGate, PreparedRequest
from audiogate.cancel import CancelToken
from audiogate.errors import DecodeError, PreprocessCancelled
from audiogate.metrics import AudioMetrics
from audiogate.pipeline import EncodedClip
from audiogate.testing.audio import tone, wav_bytes
from audiogate.worker import AudioWorker

FAMILIES = tuple(family.name for family in shipped_families())
WAV = wav_bytes(tone(seconds=0.5, rate_hz=16_000), rate_hz=16_000)


def render(messages: Sequence[Mapping[str, Any]]) -> str:
    """A chat template in miniature: each message's text, parts printed in order."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out.append("".join(part.get("text", "") for part in content))
    return "\n".join(out)


def chat(data: bytes = WAV) -> list[dict[str, Any]]:
    payload = {"data": base64.b64encode(data).decode(), "format": "wav"}
    audio = {"type": "input_audio", "input_audio": payload}
    return [{"role": "user", "content": [{"type": "text", "text": "Listen: "}, audio]}]


@pytest.fixture
def no_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything creates an event loop or hops to a thread."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the blocking path used an event loop or a thread hop")

    monkeypatch.setattr(asyncio, "run", refuse)
    monkeypatch.setattr(asyncio, "to_thread", refuse)
    monkeypatch.setattr(asyncio, "new_event_loop", refuse)


def same(a: PreparedRequest, b: PreparedRequest) -> None:
    assert a.input_ids == b.input_ids
    assert a.text == b.text
    assert a.audio_spans == b.audio_spans
    assert sorted(a.model_inputs) == sorted(b.model_inputs)
    for name, array in a.model_inputs.items():
        np.testing.assert_array_equal(np.asarray(array), np.asarray(b.model_inputs[name]))
        assert np.asarray(array).dtype == np.asarray(b.model_inputs[name]).dtype


@pytest.mark.parametrize("family", FAMILIES)
def test_clips_are_prepared_in_the_calling_thread_as_prepare_async_prepares_them(
    family: str, no_loop: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = AudioGate.from_family(family)
    clips = [EncodedClip(data=WAV, ordinal=1)]
    threads: set[int] = set()
    result = gate.prepare(clips=clips, progress=lambda *_: threads.add(threading.get_ident()))
    assert threads == {threading.get_ident()}
    monkeypatch.undo()  # prepare_async needs its loop
    same(result, asyncio.run(gate.prepare_async(clips=clips)))


def test_chat_messages_with_inline_audio_render_and_prepare_in_the_calling_thread(
    no_loop: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []

    def recording(messages: Sequence[Mapping[str, Any]]) -> str:
        threads.append(threading.get_ident())
        return render(messages)

    gate = AudioGate.from_family("qwen2audio", renderer=recording)
    result = gate.prepare(chat())
    assert threads
    assert set(threads) == {threading.get_ident()}
    assert result.batch is not None
    assert result.batch.clips[0].origin == "inline base64"
    monkeypatch.undo()
    same(result, asyncio.run(gate.prepare_async(chat())))


def test_with_a_worker_the_calling_thread_submits_and_waits(no_loop: None) -> None:
    host = create_host()
    with AudioWorker(host, metrics=AudioMetrics()) as worker:
        gate = AudioGate.from_family("gemma3n", host=host, renderer=render, worker=worker)
        result = gate.prepare(chat())
        assert result.batch is not None
        assert result.batch.clips[0].tokens == 188
        metrics = worker.metrics
        assert metrics.value("audiogate_audio_preprocess_completed_total", family="gemma3n") == 1
        assert worker.inflight_host_bytes == 0
        assert worker.queued_encoded_bytes == 0


@pytest.mark.parametrize("with_worker", [False, True])
def test_a_cancelled_token_stops_the_blocking_path(with_worker: bool, no_loop: None) -> None:
    host = create_host()
    worker = AudioWorker(host, metrics=AudioMetrics()) if with_worker else None
    try:
        gate = AudioGate.from_family("phi4mm", host=host, worker=worker)
        token = CancelToken()
        token.cancel()
        with pytest.raises(PreprocessCancelled):
            gate.prepare(clips=[EncodedClip(data=WAV, ordinal=1)], cancel=token)
        if worker is not None:
            counted = worker.metrics.value(
                "audiogate_audio_preprocess_cancelled_total", family="phi4mm"
            )
            assert counted == 1
            assert worker.inflight_host_bytes == 0
    finally:
        if worker is not None:
            worker.close()


def test_errors_are_the_typed_errors_of_prepare_async(no_loop: None) -> None:
    gate = AudioGate.from_family("gemma3n", renderer=render)
    with pytest.raises(DecodeError):
        gate.prepare(chat(b"RIFF\x00\x00\x00\x00WAVEnot a wav at all"))


def test_only_urls_files_and_long_inline_audio_make_acquisition_suspend() -> None:
    policy = AcquisitionPolicy()
    inline = chat()[0]["content"][1]
    data_uri = {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,UklGRg=="}}
    url = {"type": "audio_url", "audio_url": {"url": "https://example.invalid/a.wav"}}
    file = {"type": "audio_url", "audio_url": {"url": "file:///media/a.wav"}}
    assert not acquire_suspends([inline, data_uri], policy=policy)
    assert acquire_suspends([inline, url], policy=policy)
    assert acquire_suspends([file], policy=policy)
    assert not acquire_suspends([{"type": "input_audio"}], policy=policy)  # refused unawaited
