"""Strict RIFF/WAVE decoding: oracles, edge lengths, path identity and every rejection."""

from __future__ import annotations

import io
import re
import struct
import tracemalloc

import attrs
import numpy as np
import pytest
import scipy.io.wavfile
import soundfile
import wavbuild
from wavbuild import (
    FORMAT_EXTENSIBLE,
    FORMAT_IEEE_FLOAT,
    FORMAT_PCM,
    build_wav,
    chunk,
    fmt_payload,
    guid,
    reference_downmix,
    riff,
)

from audiogate import decode as decode_pkg
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.decode import (
    WAV,
    ClipGeometry,
    DecodeLimits,
    SourceFormat,
    decode,
    inspect,
)
from audiogate.decode import decoder as decoder_module
from audiogate.decode.samples import BLOCK_FRAMES
from audiogate.decode.wav import MAX_CHUNKS
from audiogate.errors import (
    AudioGateError,
    DecodeError,
    EmptyAudioError,
    LimitError,
    NonFiniteSampleError,
    PreprocessCancelled,
)

CLIP = 7  # a clip index that cannot be confused with a count or an offset in messages


DEFAULT_LIMITS = DecodeLimits()


def run(data, *, limits=DEFAULT_LIMITS, cancel=None, source_format=WAV, clip_index=CLIP):
    kwargs = {} if cancel is None else {"cancel": cancel}
    geometry = inspect(
        data, clip_index=clip_index, source_format=source_format, limits=limits, **kwargs
    )
    return geometry, decode(data, geometry, clip_index=clip_index, limits=limits, **kwargs)


def bits_equal(a, b):
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def numpy_oracle(samples_float64):
    """``soundfile.read(dtype="float64").mean(axis=1)``, clamped, as float32."""
    return np.clip(samples_float64.mean(axis=1), -1.0, 1.0).astype(np.float32)


class CountingToken(CancelToken):
    """Counts polls; cancels itself on poll number ``cancel_on`` (1-based)."""

    def __init__(self, cancel_on=None):
        super().__init__()
        self.calls = 0
        self.cancel_on = cancel_on

    def check(self, checkpoint, clip_index=None):
        self.calls += 1
        if self.cancel_on is not None and self.calls >= self.cancel_on:
            self.cancel()
        super().check(checkpoint, clip_index)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _pcm(frames, channels, seed=0):
    return _rng(seed).integers(-32768, 32768, size=(frames, channels), dtype=np.int16)


def _float(frames, channels, seed=0):
    # Wide magnitudes (clamping, cancellation between channels) and some signed zeros.
    rng = _rng(seed)
    x = rng.standard_normal((frames, channels)) * 10.0 ** rng.integers(-8, 2, (frames, channels))
    x = x.astype(np.float32)
    x[rng.random((frames, channels)) < 0.05] = -0.0
    x[rng.random((frames, channels)) < 0.02] = 0.0
    return x


# --- golden values -------------------------------------------------------------------


def test_golden_stereo_float_downmix_and_clamp():
    data = build_wav(np.array([[2.0, 0.0], [-2.0, 0.0], [0.5, -0.5]]), encoding="f32")
    _, out = run(data)
    assert out.tolist() == [1.0, -1.0, 0.0]


def test_golden_pcm16_extremes():
    data = build_wav(np.array([-32768, 32767, 0, 1, -1], dtype=np.int16))
    _, out = run(data)
    assert out.tolist() == [-1.0, 32767 / 32768, 0.0, 1 / 32768, -1 / 32768]


def test_golden_pcm16_stereo_extremes_are_not_clamped():
    data = build_wav(np.array([[32767, 32767], [-32768, -32768], [-32768, 32767]], np.int16))
    _, out = run(data)
    assert out.tolist() == [32767 / 32768, -1.0, -1 / 65536]


def test_negative_zero_frames_decode_to_positive_zero():
    # mlxcel's decode_wav accumulator starts at 0.0, and so does numpy's mean: -0.0 + 0.0 == +0.0.
    data = build_wav(np.array([[-0.0, -0.0], [-0.0, 0.0]], np.float32), encoding="f32")
    _, out = run(data)
    assert not np.signbit(out).any()
    mono = build_wav(np.array([-0.0, -0.5], np.float32), encoding="f32")
    _, out = run(mono)
    assert bits_equal(out, [0.0, -0.5])


def test_finite_values_beyond_full_scale_are_clamped_not_refused():
    big = np.finfo(np.float32).max
    data = build_wav(np.array([[big, big], [-big, -big], [1.5, 0.25]], np.float32), encoding="f32")
    _, out = run(data)
    assert out.tolist() == [1.0, -1.0, 0.875]


# --- oracles: files written by soundfile and scipy ------------------------------------

RATES = [8_000, 16_000, 44_100, 48_000]


def _soundfile_bytes(samples, rate_hz, *, subtype, container):
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate_hz, subtype=subtype, format=container)
    return buffer.getvalue()


@pytest.mark.parametrize("rate_hz", RATES)
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize(
    ("subtype", "container", "format_tag"),
    [
        ("PCM_16", "WAV", FORMAT_PCM),
        ("FLOAT", "WAV", FORMAT_IEEE_FLOAT),
        ("PCM_16", "WAVEX", FORMAT_EXTENSIBLE),
        ("FLOAT", "WAVEX", FORMAT_EXTENSIBLE),
    ],
)
def test_matches_soundfile(rate_hz, channels, subtype, container, format_tag):
    frames = 3_001
    if subtype == "PCM_16":
        source = _pcm(frames, channels, seed=rate_hz)
    else:
        source = _float(frames, channels, seed=rate_hz)
    data = _soundfile_bytes(source, rate_hz, subtype=subtype, container=container)
    assert struct.unpack_from("<H", data, 20)[0] == format_tag  # the layout under test

    geometry, out = run(data)
    expected, sf_rate = soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)
    assert (geometry.rate_hz, geometry.channels, geometry.frames) == (sf_rate, channels, frames)
    assert geometry.encoding == ("pcm16" if subtype == "PCM_16" else "f32")
    assert geometry.duration_us == frames * 1_000_000 // rate_hz
    assert bits_equal(out, numpy_oracle(expected))


@pytest.mark.parametrize("rate_hz", RATES)
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("dtype", [np.int16, np.float32])
def test_matches_scipy_wavfile(rate_hz, channels, dtype):
    frames = 2_049
    source = _pcm(frames, channels, seed=3) if dtype == np.int16 else _float(frames, channels, 3)
    buffer = io.BytesIO()
    scipy.io.wavfile.write(buffer, rate_hz, source if channels > 1 else source[:, 0])
    data = buffer.getvalue()

    geometry, out = run(data)
    sp_rate, read = scipy.io.wavfile.read(io.BytesIO(data))
    read = read.reshape(frames, channels).astype(np.float64)
    if dtype == np.int16:
        read /= 32768.0
    assert (geometry.rate_hz, geometry.channels) == (sp_rate, channels)
    assert bits_equal(out, numpy_oracle(read))


def test_soundfile_metadata_chunks_are_skipped():
    source = _pcm(1_000, 2)
    buffer = io.BytesIO()
    with soundfile.SoundFile(buffer, "w", 16_000, 2, subtype="PCM_16", format="WAV") as handle:
        handle.title = "a title of odd length"
        handle.comment = "x"
        handle.write(source)
    data = buffer.getvalue()
    assert b"LIST" in data
    _, out = run(data)
    assert bits_equal(out, reference_downmix(source))


@pytest.mark.parametrize("channels", [3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("encoding", ["pcm16", "f32"])
def test_many_channels_match_naive_reference(channels, encoding):
    # 3, 5, 6 and 7 channels: the PCM16 path must divide, not multiply by a reciprocal.
    source = _pcm(2_000, channels, 11) if encoding == "pcm16" else _float(2_000, channels, 11)
    _, out = run(build_wav(source, encoding=encoding))
    assert bits_equal(out, reference_downmix(source))
    wide = source.astype(np.float64) / (32768.0 if encoding == "pcm16" else 1.0)
    assert bits_equal(out, numpy_oracle(wide))


# --- edge lengths and block boundaries -------------------------------------------------


@pytest.mark.parametrize(
    "frames", [1, 2, 3, BLOCK_FRAMES - 1, BLOCK_FRAMES, BLOCK_FRAMES + 1, 2 * BLOCK_FRAMES + 5]
)
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("encoding", ["pcm16", "f32"])
def test_edge_lengths(frames, channels, encoding):
    source = _pcm(frames, channels, frames) if encoding == "pcm16" else _float(frames, channels)
    geometry, out = run(build_wav(source, encoding=encoding))
    assert geometry.frames == frames
    assert out.shape == (frames,)
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    assert not out.flags.writeable
    wide = source.astype(np.float64) / (32768.0 if encoding == "pcm16" else 1.0)
    assert bits_equal(out, numpy_oracle(wide))


def test_output_is_read_only():
    _, out = run(build_wav(_pcm(10, 2)))
    with pytest.raises(ValueError, match="read-only"):
        out[0] = 0.5


# --- path against path -----------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["pcm16", "f32"])
@pytest.mark.parametrize("extensible", [False, True])
def test_buffer_types_and_layouts_are_bit_identical(encoding, extensible):
    frames = BLOCK_FRAMES + 17
    source = _pcm(frames, 2, 5) if encoding == "pcm16" else _float(frames, 2, 5)
    plain = build_wav(source, encoding=encoding)
    _, expected = run(plain)
    variants = [
        plain,
        bytearray(plain),
        memoryview(plain),
        memoryview(bytearray(plain)),
        build_wav(source, encoding=encoding, extensible=extensible),
        build_wav(source, encoding=encoding, cb_size=0),
        build_wav(
            source,
            encoding=encoding,
            before=[chunk(b"LIST", b"INFOabc"), chunk(b"JUNK", bytes(3))],
            after=[chunk(b"bext", b"x" * 9)],
        ),
        build_wav(source, encoding=encoding, data_first=True, after=[chunk(b"fact", b"1234")]),
    ]
    for variant in variants:
        _, out = run(variant)
        assert bits_equal(out, expected)
    raw = wavbuild.encode_samples(source, encoding)
    raw_format = SourceFormat.raw(encoding, rate_hz=16_000, channels=2)
    _, out = run(raw, source_format=raw_format)
    assert bits_equal(out, expected)


def test_unaligned_float_data_decodes():
    # A 6-byte chunk before data puts the float samples 2 bytes off a 4-byte boundary.
    source = _float(1_000, 2, 9)
    data = build_wav(source, encoding="f32", before=[chunk(b"JUNK", bytes(6))])
    geometry, out = run(data)
    assert geometry.data_offset % 4 == 2
    assert bits_equal(out, reference_downmix(source))


def test_shaped_and_typed_memoryviews_are_read_as_bytes():
    source = _pcm(64, 2, 1)
    data = build_wav(source)  # RIFF lengths are always even
    as_bytes = np.frombuffer(data, dtype=np.uint8)
    for view in (memoryview(as_bytes.reshape(-1, 2)), memoryview(as_bytes.view(np.int16))):
        assert view.ndim == 2 or view.format != "B"
        _, out = run(view)
        assert bits_equal(out, reference_downmix(source))


def test_non_contiguous_memoryview_is_refused():
    data = build_wav(_pcm(64, 2))
    strided = memoryview(np.frombuffer(data * 2, dtype=np.uint8)[::2])
    with pytest.raises(DecodeError) as info:
        inspect(strided, clip_index=CLIP)
    assert info.value.code == "buffer_not_contiguous"
    assert info.value.clip_index == CLIP


def test_bytearray_is_not_left_locked():
    data = bytearray(build_wav(_pcm(100, 2)))
    run(data)
    data.extend(b"\x00")  # would raise BufferError if an export were still held
    with pytest.raises(NonFiniteSampleError):
        run(bytearray(build_wav(np.array([np.nan], np.float32), encoding="f32")))


# --- rejections ------------------------------------------------------------------------

FMT = chunk(b"fmt ", fmt_payload())
DATA = chunk(b"data", b"\x01\x00\x02\x00")


def _fmt(**fields):
    return chunk(b"fmt ", fmt_payload(**fields))


def _data(frames=2, frame_bytes=2):
    return chunk(b"data", bytes(range(1, frames * frame_bytes + 1)))


REJECTIONS = {
    # name: (bytes, error class, code, fragments the message must contain). PCM at 8, 24
    # and 32 bits, float64, A-law and µ-law (plain and extensible) are accepted since
    # issue #20: tests/core/test_decode_formats.py.
    "too_short": (b"RIFF\x04\x00\x00\x00WAV", DecodeError, "too_short", ["RIFF/WAVE", "11"]),
    "not_riff": (b"OggS" + bytes(40), DecodeError, "not_riff_wave", ["RIFF/WAVE"]),
    "rifx": (b"RIFX" + riff(FMT, DATA)[4:], DecodeError, "not_riff_wave", ["RIFF/WAVE"]),
    # RF64 is accepted (tests/core/test_decode_formats.py), but its size field must defer
    # to a ds64 chunk.
    "rf64": (
        b"RF64" + riff(FMT, DATA)[4:],
        DecodeError,
        "riff_size_mismatch",
        ["RF64", "0xFFFFFFFF"],
    ),
    "not_wave": (riff(FMT, DATA, form=b"AVI "), DecodeError, "not_riff_wave", ["RIFF/WAVE"]),
    "riff_size_large": (
        riff(FMT, DATA, riff_size=len(riff(FMT, DATA)) - 8 + 2),
        DecodeError,
        "riff_size_mismatch",
        [f"{len(riff(FMT, DATA)) - 8 + 2}", f"{len(riff(FMT, DATA))} bytes"],
    ),
    "riff_size_small": (riff(FMT, DATA) + b"\x00\x00", DecodeError, "riff_size_mismatch", []),
    "riff_size_sentinel": (
        riff(FMT, DATA, riff_size=0xFFFFFFFF),
        DecodeError,
        "riff_size_mismatch",
        ["4294967295"],
    ),
    "truncated_chunk_header": (
        riff(FMT, DATA, b"LIS"),
        DecodeError,
        "truncated_chunk_header",
        [],
    ),
    "truncated_chunk_header_before_data": (
        riff(FMT, b"da"),
        DecodeError,
        "truncated_chunk_header",
        [],
    ),
    "chunk_past_end": (
        riff(FMT, chunk(b"data", b"\x01\x00", size=1000)),
        DecodeError,
        "chunk_past_end",
        ["'data'", "1000"],
    ),
    "streaming_sentinel_is_not_special": (
        riff(FMT, chunk(b"data", b"\x01\x00", size=0xFFFFFFFF)),
        DecodeError,
        "chunk_past_end",
        ["4294967295"],
    ),
    "trailing_chunk_past_end": (
        riff(FMT, DATA, chunk(b"LIST", b"abcd", size=6)),
        DecodeError,
        "chunk_past_end",
        ["'LIST'"],
    ),
    "missing_final_pad_byte": (
        riff(FMT, DATA, chunk(b"LIST", b"abc", pad=False)),
        DecodeError,
        "missing_pad_byte",
        ["'LIST'", "3"],
    ),
    "missing_pad_byte_on_data": (
        riff(FMT, chunk(b"data", b"\x01\x00\x02", pad=False)),
        DecodeError,
        "missing_pad_byte",
        [],
    ),
    "missing_fmt": (riff(DATA), DecodeError, "missing_fmt", ["'fmt '"]),
    "missing_data": (riff(FMT, chunk(b"LIST", b"ab")), DecodeError, "missing_data", ["'data'"]),
    "duplicate_fmt": (riff(FMT, FMT, DATA), DecodeError, "duplicate_fmt", ["'fmt '", "12"]),
    "duplicate_fmt_after_data": (riff(FMT, DATA, FMT), DecodeError, "duplicate_fmt", []),
    "duplicate_data": (riff(FMT, DATA, DATA), DecodeError, "duplicate_data", ["'data'"]),
    "duplicate_data_after_trailing_chunk": (
        riff(DATA, FMT, chunk(b"JUNK", b""), DATA),
        DecodeError,
        "duplicate_data",
        [],
    ),
    "fmt_too_short": (
        riff(chunk(b"fmt ", fmt_payload()[:14]), DATA),
        DecodeError,
        "fmt_too_short",
        ["14", "16"],
    ),
    "float16": (riff(_fmt(format_tag=3, bits=16), DATA), DecodeError, "unsupported_format", []),
    "adpcm": (riff(_fmt(format_tag=2, bits=4), DATA), DecodeError, "unsupported_format", ["2"]),
    "mp3": (riff(_fmt(format_tag=0x55, bits=0), DATA), DecodeError, "unsupported_format", []),
    "pcm_fmt_20": (
        riff(chunk(b"fmt ", fmt_payload() + bytes(4)), DATA),
        DecodeError,
        "fmt_size_mismatch",
        ["20"],
    ),
    "pcm_fmt_40": (
        riff(chunk(b"fmt ", fmt_payload(cb_size=22) + bytes(22)), DATA),
        DecodeError,
        "fmt_size_mismatch",
        ["40"],
    ),
    "cb_size_18": (riff(_fmt(cb_size=2), DATA), DecodeError, "bad_cb_size", ["cbSize 2"]),
    "extensible_fmt_18": (
        riff(chunk(b"fmt ", fmt_payload(format_tag=FORMAT_EXTENSIBLE)[:18]), DATA),
        DecodeError,
        "fmt_size_mismatch",
        ["18", "40"],
    ),
    "extensible_fmt_42": (
        riff(chunk(b"fmt ", fmt_payload(format_tag=FORMAT_EXTENSIBLE) + bytes(2)), DATA),
        DecodeError,
        "fmt_size_mismatch",
        [],
    ),
    "extensible_cb_size": (
        riff(_fmt(format_tag=FORMAT_EXTENSIBLE, cb_size=0), DATA),
        DecodeError,
        "bad_cb_size",
        ["22"],
    ),
    "extensible_valid_bits": (
        riff(_fmt(format_tag=FORMAT_EXTENSIBLE, valid_bits=20), DATA),
        DecodeError,
        "extensible_valid_bits",
        ["20", "16"],
    ),
    "extensible_foreign_guid": (
        riff(_fmt(format_tag=FORMAT_EXTENSIBLE, sub_format_guid=guid(1)[:15] + b"\x00"), DATA),
        DecodeError,
        "unsupported_subformat",
        ["00000001-0000-0010-8000-00aa00389b00"],
    ),
    "extensible_float16": (
        riff(_fmt(format_tag=FORMAT_EXTENSIBLE, bits=16, sub_format_guid=guid(3)), DATA),
        DecodeError,
        "unsupported_format",
        ["IEEE float", "16 bits"],
    ),
    "zero_channels": (
        riff(_fmt(channels=0, block_align=2, byte_rate=32_000), DATA),
        DecodeError,
        "zero_channels_or_rate",
        ["0 channel"],
    ),
    "zero_rate": (riff(_fmt(rate_hz=0), DATA), DecodeError, "zero_channels_or_rate", ["0 Hz"]),
    "block_align": (
        riff(_fmt(block_align=4, byte_rate=32_000), DATA),
        DecodeError,
        "block_align_mismatch",
        ["block_align is 4", "expected 2"],
    ),
    "byte_rate": (
        riff(_fmt(byte_rate=16_000), DATA),
        DecodeError,
        "byte_rate_mismatch",
        ["byte_rate is 16000", "expected 32000"],
    ),
    "partial_frame": (
        riff(_fmt(channels=2), chunk(b"data", bytes(6))),
        DecodeError,
        "partial_frame",
        ["6 bytes", "4-byte"],
    ),
    "partial_float_frame": (
        riff(_fmt(format_tag=3, bits=32), chunk(b"data", bytes(6))),
        DecodeError,
        "partial_frame",
        [],
    ),
    "empty_buffer": (b"", EmptyAudioError, "empty", []),
    "empty_data": (riff(FMT, chunk(b"data", b"")), EmptyAudioError, "empty", ["data"]),
    "too_many_chunks": (
        riff(FMT, DATA, *[chunk(b"JUNK", b"")] * (MAX_CHUNKS - 1)),
        DecodeError,
        "too_many_chunks",
        ["256"],
    ),
}


@pytest.mark.parametrize("name", sorted(REJECTIONS))
def test_rejections_are_typed_coded_and_name_the_clip(name):
    data, error, code, fragments = REJECTIONS[name]
    with pytest.raises(error) as info:
        inspect(data, clip_index=CLIP)
    assert type(info.value) is error
    assert info.value.code == code
    assert code in decoder_module.DECODE_ERROR_CODES
    assert info.value.clip_index == CLIP
    message = str(info.value)
    assert f"clip {CLIP + 1}" in message
    for fragment in fragments:
        assert fragment in message


def test_exactly_max_chunks_is_accepted():
    data = riff(FMT, DATA, *[chunk(b"JUNK", b"")] * (MAX_CHUNKS - 2))
    geometry, out = run(data)
    assert geometry.frames == 2
    assert out.tolist() == [1 / 32768, 2 / 32768]


def test_odd_chunks_with_pad_bytes_are_accepted_anywhere():
    data = riff(chunk(b"JUNK", b"abc"), FMT, chunk(b"LIST", b"x"), DATA, chunk(b"note", b"xyz"))
    geometry, _ = run(data)
    assert geometry.data_offset == len(riff(chunk(b"JUNK", b"abc"), FMT, chunk(b"LIST", b"x"))) + 8


def test_pad_byte_value_is_not_checked():
    data = bytearray(riff(FMT, DATA, chunk(b"LIST", b"abc")))
    data[-1] = 0xFF
    run(bytes(data))


def test_data_before_fmt_is_accepted():
    source = _pcm(50, 2, 4)
    geometry, out = run(build_wav(source, data_first=True))
    assert geometry.channels == 2
    assert bits_equal(out, reference_downmix(source))


def test_errors_are_audiogate_errors_with_documented_codes():
    documented = decoder_module.__doc__ or ""
    for code in decoder_module.DECODE_ERROR_CODES:
        assert f"``{code}``" in documented, code
    for _data_bytes, error, _code, _ in REJECTIONS.values():
        assert issubclass(error, AudioGateError)
    # The codes DecodeError's own docstring (and so docs/reference/errors.md) names exist.
    named = re.findall(r'``"(\w+)"``', DecodeError.__doc__ or "")
    assert named
    assert set(named) <= set(decoder_module.DECODE_ERROR_CODES), named


# --- policy limits ---------------------------------------------------------------------


def _wav(rate_hz=16_000, channels=1, frames=16):
    return build_wav(np.ones((frames, channels), np.int16), rate_hz=rate_hz)


def test_rate_below_minimum():
    with pytest.raises(DecodeError) as info:
        inspect(_wav(rate_hz=7_999), clip_index=CLIP, limits=DecodeLimits(min_rate_hz=8_000))
    assert info.value.code == "rate_below_minimum"
    assert "7999" in str(info.value)
    assert "8000" in str(info.value)
    assert f"clip {CLIP + 1}" in str(info.value)
    inspect(_wav(rate_hz=8_000), clip_index=CLIP, limits=DecodeLimits(min_rate_hz=8_000))


def test_rate_above_maximum():
    with pytest.raises(LimitError) as info:
        inspect(_wav(rate_hz=192_001), clip_index=CLIP)
    assert (info.value.limit, info.value.actual, info.value.maximum) == (
        "source sample rate",
        192_001,
        192_000,
    )
    assert info.value.clip_index == CLIP
    assert f"clip {CLIP + 1}" in str(info.value)
    inspect(_wav(rate_hz=192_000), clip_index=CLIP)


@pytest.mark.parametrize("rate_hz", [16_000, 44_100, 48_000, 22_050, 8_000])
def test_allowed_rates(rate_hz):
    limits = DecodeLimits(allowed_rates_hz=frozenset({16_000, 44_100, 48_000}))
    if rate_hz in limits.allowed_rates_hz:
        assert inspect(_wav(rate_hz=rate_hz), clip_index=CLIP, limits=limits).rate_hz == rate_hz
        return
    with pytest.raises(DecodeError) as info:
        inspect(_wav(rate_hz=rate_hz), clip_index=CLIP, limits=limits)
    assert info.value.code == "rate_not_allowed"
    assert "16000, 44100, 48000" in str(info.value)
    assert f"clip {CLIP + 1}" in str(info.value)


def test_channel_limit():
    with pytest.raises(LimitError) as info:
        inspect(_wav(channels=3), clip_index=CLIP, limits=DecodeLimits(max_channels=2))
    assert (info.value.limit, info.value.actual, info.value.maximum) == ("source channels", 3, 2)
    inspect(_wav(channels=2), clip_index=CLIP, limits=DecodeLimits(max_channels=2))


def test_frame_limit():
    with pytest.raises(LimitError) as info:
        inspect(_wav(frames=11), clip_index=CLIP, limits=DecodeLimits(max_frames=10))
    assert (info.value.limit, info.value.actual) == ("source frames per clip", 11)
    inspect(_wav(frames=10), clip_index=CLIP, limits=DecodeLimits(max_frames=10))


def test_duration_limit():
    # 16 001 frames at 16 kHz = 1 000 062 µs (floor); the cap is 1 s.
    limits = DecodeLimits(max_duration_us=1_000_000)
    with pytest.raises(LimitError) as info:
        inspect(_wav(frames=16_001), clip_index=CLIP, limits=limits)
    assert (info.value.limit, info.value.actual) == ("source duration per clip", 1_000_062)
    assert inspect(_wav(frames=16_000), clip_index=CLIP, limits=limits).duration_us == 1_000_000


def test_policy_order():
    limits = DecodeLimits(
        min_rate_hz=8_000,
        max_rate_hz=48_000,
        allowed_rates_hz=frozenset({16_000}),
        max_channels=1,
        max_frames=1,
        max_duration_us=1,
    )
    cases = [
        (_wav(rate_hz=4_000, channels=2, frames=5), "rate_below_minimum"),
        (_wav(rate_hz=96_000, channels=2, frames=5), "source sample rate"),
        (_wav(rate_hz=44_100, channels=2, frames=5), "rate_not_allowed"),
        (_wav(rate_hz=16_000, channels=2, frames=5), "source channels"),
        (_wav(rate_hz=16_000, channels=1, frames=5), "source frames per clip"),
    ]
    for data, expected in cases:
        with pytest.raises((DecodeError, LimitError)) as info:
            inspect(data, clip_index=CLIP, limits=limits)
        error = info.value
        got = error.code if isinstance(error, DecodeError) else error.limit
        assert got == expected
    with pytest.raises(LimitError, match="source duration per clip"):
        inspect(_wav(frames=1), clip_index=CLIP, limits=attrs.evolve(limits, max_duration_us=1))


def test_structural_errors_come_before_the_rate_policy():
    # The RIFF walk, a short 'fmt ' and zero channels/rate are refused whatever the rate.
    past_end = riff(_fmt(rate_hz=500_000), DATA)[:-1]
    short_fmt = riff(chunk(b"fmt ", fmt_payload(rate_hz=500_000)[:14]), DATA)
    zero = riff(_fmt(channels=0, rate_hz=500_000), DATA)
    for data, code in (
        (past_end, "riff_size_mismatch"),
        (short_fmt, "fmt_too_short"),
        (zero, "zero_channels_or_rate"),
    ):
        with pytest.raises(DecodeError) as info:
            inspect(data, clip_index=CLIP)
        assert info.value.code == code


@pytest.mark.parametrize(
    ("data", "error", "got"),
    [
        # mlxcel's inspect_wav order: zero check, minimum rate, maximum rate, then the encoding,
        # empty data and partial frames.
        (riff(_fmt(rate_hz=500_000, block_align=4, byte_rate=2_000_000), DATA), LimitError, None),
        (riff(_fmt(rate_hz=500_000, bits=24), DATA), LimitError, None),
        (riff(_fmt(rate_hz=500_000), chunk(b"data", b"")), LimitError, None),
        (riff(_fmt(rate_hz=500_000), _data(frames=1, frame_bytes=3)), LimitError, None),
        (riff(_fmt(rate_hz=4_000, bits=8), DATA), DecodeError, "rate_below_minimum"),
        (riff(_fmt(rate_hz=44_100, format_tag=6), DATA), DecodeError, "rate_not_allowed"),
    ],
    ids=["block_align", "24_bit", "empty", "partial_frame", "below_minimum", "not_allowed"],
)
def test_the_rate_policy_comes_before_the_encoding_checks(data, error, got):
    limits = DecodeLimits(min_rate_hz=8_000, allowed_rates_hz=frozenset({16_000, 500_000}))
    with pytest.raises(error) as info:
        inspect(data, clip_index=CLIP, limits=limits)
    if got is None:
        assert info.value.limit == "source sample rate"
    else:
        assert info.value.code == got


def test_decode_rechecks_limits():
    data = _wav(frames=20)
    geometry = inspect(data, clip_index=CLIP)
    with pytest.raises(LimitError, match="source frames per clip"):
        decode(data, geometry, clip_index=CLIP, limits=DecodeLimits(max_frames=10))


# --- non-finite and all-zero -----------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize(("frame", "channel"), [(0, 0), (1, 1), (BLOCK_FRAMES + 3, 1)])
def test_non_finite_sample_names_its_frame(bad, frame, channel):
    source = np.zeros((BLOCK_FRAMES + 10, 2), np.float32)
    source[0, 0] = 5.0  # finite and out of range: clamped, never reported
    source[frame, channel] = bad
    source[frame + 2, 0] = np.nan  # only the first offending frame is named
    data = build_wav(source, encoding="f32")
    geometry = inspect(data, clip_index=CLIP)  # the header is fine
    with pytest.raises(NonFiniteSampleError) as info:
        decode(data, geometry, clip_index=CLIP)
    assert info.value.frame == frame
    assert info.value.code == "non_finite"
    assert info.value.clip_index == CLIP
    assert f"clip {CLIP + 1}" in str(info.value)
    assert f"frame {frame}" in str(info.value)


def test_opposite_infinities_are_still_non_finite():
    data = build_wav(np.array([[0.5, 0.5], [np.inf, -np.inf]], np.float32), encoding="f32")
    with pytest.raises(NonFiniteSampleError) as info:
        run(data)
    assert info.value.frame == 1


@pytest.mark.parametrize(
    ("source", "encoding"),
    [
        (np.zeros((5, 2), np.int16), "pcm16"),
        (np.zeros((BLOCK_FRAMES + 1, 1), np.int16), "pcm16"),
        (np.full((4, 2), -0.0, np.float32), "f32"),
        (np.array([[0.0, -0.0]], np.float32), "f32"),
    ],
)
def test_refuse_all_zero(source, encoding):
    data = build_wav(source, encoding=encoding)
    run(data)  # accepted by default
    with pytest.raises(DecodeError) as info:
        run(data, limits=DecodeLimits(refuse_all_zero=True))
    assert info.value.code == "all_zero"
    assert f"clip {CLIP + 1}" in str(info.value)


def test_refuse_all_zero_accepts_one_nonzero_sample():
    source = np.zeros((BLOCK_FRAMES + 2, 2), np.int16)
    source[-1, 1] = 1
    _, out = run(build_wav(source), limits=DecodeLimits(refuse_all_zero=True))
    assert out[-1] == 1 / 65536


def test_refuse_all_zero_is_not_a_silence_detector():
    quiet = np.full((100, 1), 1e-30, np.float32)
    _, out = run(build_wav(quiet, encoding="f32"), limits=DecodeLimits(refuse_all_zero=True))
    assert out.any()


# --- geometry mismatch -----------------------------------------------------------------


def test_decode_refuses_a_geometry_that_does_not_fit_the_buffer():
    data = _wav(frames=20)
    geometry = inspect(data, clip_index=CLIP)
    lying = [
        attrs.evolve(geometry, frames=21, data_length=42, duration_us=1_312),
        attrs.evolve(geometry, data_offset=len(data) - 10),
        attrs.evolve(geometry, frames=10),
        attrs.evolve(geometry, channels=0),
        attrs.evolve(geometry, rate_hz=0),
        attrs.evolve(geometry, encoding="f64"),
        attrs.evolve(geometry, data_offset=-2),
    ]
    for bad in lying:
        with pytest.raises(DecodeError) as info:
            decode(data, bad, clip_index=CLIP)
        assert info.value.code == "geometry_mismatch"
        assert f"clip {CLIP + 1}" in str(info.value)


# --- memory: inspect never allocates for what the header declares ----------------------


def _peak_bytes(function):
    tracemalloc.start()
    try:
        function()
    except AudioGateError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def test_inspect_of_a_lying_header_allocates_nothing_proportional():
    lying = riff(FMT, struct.pack("<4sI", b"data", 1 << 30) + bytes(60))
    assert len(lying) < 120

    def attempt():
        inspect(lying, clip_index=CLIP)

    with pytest.raises(DecodeError, match="1073741824"):
        attempt()
    assert _peak_bytes(attempt) < 32 * 1024
    lying_riff = riff(FMT, DATA, riff_size=1 << 30)
    assert _peak_bytes(lambda: inspect(lying_riff, clip_index=CLIP)) < 32 * 1024


def test_inspect_of_a_large_valid_clip_does_not_touch_samples():
    data = build_wav(np.ones((2_000_000, 2), np.int16))  # 8 MB of samples
    assert _peak_bytes(lambda: inspect(data, clip_index=CLIP)) < 32 * 1024


def test_decode_peak_memory_is_the_output_plus_small_blocks():
    frames = 1_000_000
    data = build_wav(_pcm(frames, 2))
    geometry = inspect(data, clip_index=CLIP)
    peak = _peak_bytes(lambda: decode(data, geometry, clip_index=CLIP))
    assert peak <= 2 * 4 * frames
    data_f32 = build_wav(_float(frames, 2), encoding="f32")
    geometry = inspect(data_f32, clip_index=CLIP)
    assert _peak_bytes(lambda: decode(data_f32, geometry, clip_index=CLIP)) <= 2 * 4 * frames


# --- cancellation ----------------------------------------------------------------------


def test_cancelled_before_inspect():
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled) as info:
        inspect(_wav(), clip_index=CLIP, cancel=token)
    assert info.value.checkpoint == "Decode"
    assert info.value.clip_index == CLIP


def test_cancelled_before_decode():
    data = _wav()
    geometry = inspect(data, clip_index=CLIP)
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled) as info:
        decode(data, geometry, clip_index=CLIP, cancel=token)
    assert info.value.checkpoint == str(Checkpoint.DECODE)


def test_inspect_polls_after_each_chunk():
    data = riff(FMT, *[chunk(b"JUNK", b"")] * 10, DATA)
    counter = CountingToken()
    inspect(data, clip_index=CLIP, cancel=counter)
    assert counter.calls == 1 + 12
    with pytest.raises(PreprocessCancelled):
        inspect(data, clip_index=CLIP, cancel=CountingToken(cancel_on=5))


@pytest.mark.parametrize("encoding", ["pcm16", "f32"])
@pytest.mark.parametrize("channels", [1, 2])
def test_cancelled_mid_decode_stops_inside_the_block_loop(encoding, channels):
    blocks = 5
    dtype = np.int16 if encoding == "pcm16" else np.float32
    source = np.ones((blocks * BLOCK_FRAMES, channels), dtype)
    data = build_wav(source, encoding=encoding)
    geometry = inspect(data, clip_index=CLIP)
    counter = CountingToken()
    decode(data, geometry, clip_index=CLIP, cancel=counter)
    assert counter.calls >= blocks  # at least one poll per block
    token = CountingToken(cancel_on=counter.calls - 2)
    with pytest.raises(PreprocessCancelled) as info:
        decode(data, geometry, clip_index=CLIP, cancel=token)
    assert info.value.checkpoint == "Decode"
    assert info.value.clip_index == CLIP
    assert token.calls == counter.calls - 2


# --- declarations ----------------------------------------------------------------------


def test_public_names():
    assert set(decode_pkg.__all__) == {
        "SourceFormat",
        "DecodeLimits",
        "ClipGeometry",
        "inspect",
        "check_limits",
        "decode",
        "WAV",
    }
    assert SourceFormat("wav") == WAV
    geometry = inspect(_wav(channels=2, frames=3), clip_index=0)
    assert isinstance(geometry, ClipGeometry)
    assert geometry.frame_bytes == 4


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"min_rate_hz": 0}, ValueError),
        ({"max_rate_hz": 0}, ValueError),
        ({"min_rate_hz": 16_000, "max_rate_hz": 8_000}, ValueError),
        ({"max_channels": 0}, ValueError),
        ({"max_frames": 0}, ValueError),
        ({"max_duration_us": -1}, ValueError),
        ({"allowed_rates_hz": frozenset()}, ValueError),
        ({"allowed_rates_hz": frozenset({0})}, ValueError),
        ({"allowed_rates_hz": {16_000}}, ValueError),
        ({"max_channels": True}, ValueError),
        ({"refuse_all_zero": 1}, TypeError),
    ],
)
def test_decode_limits_validation(kwargs, error):
    with pytest.raises(error):
        DecodeLimits(**kwargs)
