"""Property tests: any bytes give an audiogate error or a valid waveform, never a crash.

Bounded example counts and ``deadline=None`` keep this deterministic in run time on a
small CI box; ``database=None`` keeps hypothesis from writing into the tree.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wavbuild import build_wav, chunk, reference_downmix

from audiogate.decode import WAV, DecodeLimits, SourceFormat, decode, inspect
from audiogate.errors import AudioGateError, NonFiniteSampleError

CLIP = 2

PROPERTY = settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

_IDS = st.sampled_from([b"LIST", b"JUNK", b"fact", b"bext", b"PEAK", b"cue ", b"\x00\xff\x01x"])
_EXTRA = st.lists(st.builds(chunk, _IDS, st.binary(max_size=9)), max_size=3)


@st.composite
def wav_sources(draw):
    encoding = draw(st.sampled_from(["pcm16", "f32"]))
    channels = draw(st.integers(1, 3))
    frames = draw(st.integers(1, 24))
    if encoding == "pcm16":
        values = st.integers(-32768, 32767)
        dtype = np.int16
    else:
        values = st.floats(width=32, allow_nan=True, allow_infinity=True)
        dtype = np.float32
    flat = draw(st.lists(values, min_size=frames * channels, max_size=frames * channels))
    samples = np.array(flat, dtype=dtype).reshape(frames, channels)
    extensible = draw(st.booleans())
    data = build_wav(
        samples,
        encoding=encoding,
        rate_hz=draw(st.sampled_from([8_000, 16_000, 44_100, 48_000])),
        extensible=extensible,
        cb_size=None if extensible else draw(st.sampled_from([None, 0])),
        before=draw(_EXTRA),
        after=draw(_EXTRA),
        data_first=draw(st.booleans()),
    )
    return samples, data


DEFAULT_LIMITS = DecodeLimits()


def _decode_or_audiogate_error(data, *, source_format=WAV, limits=DEFAULT_LIMITS):
    """Decode ``data``; an audiogate error is a valid outcome, anything else fails."""
    failure = None
    try:
        geometry = inspect(data, clip_index=CLIP, source_format=source_format, limits=limits)
        out = decode(data, geometry, clip_index=CLIP, limits=limits)
    except AudioGateError as error:
        failure = error
    if failure is not None:
        assert getattr(failure, "clip_index", CLIP) in (CLIP, None)
        return None
    assert out.dtype == np.float32
    assert out.ndim == 1
    assert out.flags.c_contiguous
    assert not out.flags.writeable
    assert out.shape == (geometry.frames,)
    assert np.isfinite(out).all()
    assert (np.abs(out) <= 1.0).all()
    return out


@PROPERTY
@given(wav_sources())
@pytest.mark.slow
def test_valid_wavs_match_the_naive_reference(source):
    samples, data = source
    finite = np.isfinite(samples).all(axis=1)
    outputs = []
    for variant in (data, bytearray(data), memoryview(data)):
        geometry = inspect(variant, clip_index=CLIP)
        assert geometry.frames == samples.shape[0]
        if finite.all():
            outputs.append(decode(variant, geometry, clip_index=CLIP))
        else:
            with pytest.raises(NonFiniteSampleError) as info:
                decode(variant, geometry, clip_index=CLIP)
            assert info.value.frame == int(np.argmin(finite))
    if outputs:
        expected = reference_downmix(samples).view(np.uint32)
        for out in outputs:
            assert np.array_equal(out.view(np.uint32), expected)


_INTERESTING_U32 = st.sampled_from([0, 1, 2, 3, 7, 15, 16, 17, 18, 22, 40, 0x7FFFFFFF, 0xFFFFFFFF])


@st.composite
def mutated_wavs(draw):
    _, data = draw(wav_sources())
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        if not buffer:
            break
        kinds = ["byte", "u16", "u32", "truncate", "insert", "delete", "riff_header"]
        kind = draw(st.sampled_from(kinds))
        last = len(buffer) - 1
        if kind == "riff_header" or last < 12:
            kind = "byte" if kind == "riff_header" else kind
            position = draw(st.integers(0, min(last, 11)))
        else:  # past the RIFF header, where the chunk and fmt fields are
            position = draw(st.integers(12, last) | st.integers(12, min(last, 60)))
        if kind == "byte":
            buffer[position] = draw(st.integers(0, 255))
        elif kind == "u16":
            value = draw(st.integers(0, 0xFFFF) | st.sampled_from([0, 1, 3, 16, 32, 0xFFFE]))
            buffer[position : position + 2] = struct.pack("<H", value)
        elif kind == "u32":
            value = draw(st.integers(0, 0xFFFFFFFF) | _INTERESTING_U32 | st.just(len(buffer)))
            buffer[position : position + 4] = struct.pack("<I", value)
        elif kind == "truncate":
            del buffer[position:]
        elif kind == "insert":
            buffer[position:position] = draw(st.binary(min_size=1, max_size=5))
        else:
            del buffer[position : position + draw(st.integers(1, 5))]
    if draw(st.booleans()) and len(buffer) >= 8:
        # Keep the RIFF size consistent so the walk gets past the first check.
        buffer[4:8] = struct.pack("<I", len(buffer) - 8)
    return bytes(buffer)


@PROPERTY
@given(mutated_wavs(), st.booleans())
@pytest.mark.slow
def test_mutated_headers_give_audiogate_errors_or_valid_output(data, refuse_all_zero):
    limits = DecodeLimits(refuse_all_zero=refuse_all_zero, max_channels=0xFFFF)
    _decode_or_audiogate_error(data, limits=limits)


@PROPERTY
@given(st.binary(max_size=300), st.booleans())
def test_random_bytes_give_audiogate_errors_or_valid_output(payload, riff_prefix):
    if riff_prefix:
        payload = b"RIFF" + struct.pack("<I", len(payload) + 4) + b"WAVE" + payload
    _decode_or_audiogate_error(payload)


@PROPERTY
@given(
    st.binary(max_size=200),
    st.sampled_from(["pcm16", "f32"]),
    st.integers(-3, 1 << 20) | st.just(1 << 40),
    st.integers(-3, 12),
)
def test_random_raw_sources_give_audiogate_errors_or_valid_output(
    payload, encoding, rate_hz, channels
):
    declared = SourceFormat.raw(encoding, rate_hz=rate_hz, channels=channels)
    out = _decode_or_audiogate_error(payload, source_format=declared)
    if out is not None:
        assert out.shape[0] * channels * (2 if encoding == "pcm16" else 4) == len(payload)
