"""Streams are decoded whole or refused, never silently truncated (issue #32): MP3 files
joined with ``cat``, chained Ogg, a FLAC STREAMINFO or MP4 tables that understate the
length; a clip exactly at the duration cap keeps its length (codec padding trimmed); a
FLAC behind an ID3v2 tag is FLAC."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from codec_fixtures import encode, tone

from audiogate.decode import DecodeLimits, decode, inspect
from audiogate.decode.containers import mp3_parts, ogg_links
from audiogate.decode.geometry import AUTO, SourceFormat
from audiogate.decode.isolation import DecoderPool
from audiogate.errors import DecodeError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool():
    pool = DecoderPool(processes=1)
    yield pool
    pool.close()


def _decoded(data: bytes, pool: DecoderPool, limits: DecodeLimits | None = None) -> np.ndarray:
    limits = limits or DecodeLimits()
    geometry = inspect(data, clip_index=0, source_format=AUTO, limits=limits)
    return decode(data, geometry, clip_index=0, decoders=pool, limits=limits)


def _parts(fmt: str, rate_hz: int = 16_000) -> tuple[bytes, bytes]:
    first = encode(fmt, tone(rate_hz=rate_hz, seconds=2.0), rate_hz=rate_hz)
    second = encode(fmt, tone(rate_hz=rate_hz, seconds=3.0, freq_hz=300.0), rate_hz=rate_hz)
    return first, second


@pytest.mark.parametrize("fmt", ["mp3", "ogg"])
def test_files_joined_end_to_end_decode_whole(fmt, pool):
    first, second = _parts(fmt)
    joined = first + second
    split = mp3_parts(joined) if fmt == "mp3" else ogg_links(joined)
    assert split == [(0, len(first)), (len(first), len(joined))]
    # The decoders stop after the first part's own length given the whole; each part
    # is decoded in turn, exactly as on its own.
    expected = np.concatenate([_decoded(first, pool), _decoded(second, pool)])
    np.testing.assert_array_equal(_decoded(joined, pool), expected)
    three = _decoded(first + second + first, pool)
    assert three.shape[0] == expected.shape[0] + _decoded(first, pool).shape[0]


def test_an_ordinary_file_is_one_part():
    mp3 = encode("mp3", tone(rate_hz=16_000, seconds=1.0), rate_hz=16_000)
    ogg = encode("ogg", tone(rate_hz=16_000, seconds=1.0), rate_hz=16_000)
    assert mp3_parts(mp3) == [(0, len(mp3))]
    # An ID3v1 tag after the frames the Xing/Info header counts is no second file.
    assert mp3_parts(mp3 + b"TAG" + bytes(125)) == [(0, len(mp3))]
    assert ogg_links(ogg) == [(0, len(ogg))]


def test_mp3s_joined_at_different_rates_are_refused_naming_both():
    first = encode("mp3", tone(rate_hz=16_000, seconds=1.0), rate_hz=16_000)
    second = encode("mp3", tone(rate_hz=24_000, seconds=1.0), rate_hz=24_000)
    with pytest.raises(DecodeError) as info:
        inspect(first + second, clip_index=0, source_format=AUTO)
    assert info.value.code == "unsupported_codec"
    assert "16000 Hz" in info.value.detail
    assert "24000 Hz" in info.value.detail


def _flac_total(data: bytes, total: int) -> bytes:
    info = int.from_bytes(data[8:42], "big") & ~(0xFFFFFFFFF << 128) | total << 128
    return data[:8] + info.to_bytes(34, "big") + data[42:]


def test_a_flac_whose_streaminfo_understates_the_length_decodes_whole(pool):
    flac = encode("flac", tone(rate_hz=16_000, seconds=3.0), rate_hz=16_000)
    whole = _decoded(flac, pool)
    assert whole.shape == (48_000,)
    lying = _flac_total(flac, 16_000)
    geometry = inspect(lying, clip_index=0, source_format=AUTO)
    assert not geometry.exact
    assert geometry.frames == 48_000  # where the last frame ends
    np.testing.assert_array_equal(_decoded(lying, pool), whole)
    # A total that is the truth (or more: a truncated file) stays exact.
    assert inspect(flac, clip_index=0, source_format=AUTO).exact
    longer = inspect(_flac_total(flac, 60_000), clip_index=0, source_format=AUTO)
    assert longer.exact
    assert longer.frames == 60_000


def test_a_flac_behind_an_id3v2_tag_is_flac(pool):
    flac = encode("flac", tone(rate_hz=16_000, seconds=1.0), rate_hz=16_000)
    tagged = b"ID3\x04\x00\x00\x00\x00\x00\x14" + b"\x00" * 20 + flac
    geometry = inspect(tagged, clip_index=0, source_format=AUTO)
    assert geometry.container == "flac"
    assert inspect(tagged, clip_index=0, source_format=SourceFormat("flac")).frames == 16_000
    np.testing.assert_array_equal(_decoded(tagged, pool), _decoded(flac, pool))


def _box(data: bytes, kind: bytes) -> int:
    """The offset of the first ``kind`` box's payload (after its 8-byte header)."""
    return data.index(kind) + 4


def test_mp4_tables_that_understate_the_length_are_refused():
    m4a = encode("m4a", tone(rate_hz=16_000, seconds=2.0), rate_hz=16_000)
    inspect(m4a, clip_index=0, source_format=AUTO)
    stsz = _box(m4a, b"stsz")
    (count,) = struct.unpack_from(">I", m4a, stsz + 8)
    fewer = m4a[: stsz + 8] + struct.pack(">I", count // 2) + m4a[stsz + 12 :]
    with pytest.raises(DecodeError) as info:
        inspect(fewer, clip_index=0, source_format=AUTO)
    assert info.value.code == "malformed_header"
    assert "understates the length" in info.value.detail
    mdhd = _box(m4a, b"mdhd")
    assert m4a[mdhd] == 0
    (duration,) = struct.unpack_from(">I", m4a, mdhd + 16)
    longer = m4a[: mdhd + 16] + struct.pack(">I", duration * 3) + m4a[mdhd + 20 :]
    with pytest.raises(DecodeError) as info:
        inspect(longer, clip_index=0, source_format=AUTO)
    assert "mdhd declares" in info.value.detail


@pytest.mark.parametrize("fmt", ["mp3", "m4a", "ogg"])
def test_a_clip_exactly_at_the_duration_cap_is_kept_whole(fmt, pool):
    # 2.0 s encoded under a 2.0 s cap: FFmpeg's AAC decode ends with the encoder's
    # padding (32,768 frames at 16 kHz), which used to be refused as "the header
    # understated the length"; it is trimmed at the cap.
    data = encode(fmt, tone(rate_hz=16_000, seconds=2.0), rate_hz=16_000)
    free = _decoded(data, pool)
    rate = inspect(data, clip_index=0, source_format=AUTO).rate_hz
    assert free.shape[0] >= 2 * rate
    capped = _decoded(data, pool, DecodeLimits(max_duration_us=2_000_000))
    assert capped.shape == (2 * rate,)
    np.testing.assert_array_equal(capped, free[: 2 * rate])
