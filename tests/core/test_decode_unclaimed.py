"""Formats audiogate does not decode are refused naming the format and the conversion
to run (issue #32): RIFX other than PCM and float, MP4 of other codecs. Sun AU, CAF
(PCM, G.711, ALAC), RIFX and ADPCM and GSM 6.10 WAV are decoded (libsndfile), to
libsndfile's samples; ALAC in M4A by FFmpeg."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile
from wavbuild import chunk, fmt_payload, riff

from audiogate.decode import decode, inspect
from audiogate.decode.geometry import AUTO, CONVERT_ADVICE, WAV
from audiogate.errors import DecodeError

CORPUS = Path(__file__).resolve().parents[1] / "data" / "audio"


def _refusal(data: bytes) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        inspect(data, clip_index=0, source_format=AUTO)
    return info.value


@pytest.mark.parametrize(
    ("subtype", "rate"), [("IMA_ADPCM", 16_000), ("MS_ADPCM", 22_050), ("GSM610", 8_000)]
)
def test_adpcm_and_gsm_wav_decode_to_libsndfiles_samples(subtype, rate):
    signal = np.random.default_rng(3).uniform(-0.5, 0.5, (5_003, 1))
    out = io.BytesIO()
    soundfile.write(out, signal, rate, format="WAV", subtype=subtype)
    data = out.getvalue()
    for declared in (AUTO, WAV):
        geometry = inspect(data, clip_index=0, source_format=declared)
        assert geometry.container == "wavcodec"
        got = decode(data, geometry, clip_index=0)
    samples, _rate = soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)
    want = np.clip(samples.mean(axis=1), -1.0, 1.0).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert geometry.frames >= got.shape[0]  # a bound of whole blocks


def test_a_broken_adpcm_header_keeps_the_wav_walkers_refusal():
    fmt = fmt_payload(format_tag=0x0011, bits=4, block_align=0, byte_rate=0)
    error = _refusal(riff(chunk(b"fmt ", fmt), chunk(b"data", bytes(256))))
    assert error.code == "unsupported_format"
    assert "IMA ADPCM" in error.detail


@pytest.mark.parametrize(
    ("head", "name"),
    [
        (b"RIFX\x00\x00\x00\x24XWAV", "RIFX (big-endian RIFF)"),
    ],
)
def test_other_audio_containers_are_named_with_the_conversion(head, name):
    error = _refusal(head + bytes(64))
    assert error.code == "unknown_container"
    assert f"found {name}" in error.detail
    assert CONVERT_ADVICE in error.detail


def _alac_m4a(samples: np.ndarray, rate: int) -> bytes:
    """Apple Lossless in an M4A, by FFmpeg's encoder (PyAV), as iPhone Voice Memos."""
    import av

    out = io.BytesIO()
    with av.open(out, "w", format="ipod") as container:
        stream = container.add_stream("alac", rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16p", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


def test_alac_in_m4a_decodes_as_ffmpeg_decodes_it():
    pytest.importorskip("av")
    samples = (np.random.default_rng(9).uniform(-0.5, 0.5, 10_000) * 32767).astype(np.int16)
    data = _alac_m4a(samples, 16_000)
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    assert (geometry.container, geometry.encoding) == ("mp4", "alac")
    got = decode(data, geometry, clip_index=0)
    np.testing.assert_array_equal(got, samples.astype(np.float32) / 32768)  # lossless


def test_mp4_of_another_codec_is_named_with_the_conversion():
    aac = (CORPUS / "aac-mono-8000.m4a").read_bytes()
    error = _refusal(aac.replace(b"mp4a", b"ac-3", 1))
    assert error.code == "unsupported_codec"
    assert "alac (Apple Lossless)" in error.detail
    assert CONVERT_ADVICE in error.detail


def test_no_advice_for_what_is_not_audio():
    assert CONVERT_ADVICE not in _refusal(b"%PDF-1.7" + bytes(64)).detail


def _au(encoding: int, payload: bytes, *, rate: int = 16_000, channels: int = 1) -> bytes:
    return struct.pack(">4s5I", b".snd", 24, len(payload), encoding, rate, channels) + payload


@pytest.mark.parametrize(("encoding", "width"), [(1, 1), (3, 2), (4, 3), (6, 4), (27, 1)])
def test_sun_au_decodes_to_libsndfiles_samples(encoding, width):
    rng = np.random.default_rng(encoding)
    if encoding == 6:
        payload = rng.uniform(-0.9, 0.9, 2_000).astype(">f4").tobytes()
    else:
        payload = rng.integers(0, 256, 1_000 * width, dtype=np.uint8).tobytes()
    data = _au(encoding, payload, channels=2 if width > 1 else 1)
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    assert geometry.container == "au"
    assert geometry.exact
    got = decode(data, geometry, clip_index=0)
    samples, _rate = soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)
    want = np.clip(samples.mean(axis=1), -1.0, 1.0).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_sun_au_headers_are_checked():
    assert _refusal(_au(23, bytes(100))).code == "unsupported_codec"  # G.721 ADPCM
    lying = _au(3, bytes(100))[:8] + struct.pack(">I", 1_000) + _au(3, bytes(100))[12:]
    assert "declares 1000 bytes" in _refusal(lying).detail


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "FLOAT", "ULAW", "ALAW", "ALAC_16"])
def test_caf_decodes_to_libsndfiles_samples(subtype):
    rng = np.random.default_rng(7)
    signal = rng.uniform(-0.5, 0.5, (3_001, 2))
    out = io.BytesIO()
    soundfile.write(out, signal, 16_000, format="CAF", subtype=subtype)
    data = out.getvalue()
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    assert (geometry.container, geometry.frames, geometry.exact) == ("caf", 3_001, True)
    got = decode(data, geometry, clip_index=0)
    samples, _rate = soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)
    want = np.clip(samples.mean(axis=1), -1.0, 1.0).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_caf_of_another_format_is_named_with_the_conversion():
    out = io.BytesIO()
    soundfile.write(out, np.zeros((100, 1)), 16_000, format="CAF", subtype="PCM_16")
    data = out.getvalue().replace(b"lpcm", b"aac ", 1)
    error = _refusal(data)
    assert error.code == "unsupported_codec"
    assert CONVERT_ADVICE in error.detail


def _rifx(samples: np.ndarray, *, tag: int = 1, rate: int = 16_000) -> bytes:
    """A big-endian RIFF/WAVE of 16-bit ``[shape=(frames, channels)]`` samples."""
    channels = samples.shape[1]
    payload = samples.astype(">i2").tobytes()
    fmt = struct.pack(">HHIIHH", tag, channels, rate, rate * 2 * channels, 2 * channels, 16)
    body = b"WAVE" + b"fmt " + struct.pack(">I", 16) + fmt
    body += b"data" + struct.pack(">I", len(payload)) + payload
    return b"RIFX" + struct.pack(">I", len(body)) + body


def test_rifx_decodes_to_libsndfiles_samples():
    samples = np.random.default_rng(5).integers(-32768, 32767, (2_001, 2))
    data = _rifx(samples)
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    assert (geometry.container, geometry.frames, geometry.exact) == ("rifx", 2_001, True)
    got = decode(data, geometry, clip_index=0)
    want, _rate = soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)
    np.testing.assert_array_equal(got, np.clip(want.mean(axis=1), -1, 1).astype(np.float32))
    error = _refusal(_rifx(samples, tag=0xFFFE))
    assert error.code == "unsupported_codec"
    assert CONVERT_ADVICE in error.detail
