"""A PCM stream's chunks on the loop and its last frames (#34): the transport appends each
chunk and compares one integer (no call per chunk; a batch, the reservation's steps and
a WAV's header call the receiver), and ``finish()`` decodes the frames left where they
lie (no copy out of the buffer), with the whole clip's result and accounting."""

from __future__ import annotations

import asyncio
import hashlib
import struct
from typing import Any

import pytest
from stream_helpers import (
    byte_chunks,
    family_host,
    noise_pcm16,
    policy_of,
    raw_pcm16,
    same_clip,
    whole_clip,
)

import audiogate.streaming.transport as transport
from audiogate.decode.geometry import SourceFormat
from audiogate.pipeline.prepared import PreparedClip
from audiogate.streaming.stage import batch_frames

RATE = 16_000
BATCH = batch_frames(RATE)


def _wav(samples: bytes) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, RATE, RATE * 2, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _stream(data: bytes, source_format: SourceFormat, sizes: list[int], **kw: Any) -> PreparedClip:
    return asyncio.run(
        transport.prepare_stream(
            family_host(),
            policy_of("qwen2audio"),
            byte_chunks(data, sizes),
            source_format=source_format,
            **kw,
        )
    )


@pytest.mark.parametrize("container", ["raw", "wav"])
def test_chunks_are_taken_without_a_call_each(
    monkeypatch: pytest.MonkeyPatch, container: str
) -> None:
    samples = noise_pcm16(BATCH * 2 + 321, seed=41).tobytes()
    data = _wav(samples) if container == "wav" else samples
    source_format = SourceFormat("wav") if container == "wav" else raw_pcm16(RATE)

    def called(*_args: object) -> bool:
        raise AssertionError("feed() called per chunk")

    arrived: list[int] = []
    slow_path = transport._Receiver.arrived

    def counted(receiver: Any) -> bool:
        arrived.append(len(receiver.pending))
        return slow_path(receiver)

    monkeypatch.setattr(transport._Receiver, "feed", called)
    monkeypatch.setattr(transport._Receiver, "arrived", counted)
    chunks = -(-len(data) // 640)
    clip = _stream(data, source_format, [640])
    same_clip(clip, whole_clip(policy_of("qwen2audio"), data, source_format))
    assert clip.encoded_bytes == len(data)
    assert clip.sha256 == hashlib.sha256(data).hexdigest()
    assert 0 < len(arrived) < chunks // 10


@pytest.mark.parametrize("inline_tail", [True, False])
@pytest.mark.parametrize("extra", [777, 4321, BATCH - 1])
def test_the_last_frames_are_decoded_where_they_lie(
    monkeypatch: pytest.MonkeyPatch, inline_tail: bool, extra: int
) -> None:
    decoded: list[tuple[int, int]] = []  # (frames, is the receiver's own buffer)
    decode = transport._Receiver._decode

    def recording(receiver: Any, data: Any, frames: int) -> None:
        decoded.append((frames, data is receiver.pending))
        decode(receiver, data, frames)

    monkeypatch.setattr(transport._Receiver, "_decode", recording)
    data = noise_pcm16(BATCH * 2 + extra, seed=42).tobytes()
    clip = _stream(data, raw_pcm16(RATE), [640, 333], inline_tail=inline_tail)
    same_clip(clip, whole_clip(policy_of("qwen2audio"), data, raw_pcm16(RATE)))
    assert clip.encoded_bytes == len(data)
    assert clip.sha256 == hashlib.sha256(data).hexdigest()
    assert decoded[-1][1], decoded  # the frames after the last batch handed over
    assert sum(frames for frames, _ in decoded) == BATCH * 2 + extra


@pytest.mark.parametrize("channels", [1, 2])
def test_mono_pcm16_is_decoded_by_one_ufunc(monkeypatch: pytest.MonkeyPatch, channels: int) -> None:
    """Mono PCM16 batches skip the decoder's block loop (the same float32 values); other
    layouts keep it."""
    looped: list[int] = []
    downmix = transport.downmix_pcm16

    def counted(samples: Any, out: Any, **kwargs: Any) -> None:
        looped.append(out.shape[0])
        downmix(samples, out, **kwargs)

    monkeypatch.setattr(transport, "downmix_pcm16", counted)
    samples = noise_pcm16(BATCH * 2 + 999, channels, seed=43)
    samples[::7] = -32768  # (the most negative value: exactly -1.0)
    samples[::11] = 32767
    data = samples.tobytes()
    clip = _stream(data, raw_pcm16(RATE, channels), [640 * channels])
    same_clip(clip, whole_clip(policy_of("qwen2audio"), data, raw_pcm16(RATE, channels)))
    assert (looped == []) == (channels == 1)
