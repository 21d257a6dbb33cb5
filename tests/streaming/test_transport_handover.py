"""How a PCM stream's batches reach its thread (#34): the chunks of a producer ahead of
the DSP are only appended and the thread is woken once the producer yields to the loop,
then pushes every batch handed over meanwhile as one; a producer at the pace of its
audio gets one push per batch; admission is called per batch of chunks, yet refuses the
crossing chunk. The results are the whole clip's, bit for bit."""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import AsyncIterator
from typing import Any

import attrs
import numpy as np
import pytest
from stream_helpers import family_host, noise_pcm16, policy_of, raw_pcm16, same_clip, whole_clip

import audiogate.streaming.transport as transport
from audiogate.budget import ByteBudget
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import DecodeError, LimitError, NonFiniteSampleError
from audiogate.streaming.frontend import RESERVE_AHEAD_FRAMES, ClipStream, open_clip_stream
from audiogate.streaming.stage import batch_frames
from audiogate.testing.audio import wav_bytes

RATE = 16_000
CHUNK_BYTES = RATE // 50 * 2  # 20 ms of mono PCM16
#: A guard against a deadlock (the behaviour under test failing), not a timing check.
_GUARD_S = 20.0


class _Recorder:
    """A clip stream that records its pushes' sizes and admissions' counts."""

    def __init__(self, stream: ClipStream) -> None:
        self._stream = stream
        self.pushes: list[int] = []
        self.admits: list[int] = []
        self.pushed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def admit(self, frames: int) -> None:
        self.admits.append(frames)
        self._stream.admit(frames)

    def push(self, samples: Any) -> None:
        self._stream.push(samples)
        self.pushes.append(len(samples))
        self.pushed.set()

    def finish(self) -> Any:
        return self._stream.finish()

    def close(self) -> None:
        self._stream.close()


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[_Recorder]:
    recorders: list[_Recorder] = []
    opened = open_clip_stream

    def open_recorder(*args: Any, **kwargs: Any) -> _Recorder:
        recorders.append(_Recorder(opened(*args, **kwargs)))
        return recorders[-1]

    monkeypatch.setattr(transport, "open_clip_stream", open_recorder)
    return recorders


def _prepare(data: bytes, chunks: AsyncIterator[bytes], **kwargs: Any) -> Any:
    return asyncio.run(
        transport.prepare_stream(
            family_host(), policy_of("qwen2audio"), chunks, source_format=raw_pcm16(RATE), **kwargs
        )
    )


def test_a_producer_ahead_of_the_dsp_runs_alone_and_its_batches_are_pushed_as_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks that never make the task wait: nothing is pushed before the last chunk is
    taken, then the batches handed over are pushed a few at once
    (:data:`~audiogate.streaming.transport.MAX_MERGED_BATCHES`), and finish() pushes the
    rest."""
    recorders = _recording(monkeypatch)
    frames = batch_frames(RATE) * 5 + 1234
    data = noise_pcm16(frames, seed=21).tobytes()
    pushed_before_the_end: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start : start + CHUNK_BYTES]
        pushed_before_the_end.append(len(recorders[0].pushes))

    clip = _prepare(data, chunks())
    same_clip(clip, whole_clip(policy_of("qwen2audio"), data, raw_pcm16(RATE)))
    assert pushed_before_the_end == [0]
    (recorder,) = recorders
    batch, merged = batch_frames(RATE), transport.MAX_MERGED_BATCHES
    assert merged == 4
    assert recorder.pushes == [merged * batch, batch, 1234]


def test_a_producer_that_waits_gets_one_push_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer at its audio's pace yields to the loop between chunks: each batch is
    pushed while the producer waits (the thread is woken at the yield; the producer here
    waits for the push, so it would hang if the batch waited for more)."""
    recorders = _recording(monkeypatch)
    batches = 4
    frames = batch_frames(RATE) * batches
    data = noise_pcm16(frames, seed=22).tobytes()
    per_batch = batch_frames(RATE) * 2

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start : start + CHUNK_BYTES]
            if (start + CHUNK_BYTES) % per_batch == 0:
                recorder = recorders[0]
                ready = await asyncio.to_thread(recorder.pushed.wait, _GUARD_S)
                assert ready, "the batch was not pushed while the producer waited"
                recorder.pushed.clear()

    clip = _prepare(data, chunks())
    same_clip(clip, whole_clip(policy_of("qwen2audio"), data, raw_pcm16(RATE)))
    assert recorders[0].pushes == [batch_frames(RATE)] * batches


def test_a_producer_far_ahead_waits_for_its_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_BACKLOG_BYTES handed over and not taken, the loop waits for the thread
    (which then runs before the producer's end): what waits is bounded."""
    monkeypatch.setattr(transport, "MAX_BACKLOG_BYTES", 3 * batch_frames(RATE) * 2)
    recorders = _recording(monkeypatch)
    frames = batch_frames(RATE) * 12
    data = noise_pcm16(frames, seed=23).tobytes()
    pushed_before_the_end: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start : start + CHUNK_BYTES]
        pushed_before_the_end.append(sum(recorders[0].pushes))

    clip = _prepare(data, chunks())
    same_clip(clip, whole_clip(policy_of("qwen2audio"), data, raw_pcm16(RATE)))
    assert sum(recorders[0].pushes) == frames
    # Every wait took what was handed over: at most 4 batches (3 and the crossing one)
    # were left for the end (none with the default bound: the test above).
    (before,) = pushed_before_the_end
    assert before >= frames - 4 * batch_frames(RATE)


def test_admission_is_called_per_batch_of_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks within what the frontend admitted and reserved ahead are appended without a
    call: one admission call per batch or reservation step, not per chunk."""
    recorders = _recording(monkeypatch)
    frames = RATE * 10
    data = noise_pcm16(frames, seed=24).tobytes()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start : start + CHUNK_BYTES]

    _prepare(data, chunks())
    admits = recorders[0].admits
    assert sum(admits) == frames
    assert len(admits) <= frames // batch_frames(RATE) + frames // RESERVE_AHEAD_FRAMES + 2
    assert len(admits) < len(data) // CHUNK_BYTES // 10


@pytest.mark.parametrize("chunk_bytes", [1, 7, CHUNK_BYTES, 4097])
def test_the_crossing_chunk_is_still_refused_when_it_comes(chunk_bytes: int) -> None:
    """With admission per batch of chunks, the chunk that completes the first frame past
    the limit is the one refused, whatever the chunk size (a frame split across chunks)."""
    policy = attrs.evolve(policy_of("qwen2audio"), max_duration_seconds=2)
    budget = ByteBudget(1 << 30, limit="stream bytes")
    data = noise_pcm16(RATE * 3, seed=25).tobytes()
    limit_bytes = 2 * RATE * 2
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for start in range(0, len(data), chunk_bytes):
            sent = start + chunk_bytes
            yield data[start : start + chunk_bytes]

    with pytest.raises(LimitError, match="duration"):
        asyncio.run(
            transport.prepare_stream(
                family_host(), policy, chunks(), source_format=raw_pcm16(RATE), budget=budget
            )
        )
    # The refused chunk holds the last byte of the first frame past the limit.
    assert sent - chunk_bytes < limit_bytes + 2 <= sent
    assert budget.held == 0


def test_a_wav_stream_past_its_declared_size_is_refused_at_the_chunk() -> None:
    """A declared WAV data size: the chunk that goes past it is refused when it comes,
    though no batch or admission step falls there."""
    pcm = noise_pcm16(RATE, seed=26)
    data = wav_bytes(pcm / 32768, rate_hz=RATE)
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for piece in (data[:1000], data[1000:], b"\x00\x00", b"\x00\x00" * 100):
            sent += 1
            yield piece

    with pytest.raises(DecodeError) as caught:
        asyncio.run(
            transport.prepare_stream(
                family_host(), policy_of("qwen2audio"), chunks(), source_format=SourceFormat("wav")
            )
        )
    assert caught.value.code == "riff_size_mismatch"
    assert sent == 3


@pytest.mark.parametrize("sizes", [[1], [3, 5, 640], [CHUNK_BYTES], [1 << 16]])
def test_handed_over_batches_give_the_whole_clip(sizes: list[int]) -> None:
    """Any chunking, batches pushed one by one or merged: the whole clip, bit for bit."""
    data = noise_pcm16(RATE * 2 + 77, seed=27).tobytes()
    index = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal index
        start = 0
        while start < len(data):
            size = sizes[index % len(sizes)]
            index += 1
            yield data[start : start + size]
            start += size
            if index % 50 == 0:
                await asyncio.sleep(0)  # now and then, the thread takes what is there

    clip = _prepare(data, chunks())
    same_clip(clip, whole_clip(policy_of("qwen2audio"), data, raw_pcm16(RATE)))


def test_the_lane_is_let_go_before_the_loop_is_woken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread lets the lane go before it hands the clip to the loop, so the loop's
    settle finds it idle: nothing more is queued after the last call (no extra round
    trip in the tail)."""
    pieces: list[str] = []
    put = transport._Lane._put

    def counting(lane: Any, item: Any, **kwargs: Any) -> None:
        work = getattr(item, "_work", None)
        work = getattr(work, "func", work)
        pieces.append(getattr(work, "__qualname__", ""))
        put(lane, item, **kwargs)

    monkeypatch.setattr(transport._Lane, "_put", counting)
    data = noise_pcm16(batch_frames(RATE) * 3, seed=28).tobytes()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), CHUNK_BYTES):
            if start + CHUNK_BYTES >= len(data):
                await asyncio.sleep(0.02)  # the thread has caught up, and slept
            yield data[start : start + CHUNK_BYTES]

    for _ in range(3):
        pieces.clear()
        _prepare(data, chunks(), inline_tail=False)  # (the thread's tail)
        assert pieces[-1] == "_Receiver.prepared"


@pytest.mark.parametrize("channels", [1, 2])
def test_a_non_finite_sample_is_named_by_its_frame_in_the_clip(channels: int) -> None:
    """A NaN in a later batch: the stream's error names the frame the whole clip's decode
    names (its index in the clip, not in the batch)."""
    frames = batch_frames(RATE) * 3
    samples = (noise_pcm16(frames, channels, seed=29) / 40000).astype("<f4")
    nan_frame = batch_frames(RATE) * 2 + 321
    samples[nan_frame * channels + channels - 1] = np.nan
    data = samples.tobytes()
    source_format = SourceFormat.raw("f32", rate_hz=RATE, channels=channels)
    with pytest.raises(NonFiniteSampleError) as whole:
        whole_clip(policy_of("qwen2audio"), data, source_format)

    async def chunks() -> AsyncIterator[bytes]:
        step = CHUNK_BYTES * 2 * channels
        for start in range(0, len(data), step):
            yield data[start : start + step]
            await asyncio.sleep(0)  # (batches pushed one by one)

    with pytest.raises(NonFiniteSampleError) as streamed:
        asyncio.run(
            transport.prepare_stream(
                family_host(), policy_of("qwen2audio"), chunks(), source_format=source_format
            )
        )
    assert streamed.value.frame == whole.value.frame == nan_frame


#: WAV ``fmt`` tag and bits of each in-process encoding.
_WAV_CODES = {
    "u8": (1, 8),
    "pcm16": (1, 16),
    "pcm24": (1, 24),
    "pcm32": (1, 32),
    "f32": (3, 32),
    "f64": (3, 64),
    "alaw": (6, 8),
    "mulaw": (7, 8),
}


def _wav_of(encoding: str, channels: int, frames: int, seed: int) -> bytes:
    """A WAV of ``frames`` frames of noise in ``encoding`` (floats within [-1, 1])."""
    tag, bits = _WAV_CODES[encoding]
    rng = np.random.default_rng(seed)
    count = frames * channels
    if tag == 3:
        dtype = "<f4" if bits == 32 else "<f8"
        payload = (rng.uniform(-0.9, 0.9, count)).astype(dtype).tobytes()
    else:
        payload = rng.integers(0, 256, count * bits // 8, dtype=np.uint8).tobytes()
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, RATE, RATE * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("encoding", sorted(_WAV_CODES))
def test_every_in_process_encoding_decodes_as_the_whole_clip(encoding: str) -> None:
    """The receiver calls the whole clip's sample functions itself: every encoding a WAV
    stream may carry gives the whole clip's samples, mono and stereo, in odd chunks."""
    for channels in (1, 2):
        data = _wav_of(encoding, channels, batch_frames(RATE) * 2 + 100, seed=30)
        clip = asyncio.run(
            transport.prepare_stream(
                family_host(),
                policy_of("qwen2audio"),
                _pieces(data, 1001),
                source_format=SourceFormat("wav"),
            )
        )
        same_clip(clip, whole_clip(policy_of("qwen2audio"), data, SourceFormat("wav")))
