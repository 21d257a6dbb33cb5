"""``AudioGate.prepare_stream`` (issue #34): the whole clip's result, the gate's budget
back to 0 on every path, cancellation, and the worker's metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from stream_helpers import byte_chunks, family_host, noise_pcm16, raw_pcm16, same_clip, whole_clip

from audiogate import AudioGate
from audiogate.cancel import CancelToken
from audiogate.errors import LimitError, PolicyError, PreprocessCancelled
from audiogate.worker import AudioWorker

RATE = 16_000


def _gate(**options: object) -> AudioGate:
    return AudioGate.from_family("qwen2audio", host=family_host(), **options)


def test_the_stream_is_the_whole_clip_and_gives_its_bytes_back() -> None:
    gate = _gate()
    data = noise_pcm16(RATE * 2, seed=4).tobytes()
    clip = asyncio.run(
        gate.prepare_stream(byte_chunks(data, [640, 3, 1001]), source_format=raw_pcm16(RATE))
    )
    same_clip(clip, whole_clip(gate.policy, data, raw_pcm16(RATE)))
    assert gate.stream_budget.held == 0


def test_a_limit_crossed_mid_stream_is_refused_and_released() -> None:
    gate = _gate()
    data = noise_pcm16(RATE * 31, seed=1).tobytes()  # Qwen2-Audio takes 30 s
    with pytest.raises(LimitError):
        asyncio.run(gate.prepare_stream(byte_chunks(data, [6400]), source_format=raw_pcm16(RATE)))
    assert gate.stream_budget.held == 0


def test_cancelling_the_token_or_the_task_releases_everything() -> None:
    gate = _gate()
    token = CancelToken()
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for index in range(100):
            if index == 5:
                token.cancel()
            sent.append(index)
            yield noise_pcm16(320, seed=index).tobytes()

    with pytest.raises(PreprocessCancelled):
        asyncio.run(gate.prepare_stream(chunks(), source_format=raw_pcm16(RATE), cancel=token))
    assert len(sent) < 100
    assert gate.stream_budget.held == 0

    async def stalled() -> AsyncIterator[bytes]:
        yield noise_pcm16(RATE, seed=2).tobytes()
        await asyncio.Event().wait()  # a client that never sends the rest
        yield b""  # pragma: no cover

    async def abandon() -> None:
        task = asyncio.create_task(gate.prepare_stream(stalled(), source_format=raw_pcm16(RATE)))
        while gate.stream_budget.held == 0:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(abandon())
    assert gate.stream_budget.held == 0


def test_the_worker_counts_each_stream_once() -> None:
    with AudioWorker(family_host()) as worker:
        gate = _gate(worker=worker)
        data = noise_pcm16(RATE, seed=6).tobytes()
        long = noise_pcm16(RATE * 31, seed=1).tobytes()
        asyncio.run(gate.prepare_stream(byte_chunks(data, [640]), source_format=raw_pcm16(RATE)))
        with pytest.raises(LimitError) as refused:
            asyncio.run(
                gate.prepare_stream(byte_chunks(long, [64000]), source_format=raw_pcm16(RATE))
            )
        metrics, family = worker.metrics, {"family": "qwen2audio"}
        assert metrics.value("audiogate_audio_preprocess_completed_total", **family) == 1
        reason = {**family, "reason": refused.value.reason}
        assert metrics.value("audiogate_audio_preprocess_rejections_total", **reason) == 1
        assert gate.stream_budget.held == 0


def test_an_unavailable_backend_is_refused_before_any_byte() -> None:
    gate = _gate()

    async def never() -> AsyncIterator[bytes]:
        raise AssertionError("read")
        yield b""  # pragma: no cover

    with pytest.raises(PolicyError, match="torch"):
        asyncio.run(
            gate.prepare_stream(
                never(),
                source_format=raw_pcm16(RATE),
                feature_backend="torch",  # type: ignore[arg-type]
            )
        )
    assert gate.stream_budget.held == 0
