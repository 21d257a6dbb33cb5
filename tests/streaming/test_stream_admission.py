"""Admission as the clip arrives, the reservation and its release on every path (#34)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import attrs
import numpy as np
import pytest
from stream_helpers import FAMILIES, byte_chunks, family_host, noise_pcm16, policy_of, raw_pcm16

from audiogate.acquire.clip import EncodedClip
from audiogate.budget import ByteBudget
from audiogate.cancel import CancelToken
from audiogate.decode import inspect
from audiogate.errors import (
    DecodeError,
    EmptyAudioError,
    LimitError,
    MemoryLimitError,
    PreprocessCancelled,
)
from audiogate.pipeline.preflight import preflight
from audiogate.streaming.frontend import open_clip_stream
from audiogate.streaming.transport import prepare_stream

RATE = 16_000
CHUNK = RATE // 50  # 20 ms


def _header(rate: int = RATE, channels: int = 1):
    data = bytes(2 * channels)
    return inspect(data, clip_index=0, source_format=raw_pcm16(rate, channels))


def _whole_error(policy, frames: int) -> Exception:
    data = bytes(2 * frames)
    clip = EncodedClip(data=data, source_format=raw_pcm16(RATE), ordinal=1)
    with pytest.raises(LimitError) as caught:
        preflight(family_host(), policy, [clip])
    return caught.value


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("limit", ["max_duration_seconds", "max_frames_per_request"])
def test_a_limit_crossed_mid_stream_is_refused_at_that_chunk(family: str, limit: str) -> None:
    policy = policy_of(family)
    if limit == "max_duration_seconds":
        policy = attrs.evolve(policy, max_duration_seconds=2)
    else:
        # About one second of the family's frames.
        probe = preflight(
            family_host(),
            policy,
            [EncodedClip(data=bytes(2 * RATE), source_format=raw_pcm16(RATE), ordinal=1)],
        )
        frames = probe.clips[0].features.frames
        # Voxtral's frames are whole 30 s windows: refused at the very first chunk.
        policy = attrs.evolve(policy, max_frames_per_request=max(1, frames - (family == "voxtral")))
    budget = ByteBudget(1 << 30, limit="stream bytes")
    stream = open_clip_stream(family_host(), policy, _header(), budget=budget)
    samples = noise_pcm16(RATE * 4).astype(np.float32) / np.float32(32768)
    pushed = 0

    def push_all() -> None:
        nonlocal pushed
        while pushed < samples.shape[0]:
            stream.push(samples[pushed : pushed + CHUNK])
            pushed += CHUNK
            assert budget.held == stream.held_bytes > 0

    with pytest.raises(LimitError) as caught:
        push_all()
    refused_at = pushed + CHUNK
    # The chunk that crossed: everything before it is admitted whole, and the error is
    # the whole clip's at the new length.
    if pushed:
        preflight(
            family_host(),
            policy,
            [EncodedClip(data=bytes(2 * pushed), source_format=raw_pcm16(RATE), ordinal=1)],
        )
    expected = _whole_error(policy, refused_at)
    assert type(caught.value) is type(expected)
    assert str(caught.value) == str(expected)
    assert budget.held == 0
    with pytest.raises(RuntimeError):
        stream.push(samples[:CHUNK])
    assert budget.held == 0


@pytest.mark.parametrize("family", ["qwen2audio", "phi4mm"])
def test_the_reservation_grows_and_is_released_at_finish(family: str) -> None:
    budget = ByteBudget(1 << 30, limit="stream bytes")
    stream = open_clip_stream(family_host(), policy_of(family), _header(), budget=budget)
    samples = noise_pcm16(RATE * 3).astype(np.float32) / np.float32(32768)
    held = []
    for start in range(0, samples.shape[0], CHUNK):
        stream.push(samples[start : start + CHUNK])
        held.append(budget.held)
    assert held == sorted(held)
    assert held[-1] >= samples.nbytes
    stream.finish()
    assert budget.held == 0
    stream.close()  # idempotent: released once
    assert budget.held == 0


@pytest.mark.parametrize("family", ["voxtral", "granitespeech"])
def test_a_full_budget_refuses_the_chunk(family: str) -> None:
    budget = ByteBudget(64 << 10, limit="stream bytes")
    stream = open_clip_stream(family_host(), policy_of(family), _header(), budget=budget)
    samples = noise_pcm16(RATE * 3).astype(np.float32) / np.float32(32768)

    def push_all() -> None:
        for start in range(0, samples.shape[0], CHUNK):
            stream.push(samples[start : start + CHUNK])

    with pytest.raises(MemoryLimitError) as caught:
        push_all()
    assert caught.value.limit == "stream bytes"
    assert budget.held == 0


@pytest.mark.parametrize("family", ["qwen3omni", "gemma3n"])
def test_cancellation_mid_stream_releases_everything(family: str) -> None:
    budget = ByteBudget(1 << 30, limit="stream bytes")
    token = CancelToken()
    stream = open_clip_stream(
        family_host(), policy_of(family), _header(), budget=budget, cancel=token
    )
    samples = noise_pcm16(RATE).astype(np.float32) / np.float32(32768)
    stream.push(samples[: RATE // 2])
    assert budget.held > 0
    token.cancel()
    with pytest.raises(PreprocessCancelled):
        stream.push(samples[RATE // 2 :])
    assert budget.held == 0
    with pytest.raises(RuntimeError):
        stream.finish()
    assert budget.held == 0


@pytest.mark.parametrize("family", ["glmasr", "phi4mm"])
def test_a_cancelled_task_mid_stream_releases_everything(family: str) -> None:
    """A client gone: the task awaiting prepare_stream is cancelled while it waits."""
    budget = ByteBudget(1 << 30, limit="stream bytes")
    data = noise_pcm16(RATE).tobytes()
    started = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        yield data[: len(data) // 2]
        started.set()
        await asyncio.sleep(3600)
        yield data[len(data) // 2 :]

    async def scenario() -> None:
        task = asyncio.create_task(
            prepare_stream(
                family_host(),
                policy_of(family),
                stalls(),
                source_format=raw_pcm16(RATE),
                budget=budget,
            )
        )
        await started.wait()
        assert budget.held > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert budget.held == 0


def test_malformed_streams_fail_closed() -> None:
    policy = policy_of("qwen2audio")
    budget = ByteBudget(1 << 30, limit="stream bytes")

    def run(data: bytes, source_format) -> None:
        asyncio.run(
            prepare_stream(
                family_host(),
                policy,
                byte_chunks(data, [333]),
                source_format=source_format,
                budget=budget,
            )
        )

    with pytest.raises(EmptyAudioError):
        run(b"", raw_pcm16(RATE))
    with pytest.raises(DecodeError) as caught:
        run(bytes(2 * RATE + 1), raw_pcm16(RATE))
    assert caught.value.code == "partial_frame"
    from audiogate.decode.geometry import SourceFormat

    with pytest.raises(DecodeError):
        run(b"RIFF\x00\x00\x00\x00WAVEjunk" + bytes(100), SourceFormat("wav"))
    assert budget.held == 0
