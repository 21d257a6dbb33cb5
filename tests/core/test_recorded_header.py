"""A stored clip admitted by the header recorded at upload: a feature-cache hit reads
none of its bytes, the request's policy still admits or refuses it, and a miss reads,
proves and re-reads its header before decoding it (docs/sources.md, "Reading a source")."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest
from toyfamily import TOY_POLICY, ToyFamily

from audiogate import create_host
from audiogate.acquire import EncodedClip, StoredHeader
from audiogate.cache import FeatureCache
from audiogate.decode import SourceFormat, inspect
from audiogate.errors import LimitError, SourceLostError
from audiogate.pipeline import prepare_clips
from audiogate.testing.audio import noise, wav_bytes

MIB = 1 << 20


@pytest.fixture
def host() -> Any:
    return create_host(load_entry_points=False, plugins=[ToyFamily()])


def wav(samples: int = 3_200, *, seed: int = 0, channels: int = 1) -> bytes:
    signal = noise(samples=samples, seed=seed)
    if channels > 1:
        signal = np.stack([signal] * channels, axis=1)
    return wav_bytes(signal, rate_hz=16_000)


class Reads:
    """A stored clip's reader that counts its reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.count = 0

    def __call__(self) -> bytes:
        self.count += 1
        return self.data


def stored(data: bytes, reads: Reads, *, header: Any = None) -> EncodedClip:
    """``data`` as acquisition gives a stored source with a recorded header."""
    inline = EncodedClip(data=data, ordinal=1)
    geometry = header or inspect(data, clip_index=0)
    return EncodedClip(
        ordinal=1,
        origin="source reference",
        stored_sha256=inline.sha256,
        stored_header=StoredHeader(nbytes=len(data), geometry=geometry, read=reads),
    )


def test_a_hit_reads_none_of_the_bytes_and_serves_what_inline_bytes_get(host, decodes) -> None:
    data = wav()
    cache = FeatureCache(64 * MIB)
    first = prepare_clips(host, TOY_POLICY, [EncodedClip(data=data, ordinal=1)], cache=cache)
    reads = Reads(data)
    hit = prepare_clips(host, TOY_POLICY, [stored(data, reads)], cache=cache)
    assert reads.count == 0
    assert decodes == [0]
    assert hit.clips[0].features is first.clips[0].features
    assert hit.totals == first.totals
    assert hit.plan.clips == first.plan.clips
    assert hit.clips[0].encoded_bytes == len(data)


def test_a_miss_reads_the_bytes_once_and_computes_what_inline_bytes_get(host, decodes) -> None:
    data = wav(seed=3)
    reads = Reads(data)
    computed = prepare_clips(host, TOY_POLICY, [stored(data, reads)], cache=FeatureCache(64 * MIB))
    uncached = prepare_clips(host, TOY_POLICY, [EncodedClip(data=data, ordinal=1)])
    assert reads.count == 1
    assert decodes == [0, 0]
    np.testing.assert_array_equal(
        computed.clips[0].features.features, uncached.clips[0].features.features
    )
    assert computed.totals == uncached.totals
    # Without a cache it is read (and proven) where it is decoded, once.
    reads = Reads(data)
    prepare_clips(host, TOY_POLICY, [stored(data, reads)])
    assert reads.count == 1


@pytest.mark.parametrize(
    ("change", "channels", "limit"),
    [
        ({"max_duration_seconds": 1, "max_samples_per_clip": 16_000}, 1, "source duration"),
        ({"max_source_rate_hz": 8_000}, 1, "source sample rate"),
        ({"max_source_channels": 1}, 2, "source channels"),
    ],
)
def test_the_requests_policy_refuses_a_recorded_header_as_it_refuses_the_bytes(
    host, change, channels, limit
) -> None:
    # Another model's policy, and a cache that holds the clip: limits are not in the key.
    data = wav(32_000, channels=channels)  # 2 s
    cache = FeatureCache(64 * MIB)
    prepare_clips(host, TOY_POLICY, [EncodedClip(data=data, ordinal=1)], cache=cache)
    hit = prepare_clips(host, TOY_POLICY, [stored(data, Reads(data))], cache=cache)
    assert hit.totals.clips == 1
    strict = attrs.evolve(TOY_POLICY, **change)
    with pytest.raises(LimitError) as from_bytes:
        prepare_clips(host, strict, [EncodedClip(data=data, ordinal=1)], cache=cache)
    reads = Reads(data)
    with pytest.raises(LimitError) as from_header:
        prepare_clips(host, strict, [stored(data, reads)], cache=cache)
    assert from_header.value.limit == from_bytes.value.limit
    assert from_header.value.limit.startswith(limit)
    assert str(from_header.value) == str(from_bytes.value)
    assert reads.count == 0


def test_a_recorded_header_that_is_not_the_bytes_is_refused(host, decodes) -> None:
    data = wav(seed=5)
    mono = inspect(data, clip_index=0)
    wrong = attrs.evolve(mono, channels=2, data_length=mono.data_length, frames=mono.frames // 2)
    wrong = attrs.evolve(wrong, duration_us=wrong.frames * 1_000_000 // wrong.rate_hz)
    # A miss reads the bytes, proves them and reads their header: not the recorded one.
    with pytest.raises(SourceLostError, match="recorded header"):
        prepare_clips(host, TOY_POLICY, [stored(data, Reads(data), header=wrong)])
    assert decodes == []
    # A hit on the same key (same frames planned) but other channels: refused too.
    cache = FeatureCache(64 * MIB)
    prepare_clips(host, TOY_POLICY, [EncodedClip(data=data, ordinal=1)], cache=cache)
    other = attrs.evolve(mono, channels=2, data_length=mono.data_length * 2)
    with pytest.raises(SourceLostError, match="recorded header"):
        prepare_clips(host, TOY_POLICY, [stored(data, Reads(data), header=other)], cache=cache)


def test_a_hit_computed_from_another_reading_of_the_bytes_is_not_served(host) -> None:
    # The same bytes as raw f32 mono and as raw pcm16 stereo: as many frames, so the same
    # key. A stored clip is computed from its own reading, and nothing is refused.
    data = noise(samples=3_200, seed=9).astype("<f4").tobytes()
    mono = SourceFormat.raw("f32", rate_hz=16_000, channels=1)
    stereo = SourceFormat.raw("pcm16", rate_hz=16_000, channels=2)
    cache = FeatureCache(64 * MIB)
    prepare_clips(
        host, TOY_POLICY, [EncodedClip(data=data, ordinal=1, source_format=mono)], cache=cache
    )
    expected = prepare_clips(
        host, TOY_POLICY, [EncodedClip(data=data, ordinal=1, source_format=stereo)]
    )
    inline = EncodedClip(data=data, ordinal=1)
    header = inspect(data, clip_index=0, source_format=stereo)
    reads = Reads(data)
    clip = EncodedClip(
        source_format=stereo,
        ordinal=1,
        stored_sha256=inline.sha256,
        stored_header=StoredHeader(nbytes=len(data), geometry=header, read=reads),
    )
    served = prepare_clips(host, TOY_POLICY, [clip], cache=cache)
    assert reads.count == 1
    assert served.clips[0].channels == 2
    np.testing.assert_array_equal(
        served.clips[0].features.features, expected.clips[0].features.features
    )


def test_bytes_gone_or_damaged_are_refused_where_they_are_read(host, decodes) -> None:
    data = wav(seed=7)
    short = stored(data, Reads(data[:-2]))
    with pytest.raises(SourceLostError, match=short.sha256):
        prepare_clips(host, TOY_POLICY, [short])
    damaged = stored(data, Reads(data[:-100] + bytes(100)))
    with pytest.raises(SourceLostError, match=damaged.sha256):
        prepare_clips(host, TOY_POLICY, [damaged], cache=FeatureCache(64 * MIB))
    assert decodes == []


def test_a_stored_header_needs_its_digest_and_a_clip_needs_bytes() -> None:
    geometry = inspect(wav(), clip_index=0)
    header = StoredHeader(nbytes=10, geometry=geometry, read=lambda: b"")
    with pytest.raises(TypeError, match="stored_sha256"):
        EncodedClip(ordinal=1, stored_header=header)
    with pytest.raises(TypeError, match="data="):
        EncodedClip(ordinal=1)
    clip = EncodedClip(ordinal=1, stored_sha256="0" * 64, stored_header=header)
    assert clip.nbytes == 10
    assert clip.header == geometry
    assert "not read" in repr(clip)
