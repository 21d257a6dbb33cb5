"""Legal WAV headers that were refused as corrupt (issue #32): fewer valid bits than the
container in WAVE_FORMAT_EXTENSIBLE, a 20-byte µ-law/A-law ``fmt `` with cbSize 2, and
12/20-bit PCM in 16/24-bit containers. libsndfile reads each one; so must we, to the
sample."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile
from wavbuild import FORMAT_EXTENSIBLE, chunk, fmt_payload, guid, riff

from audiogate.decode import decode, inspect
from audiogate.errors import DecodeError

RATE = 16_000


def _reference(data: bytes) -> np.ndarray:
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float64", always_2d=True)
    assert rate == RATE
    return np.clip(samples.mean(axis=1), -1.0, 1.0).astype(np.float32)


def _ours(data: bytes) -> np.ndarray:
    return decode(data, inspect(data, clip_index=0), clip_index=0)


def _left_justified(valid: int, container: int, frames: int = 400, channels: int = 2) -> bytes:
    """Samples of ``valid`` bits, shifted to the top of ``container``-bit words."""
    rng = np.random.default_rng(valid * 100 + container)
    values = rng.integers(-(1 << (valid - 1)), 1 << (valid - 1), size=frames * channels)
    words = values.astype(np.int64) << (container - valid)
    width = container // 8
    return b"".join(int(w).to_bytes(width, "little", signed=True) for w in words)


@pytest.mark.parametrize(("valid", "container"), [(24, 32), (20, 24), (12, 16)])
def test_extensible_with_fewer_valid_bits_reads_as_libsndfile(valid, container):
    fmt = fmt_payload(
        format_tag=FORMAT_EXTENSIBLE,
        channels=2,
        rate_hz=RATE,
        bits=container,
        valid_bits=valid,
        sub_format_guid=guid(1),
    )
    data = riff(chunk(b"fmt ", fmt), chunk(b"data", _left_justified(valid, container)))
    np.testing.assert_allclose(_ours(data), _reference(data), rtol=0, atol=1e-7)


def test_float_extensible_needs_every_bit():
    fmt = fmt_payload(format_tag=FORMAT_EXTENSIBLE, bits=32, valid_bits=24, sub_format_guid=guid(3))
    with pytest.raises(DecodeError) as info:
        inspect(riff(chunk(b"fmt ", fmt), chunk(b"data", bytes(8))), clip_index=0)
    assert info.value.code == "extensible_valid_bits"


@pytest.mark.parametrize(("valid", "container"), [(12, 16), (20, 24)])
def test_plain_pcm_of_12_or_20_bits_reads_as_its_container(valid, container):
    base = fmt_payload(channels=2, rate_hz=RATE, bits=container)
    fmt = base[:14] + struct.pack("<H", valid)
    data = riff(chunk(b"fmt ", fmt), chunk(b"data", _left_justified(valid, container)))
    geometry = inspect(data, clip_index=0)
    assert geometry.encoding == ("pcm16" if container == 16 else "pcm24")
    np.testing.assert_allclose(_ours(data), _reference(data), rtol=0, atol=1e-7)


@pytest.mark.parametrize("tag", [6, 7])
def test_g711_fmt_of_20_bytes_with_cbsize_2_reads_as_libsndfile(tag):
    fmt = fmt_payload(format_tag=tag, bits=8, rate_hz=RATE, cb_size=2) + b"\x00\x00"
    payload = bytes(range(256)) * 4
    data = riff(chunk(b"fmt ", fmt), chunk(b"data", payload))
    np.testing.assert_array_equal(_ours(data), _reference(data))
    wrong = fmt_payload(format_tag=tag, bits=8, rate_hz=RATE, cb_size=0) + b"\x00\x00"
    with pytest.raises(DecodeError) as info:
        inspect(riff(chunk(b"fmt ", wrong), chunk(b"data", payload)), clip_index=0)
    assert info.value.code == "bad_cb_size"
