"""Formats audiogate does not decode are refused naming the format and the conversion
to run (issue #32): ADPCM and GSM 6.10 WAV, ALAC in M4A, CAF, Sun AU, RIFX."""

from __future__ import annotations

from pathlib import Path

import pytest
from wavbuild import chunk, fmt_payload, riff

from audiogate.decode import inspect
from audiogate.decode.geometry import AUTO, CONVERT_ADVICE
from audiogate.errors import DecodeError

CORPUS = Path(__file__).resolve().parents[1] / "data" / "audio"


def _refusal(data: bytes) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        inspect(data, clip_index=0, source_format=AUTO)
    return info.value


@pytest.mark.parametrize(
    ("tag", "bits", "name"),
    [(0x0002, 4, "Microsoft ADPCM"), (0x0011, 4, "IMA ADPCM"), (0x0031, 0, "GSM 6.10")],
)
def test_compressed_wav_encodings_are_named_with_the_conversion(tag, bits, name):
    fmt = fmt_payload(format_tag=tag, bits=bits, block_align=256, byte_rate=4_000)
    error = _refusal(riff(chunk(b"fmt ", fmt), chunk(b"data", bytes(256))))
    assert error.code == "unsupported_format"
    assert name in error.detail
    assert CONVERT_ADVICE in error.detail


@pytest.mark.parametrize(
    ("head", "name"),
    [
        (b"caff\x00\x01\x00\x00desc", "CAF (Core Audio Format)"),
        (b".snd\x00\x00\x00\x18\xff\xff\xff\xff\x00\x00\x00\x03", "Sun AU"),
        (b"RIFX\x00\x00\x00\x24WAVEfmt ", "RIFX (big-endian RIFF)"),
    ],
)
def test_other_audio_containers_are_named_with_the_conversion(head, name):
    error = _refusal(head + bytes(64))
    assert error.code == "unknown_container"
    assert f"found {name}" in error.detail
    assert CONVERT_ADVICE in error.detail


def test_alac_in_m4a_is_named_with_the_conversion():
    aac = (CORPUS / "aac-mono-8000.m4a").read_bytes()
    alac = aac.replace(b"mp4a", b"alac", 1)
    error = _refusal(alac)
    assert error.code == "unsupported_codec"
    assert "ALAC, Apple Lossless" in error.detail
    assert CONVERT_ADVICE in error.detail


def test_no_advice_for_what_is_not_audio():
    assert CONVERT_ADVICE not in _refusal(b"%PDF-1.7" + bytes(64)).detail
