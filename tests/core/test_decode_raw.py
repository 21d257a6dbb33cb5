"""Headerless pcm16 / f32 sources: declared geometry, identity with WAV, rejections."""

from __future__ import annotations

import numpy as np
import pytest
from wavbuild import build_wav, encode_samples, reference_downmix

from audiogate.cancel import CancelToken
from audiogate.decode import WAV, DecodeLimits, SourceFormat, decode, inspect
from audiogate.decode.samples import BLOCK_FRAMES
from audiogate.errors import (
    DecodeError,
    EmptyAudioError,
    LimitError,
    NonFiniteSampleError,
    PreprocessCancelled,
)

CLIP = 3


def _source(encoding, frames, channels, seed=0):
    rng = np.random.default_rng(seed)
    if encoding == "pcm16":
        return rng.integers(-32768, 32768, size=(frames, channels), dtype=np.int16)
    return (rng.standard_normal((frames, channels)) * 0.7).astype(np.float32)


@pytest.mark.parametrize("frames", [1, 2, BLOCK_FRAMES - 1, BLOCK_FRAMES, BLOCK_FRAMES + 1])
@pytest.mark.parametrize("channels", [1, 2, 3])
@pytest.mark.parametrize("encoding", ["pcm16", "f32"])
def test_raw_matches_the_same_samples_in_a_wav(encoding, channels, frames):
    source = _source(encoding, frames, channels, seed=frames)
    raw = encode_samples(source, encoding)
    declared = SourceFormat.raw(encoding, rate_hz=44_100, channels=channels)
    geometry = inspect(raw, clip_index=CLIP, source_format=declared)
    assert geometry.container == "raw"
    assert (geometry.encoding, geometry.rate_hz, geometry.channels) == (encoding, 44_100, channels)
    assert (geometry.frames, geometry.data_offset, geometry.data_length) == (
        frames,
        0,
        len(raw),
    )
    assert geometry.duration_us == frames * 1_000_000 // 44_100
    out = decode(raw, geometry, clip_index=CLIP)
    wav = build_wav(source, encoding=encoding, rate_hz=44_100)
    from_wav = decode(wav, inspect(wav, clip_index=CLIP), clip_index=CLIP)
    assert np.array_equal(out.view(np.uint32), from_wav.view(np.uint32))
    assert not out.flags.writeable
    for variant in (bytearray(raw), memoryview(raw)):
        again = decode(
            variant, inspect(variant, clip_index=CLIP, source_format=declared), clip_index=CLIP
        )
        assert np.array_equal(again.view(np.uint32), out.view(np.uint32))
    if frames < 100:
        assert np.array_equal(out.view(np.uint32), reference_downmix(source).view(np.uint32))


def test_raw_bytes_are_samples_even_if_they_look_like_riff():
    raw = b"RIFF\x00\x00\x00\x00"
    declared = SourceFormat.raw("pcm16", rate_hz=16_000, channels=1)
    geometry = inspect(raw, clip_index=CLIP, source_format=declared)
    assert geometry.frames == 4
    out = decode(raw, geometry, clip_index=CLIP)
    assert out[0] == np.frombuffer(b"RI", "<i2")[0] / 32768


@pytest.mark.parametrize(
    ("raw", "encoding", "channels", "error", "code", "fragments"),
    [
        (b"", "pcm16", 1, EmptyAudioError, "empty", ["empty"]),
        (b"", "f32", 2, EmptyAudioError, "empty", []),
        (bytes(3), "pcm16", 1, DecodeError, "partial_frame", ["3 bytes", "2-byte"]),
        (bytes(6), "pcm16", 2, DecodeError, "partial_frame", ["4-byte"]),
        (bytes(12), "f32", 2, DecodeError, "partial_frame", ["8-byte"]),
        (bytes(4), "pcm16", 0, DecodeError, "zero_channels_or_rate", ["0 channel"]),
        (bytes(4), "pcm16", -2, DecodeError, "zero_channels_or_rate", ["-2 channel"]),
    ],
)
def test_raw_rejections(raw, encoding, channels, error, code, fragments):
    declared = SourceFormat.raw(encoding, rate_hz=16_000, channels=channels)
    with pytest.raises(error) as info:
        inspect(raw, clip_index=CLIP, source_format=declared)
    assert type(info.value) is error
    assert info.value.code == code
    assert info.value.clip_index == CLIP
    assert f"clip {CLIP + 1}" in str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize("rate_hz", [0, -16_000])
def test_raw_rate_must_be_positive(rate_hz):
    declared = SourceFormat.raw("f32", rate_hz=rate_hz, channels=1)
    with pytest.raises(DecodeError) as info:
        inspect(bytes(8), clip_index=CLIP, source_format=declared)
    assert info.value.code == "zero_channels_or_rate"


def test_raw_policy_limits_apply():
    raw = bytes(4 * 10)
    with pytest.raises(LimitError, match="source sample rate"):
        inspect(
            raw, clip_index=CLIP, source_format=SourceFormat.raw("f32", rate_hz=384_000, channels=1)
        )
    with pytest.raises(LimitError, match="source channels"):
        inspect(
            raw,
            clip_index=CLIP,
            source_format=SourceFormat.raw("pcm16", rate_hz=16_000, channels=10),
        )
    with pytest.raises(DecodeError) as info:
        inspect(
            raw,
            clip_index=CLIP,
            source_format=SourceFormat.raw("f32", rate_hz=22_050, channels=1),
            limits=DecodeLimits(allowed_rates_hz=frozenset({16_000})),
        )
    assert info.value.code == "rate_not_allowed"
    with pytest.raises(LimitError, match="source frames per clip"):
        inspect(
            raw,
            clip_index=CLIP,
            source_format=SourceFormat.raw("f32", rate_hz=16_000, channels=1),
            limits=DecodeLimits(max_frames=9),
        )


def test_raw_non_finite_and_all_zero():
    declared = SourceFormat.raw("f32", rate_hz=16_000, channels=2)
    raw = encode_samples(np.array([[0.0, 0.0], [0.0, np.nan]], np.float32), "f32")
    with pytest.raises(NonFiniteSampleError) as info:
        decode(raw, inspect(raw, clip_index=CLIP, source_format=declared), clip_index=CLIP)
    assert info.value.frame == 1
    zeros = bytes(16)
    limits = DecodeLimits(refuse_all_zero=True)
    with pytest.raises(DecodeError) as zero_info:
        decode(
            zeros,
            inspect(zeros, clip_index=CLIP, source_format=declared),
            clip_index=CLIP,
            limits=limits,
        )
    assert zero_info.value.code == "all_zero"


def test_raw_inspect_is_cancellable():
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled) as info:
        inspect(
            bytes(4),
            clip_index=CLIP,
            source_format=SourceFormat.raw("pcm16", rate_hz=8_000, channels=1),
            cancel=token,
        )
    assert info.value.checkpoint == "Decode"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("raw",), ValueError),  # raw needs an encoding
        (("raw", "pcm24", 16_000, 1), ValueError),
        (("raw", "pcm16", None, 1), TypeError),
        (("raw", "pcm16", 16_000, None), TypeError),
        (("raw", "pcm16", 16_000.0, 1), TypeError),
        (("raw", "pcm16", 16_000, True), TypeError),
        (("wav", "pcm16"), ValueError),
        (("wav", None, 16_000), ValueError),
        (("wav", None, None, 2), ValueError),
        (("amr",), ValueError),
        (("flac", "pcm16"), ValueError),
    ],
)
def test_source_format_validation(args, error):
    with pytest.raises(error):
        SourceFormat(*args)


def test_source_format_constructors():
    assert SourceFormat("wav") == WAV
    assert SourceFormat.raw("f32", rate_hz=48_000, channels=2) == SourceFormat(
        "raw", "f32", 48_000, 2
    )
