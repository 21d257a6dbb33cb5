"""Any chunking gives the whole-clip result, for every shipped family (issue #34)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_helpers import (
    FAMILIES,
    byte_chunks,
    chunked,
    family_host,
    noise_pcm16,
    policy_of,
    raw_pcm16,
    same_clip,
    whole_clip,
)

from audiogate.cancel import NEVER
from audiogate.decode import inspect
from audiogate.dsp.whisper import whisper_log_mel, whisper_plan
from audiogate.streaming.frontend import IncrementalClipStream, open_clip_stream
from audiogate.streaming.transport import prepare_stream, streamed_prepared_clip
from audiogate.streaming.whisper import WhisperLogMelStream

RATES = (16_000, 8_000, 22_050, 44_100, 48_000)

#: Families whose package declares ``streaming.open_feature_stream`` for the numpy
#: backend (the others may accumulate: the result is the same either way).
WHISPER_FAMILIES = ("audioflamingo3", "glmasr", "qwen25omni", "qwen2audio", "qwen3omni", "voxtral")
INCREMENTAL = (*WHISPER_FAMILIES, "granitespeech")


# Chunk sizes in source frames: 1 sample; 10 and 20 ms; random; and small primes that
# put borders everywhere inside soxr's filter and inside the 400-sample STFT windows.
def _chunkings(rate: int) -> st.SearchStrategy[list[int]]:
    return st.one_of(
        st.just([rate // 100]),
        st.just([rate // 50]),
        st.lists(st.integers(1, rate // 10), min_size=1, max_size=12),
        st.lists(st.sampled_from([1, 2, 3, 7, 13, 159, 161, 199, 401]), min_size=1, max_size=6),
    )


@st.composite
def _clips(draw: st.DrawFn) -> tuple[int, int, list[int], int]:
    rate = draw(st.sampled_from(RATES))
    seconds = draw(st.floats(0.4, 3.2))
    sizes = draw(_chunkings(rate))
    seed = draw(st.integers(0, 2**16))
    return rate, int(rate * seconds), sizes, seed


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clip=_clips())
def test_any_chunking_gives_the_whole_clip(
    family: str, clip: tuple[int, int, list[int], int]
) -> None:
    rate, frames, sizes, seed = clip
    policy = policy_of(family)
    source_format = raw_pcm16(rate)
    data = noise_pcm16(frames, seed=seed).tobytes()
    whole = whole_clip(policy, data, source_format)
    host = family_host()
    stream = open_clip_stream(
        host, policy, inspect(data, clip_index=0, source_format=source_format)
    )
    if family in INCREMENTAL:
        assert isinstance(stream, IncrementalClipStream)
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
    for part in chunked(frames, sizes):
        stream.push(samples[part])
    streamed = stream.finish()
    same_clip(streamed_prepared_clip(streamed, sha256=whole.sha256, encoded_bytes=len(data)), whole)


@pytest.mark.parametrize("family", sorted(INCREMENTAL))
def test_one_sample_chunks(family: str) -> None:
    """One sample per push through soxr and the frames, at 44.1 kHz."""
    rate, frames = 44_100, 44_100 // 2
    policy = policy_of(family)
    data = noise_pcm16(frames, seed=3).tobytes()
    whole = whole_clip(policy, data, raw_pcm16(rate))
    header = inspect(data, clip_index=0, source_format=raw_pcm16(rate))
    stream = open_clip_stream(family_host(), policy, header)
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
    for index in range(frames):
        stream.push(samples[index : index + 1])
    streamed = stream.finish()
    assert streamed.incremental
    same_clip(streamed_prepared_clip(streamed, sha256=whole.sha256, encoded_bytes=len(data)), whole)


@settings(max_examples=40, deadline=None)
@given(
    padding=st.sampled_from(["max_length", "longest", "multiple", "windows"]),
    samples=st.integers(201, 9_000),
    sizes=st.lists(st.integers(1, 900), min_size=1, max_size=8),
    n_mels=st.sampled_from([80, 128]),
)
def test_whisper_stream_equals_whisper_log_mel(
    padding: str, samples: int, sizes: list[int], n_mels: int
) -> None:
    """Small windows (2,400 samples) put many window and block borders in a short clip."""
    chunk = 2_400
    if padding == "max_length":
        samples = min(samples, chunk)
    waveform = (np.random.default_rng(samples).standard_normal(samples) * 0.1).astype(np.float32)
    plan = whisper_plan(samples, n_mels=n_mels, padding=padding, chunk_samples=chunk)  # type: ignore[arg-type]
    features, mask = whisper_log_mel(waveform, plan, clip_index=0, cancel=NEVER)
    stream = WhisperLogMelStream(n_mels=n_mels, padding=padding, chunk_samples=chunk)  # type: ignore[arg-type]
    for part in chunked(samples, sizes):
        stream.push(waveform[part])
    streamed_plan, streamed, streamed_mask = stream.finish()
    assert streamed_plan == plan
    assert np.array_equal(streamed.view(np.uint32), features.view(np.uint32))
    assert np.array_equal(streamed_mask, mask)
    assert not streamed.flags.writeable


@pytest.mark.parametrize("family", ["qwen2audio", "gemma3n"])
@pytest.mark.parametrize("channels", [1, 2])
def test_transport_raw_and_wav(family: str, channels: int) -> None:
    """Byte chunks (frames split across chunks) of raw PCM and of a WAV stream."""
    import io
    import wave

    rate, frames = 22_050, 22_050 * 2
    policy = policy_of(family)
    pcm = noise_pcm16(frames, channels, seed=5).tobytes()
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(pcm)
    wav = buffer.getvalue()
    from audiogate.decode.geometry import SourceFormat

    for data, source_format in ((pcm, raw_pcm16(rate, channels)), (wav, SourceFormat("wav"))):
        whole = whole_clip(policy, data, source_format)
        for sizes in ([1, 3, 5], [441 * channels * 2 + 1], [7000, 13]):
            streamed = asyncio.run(
                prepare_stream(
                    family_host(), policy, byte_chunks(data, sizes), source_format=source_format
                )
            )
            assert streamed.sha256 == whole.sha256
            same_clip(streamed, whole)


@pytest.mark.parametrize("family", ["voxtral", "phi4mm"])
def test_transport_raw_f32_stereo(family: str) -> None:
    """f32 frames (8 bytes in stereo) split anywhere across byte chunks."""
    from audiogate.decode.geometry import SourceFormat

    rate, frames = 48_000, 48_000 * 3 // 2
    policy = policy_of(family)
    samples = noise_pcm16(frames, 2, seed=9).astype("<f4") / np.float32(40000)
    data = samples.tobytes()
    source_format = SourceFormat.raw("f32", rate_hz=rate, channels=2)
    whole = whole_clip(policy, data, source_format)
    for sizes in ([3, 5, 8191], [1920 * 8]):
        streamed = asyncio.run(
            prepare_stream(
                family_host(), policy, byte_chunks(data, sizes), source_format=source_format
            )
        )
        same_clip(streamed, whole)
