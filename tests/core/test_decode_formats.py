"""Every WAV encoding and every compressed container the core decodes (issue #20).

Oracles: soundfile (libsndfile) reads the same WAV bytes; compressed clips are encoded
in-test by FFmpeg (PyAV) and must decode to the tone they hold; headers are compared
with what the encoder was told.
"""

from __future__ import annotations

import io
import struct
import sys

import numpy as np
import pytest
import soundfile
from codec_fixtures import encode, tone

from audiogate.acquire import sniff
from audiogate.acquire.context import SourceRefused
from audiogate.decode import decode, inspect
from audiogate.decode.geometry import AUTO, DecodeLimits, SourceFormat, sniff_container
from audiogate.decode.samples import ALAW_TABLE, MULAW_TABLE
from audiogate.errors import DecodeError, EmptyAudioError, LimitError

# --- WAV encodings, in-process --------------------------------------------------------

# soundfile subtype → (encoding, format tag, bits)
WAV_SUBTYPES = {
    "PCM_U8": ("u8", 1, 8),
    "PCM_16": ("pcm16", 1, 16),
    "PCM_24": ("pcm24", 1, 24),
    "PCM_32": ("pcm32", 1, 32),
    "FLOAT": ("f32", 3, 32),
    "DOUBLE": ("f64", 3, 64),
    "ULAW": ("mulaw", 7, 8),
    "ALAW": ("alaw", 6, 8),
}


def _wav(subtype: str, *, channels: int, container: str = "WAV", frames: int = 1000) -> bytes:
    rng = np.random.default_rng(7)
    samples = rng.uniform(-0.9, 0.9, size=(frames, channels))
    buf = io.BytesIO()
    soundfile.write(buf, samples, 16_000, format=container, subtype=subtype)
    return buf.getvalue()


@pytest.mark.parametrize("channels", [1, 2, 6])
@pytest.mark.parametrize("container", ["WAV", "WAVEX", "RF64"])
@pytest.mark.parametrize("subtype", sorted(WAV_SUBTYPES))
def test_every_wav_encoding_decodes_as_soundfile_reads_it(subtype, container, channels):
    data = _wav(subtype, channels=channels, container=container)
    geometry = inspect(data, clip_index=0)
    encoding, _tag, _bits = WAV_SUBTYPES[subtype]
    assert (geometry.container, geometry.encoding) == ("wav", encoding)
    assert (geometry.rate_hz, geometry.channels, geometry.frames) == (16_000, channels, 1000)
    got = decode(data, geometry, clip_index=0)
    expected, _ = soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)
    oracle = np.clip(expected.mean(axis=1), -1.0, 1.0).astype(np.float32)
    np.testing.assert_array_equal(got, oracle)


def test_g711_tables_are_libsndfiles():
    codes = bytes(range(256))
    for subtype, table in (("ULAW", MULAW_TABLE), ("ALAW", ALAW_TABLE)):
        read, _ = soundfile.read(
            io.BytesIO(codes),
            dtype="int16",
            format="RAW",
            subtype=subtype,
            samplerate=8000,
            channels=1,
        )
        np.testing.assert_array_equal(table, read)


def test_rf64_data_size_comes_from_ds64():
    data = _wav("PCM_16", channels=1, container="RF64", frames=5)
    assert data[:4] == b"RF64"
    assert struct.unpack_from("<I", data, 4)[0] == 0xFFFFFFFF
    assert inspect(data, clip_index=0).frames == 5


def test_rf64_without_ds64_is_refused():
    data = bytearray(_wav("PCM_16", channels=1, container="RF64", frames=5))
    data[12:16] = b"JUNK"
    with pytest.raises(DecodeError) as info:
        inspect(bytes(data), clip_index=2)
    assert info.value.code == "missing_ds64"


def test_f64_non_finite_sample_is_named():
    data = bytearray(_wav("DOUBLE", channels=2, frames=10))
    geometry = inspect(bytes(data), clip_index=0)
    struct.pack_into("<d", data, geometry.data_offset + 8 * (2 * 7 + 1), float("nan"))
    with pytest.raises(DecodeError) as info:
        decode(bytes(data), geometry, clip_index=0)
    assert info.value.code == "non_finite"
    assert "frame 7" in str(info.value)


# --- compressed containers: sniffing and headers --------------------------------------

SIGNAL = tone(rate_hz=48_000, seconds=0.25, channels=2)

# fixture name → (container, codec, rate)
COMPRESSED = {
    "flac": ("flac", "flac", 48_000),
    "mp3": ("mp3", "mp3", 48_000),
    "ogg": ("ogg", "opus", 48_000),
    "vorbis": ("ogg", "vorbis", 48_000),
    "webm": ("webm", "opus", 48_000),
    "m4a": ("mp4", "aac", 48_000),
    "aiff": ("aiff", "pcm", 48_000),
}


@pytest.fixture(scope="module")
def encoded():
    return {name: encode(name, SIGNAL, rate_hz=48_000) for name in COMPRESSED}


@pytest.mark.parametrize("name", sorted(COMPRESSED))
def test_headers_give_codec_rate_channels_and_a_length(encoded, name):
    container, codec, rate = COMPRESSED[name]
    data = encoded[name]
    assert sniff_container(memoryview(data)) == container
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    assert (geometry.container, geometry.encoding) == (container, codec)
    assert (geometry.rate_hz, geometry.channels) == (rate, 2)
    frames = SIGNAL.shape[0]
    if geometry.exact:
        assert geometry.frames == frames
    else:
        # An upper bound: never below the clip, and within a few codec frames of it.
        assert frames <= geometry.frames <= frames + 12_000


@pytest.mark.parametrize("name", sorted(COMPRESSED))
def test_declared_format_must_match_the_bytes(encoded, name):
    container = COMPRESSED[name][0]
    other = "flac" if container != "flac" else "mp3"
    with pytest.raises(DecodeError) as info:
        inspect(encoded[name], clip_index=0, source_format=SourceFormat(other))
    assert info.value.code == "format_mismatch"
    with pytest.raises(SourceRefused):
        sniff.check_declared_format(encoded[name], SourceFormat(other))
    sniff.check_declared_format(encoded[name], AUTO)


def test_wav_declared_keeps_the_riff_walkers_refusal(encoded):
    with pytest.raises(DecodeError) as info:
        inspect(encoded["mp3"], clip_index=0)
    assert info.value.code == "not_riff_wave"


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b"\x00" * 64, "no known signature"),
        (b"RIFX" + b"\x00" * 60, "RIFX (big-endian RIFF)"),
        (b"%PDF-1.7" + b"\x00" * 56, "PDF"),
    ],
)
def test_unknown_bytes_under_auto_are_refused_naming_what_they_are(data, named):
    with pytest.raises(DecodeError) as info:
        inspect(data, clip_index=0, source_format=AUTO)
    assert info.value.code == "unknown_container"
    assert f"(found {named})" in str(info.value)
    assert "headerless samples declared as pcm16" in str(info.value)


def test_a_riff_file_that_is_not_wave_gets_the_riff_walkers_refusal():
    with pytest.raises(DecodeError) as info:
        inspect(b"RIFF\x24\x00\x00\x00AVI " + b"\x00" * 52, clip_index=0, source_format=AUTO)
    assert info.value.code == "not_riff_wave"


def test_opus_declaration_takes_ogg_and_webm_opus_only(encoded):
    for name in ("ogg", "webm"):
        inspect(encoded[name], clip_index=0, source_format=SourceFormat("opus"))
    with pytest.raises(DecodeError) as info:
        inspect(encoded["vorbis"], clip_index=0, source_format=SourceFormat("opus"))
    assert info.value.code == "format_mismatch"


@pytest.mark.parametrize(
    ("name", "cut"),
    [("flac", 20), ("ogg", 30), ("webm", 10), ("m4a", 40), ("aiff", 30), ("mp3", 20)],
)
def test_truncated_headers_are_typed_refusals(encoded, name, cut):
    with pytest.raises(DecodeError) as info:
        inspect(encoded[name][:cut], clip_index=3, source_format=AUTO)
    assert info.value.code in ("malformed_header", "unsupported_codec", "empty")


def test_upper_bound_is_capped_at_the_policy(encoded):
    limits = DecodeLimits(max_duration_us=100_000)
    geometry = inspect(encoded["webm"], clip_index=0, source_format=AUTO, limits=limits)
    assert not geometry.exact
    assert geometry.frames == 4_800


def test_exact_length_over_the_policy_is_refused_at_the_header(encoded):
    with pytest.raises(LimitError):
        inspect(
            encoded["flac"],
            clip_index=0,
            source_format=AUTO,
            limits=DecodeLimits(max_duration_us=100_000),
        )


def test_policy_rate_is_checked_from_the_header(encoded):
    with pytest.raises(DecodeError) as info:
        inspect(
            encoded["mp3"],
            clip_index=0,
            source_format=AUTO,
            limits=DecodeLimits(allowed_rates_hz=frozenset({16_000})),
        )
    assert info.value.code == "rate_not_allowed"


def test_missing_codecs_are_a_typed_refusal_naming_the_extra(encoded, monkeypatch):
    monkeypatch.setitem(sys.modules, "soundfile", None)  # as if not installed
    with pytest.raises(DecodeError) as info:
        inspect(encoded["flac"], clip_index=0, source_format=AUTO)
    assert info.value.code == "codecs_unavailable"
    assert "audiogate[codecs]" in str(info.value)


def test_empty_aiff_is_empty(encoded):
    data = bytearray(encoded["aiff"])
    comm = data.index(b"COMM")
    struct.pack_into(">I", data, comm + 10, 0)
    with pytest.raises(EmptyAudioError):
        inspect(bytes(data), clip_index=0, source_format=AUTO)


# --- compressed containers: decoding (in the decoder processes) ------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMPRESSED))
def test_compressed_clip_decodes_to_its_tone(encoded, name):
    data = encoded[name]
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    got = decode(data, geometry, clip_index=0)
    assert got.dtype == np.float32
    assert not got.flags.writeable
    assert got.shape[0] <= geometry.frames
    expected = SIGNAL.astype(np.float64).mean(axis=1)
    if COMPRESSED[name][1] in ("flac", "pcm"):
        assert got.shape[0] == SIGNAL.shape[0]
        np.testing.assert_allclose(got, expected, atol=1e-4)
    else:
        # Lossy: the length within a codec frame, the level within a few percent.
        assert abs(got.shape[0] - SIGNAL.shape[0]) <= 2_048
        rms = float(np.sqrt(np.mean(np.square(got[4_800:-4_800], dtype=np.float64))))
        assert rms == pytest.approx(float(np.sqrt(np.mean(np.square(expected)))), rel=0.1)
