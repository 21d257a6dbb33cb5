"""audiogate.testing.streaming catches what a broken stream does: a value one ulp off,
more bytes than it reserved, bytes kept after close, a plan of another clip accepted."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from stream_helpers import family_host, policy_of

from audiogate.host import FamilyHost
from audiogate.records import ClipFeatures, readonly
from audiogate.streaming.stage import FeatureStream
from audiogate.testing.streaming import (
    ODD_SIZES,
    assert_stream_matches_whole_clip,
    chunks,
    noise_samples,
    standard_chunkings,
)

FAMILY = "phi4mm"


class _Broken:
    """A family's stream with one fault."""

    def __init__(self, inner: FeatureStream, fault: str) -> None:
        self._inner, self._fault, self._closed = inner, fault, False

    @property
    def nbytes(self) -> int:
        if self._closed:
            return 64 if self._fault == "leak" else 0
        return self._inner.nbytes + (1 << 30 if self._fault == "bytes" else 0)

    def planned_nbytes(self, more_frames: int) -> int:
        return self._inner.planned_nbytes(more_frames)

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        self._inner.push(samples)

    def finish(self, clip_plan: Any) -> tuple[npt.NDArray[np.float32], ClipFeatures]:
        waveform, features = self._inner.finish(clip_plan)
        if self._fault == "ulp":
            values = features.features.copy()
            values.flat[7] = np.nextafter(values.flat[7], np.float32(np.inf))
            features = attrs.evolve(features, features=readonly(values))
        return waveform, features

    def close(self) -> None:
        self._closed = True
        self._inner.close()


def _broken_host(monkeypatch: pytest.MonkeyPatch, fault: str) -> FamilyHost:
    host = family_host()
    real = type(host).open_feature_stream

    def opened(self: FamilyHost, *args: Any, **kwargs: Any) -> FeatureStream | None:
        stream = real(self, *args, **kwargs)
        return None if stream is None else _Broken(stream, fault)

    monkeypatch.setattr(type(host), "open_feature_stream", opened)
    return host


@pytest.mark.parametrize(
    ("fault", "message"),
    [("ulp", "features.features differs"), ("bytes", "reserved"), ("leak", "still holds")],
)
def test_each_fault_is_caught(monkeypatch: pytest.MonkeyPatch, fault: str, message: str) -> None:
    host = _broken_host(monkeypatch, fault)
    x = noise_samples(16_000, 3)
    with pytest.raises(AssertionError, match=message):
        assert_stream_matches_whole_clip(host, policy_of(FAMILY), 16_000, x, [320])


def test_a_tolerance_admits_an_ulp(monkeypatch: pytest.MonkeyPatch) -> None:
    host = _broken_host(monkeypatch, "ulp")
    x = noise_samples(16_000, 3)
    assert_stream_matches_whole_clip(host, policy_of(FAMILY), 16_000, x, [320], atol=1e-3)


def test_a_sound_stream_passes_and_returns_both_sides() -> None:
    x = noise_samples(4_801, 1)
    for sizes in standard_chunkings(48_000, window=400):
        both = assert_stream_matches_whole_clip(family_host(), policy_of(FAMILY), 48_000, x, sizes)
        assert both.features.tokens == both.whole_features.tokens


def test_chunkings() -> None:
    x = np.arange(10, dtype=np.float32)
    assert [c.tolist() for c in chunks(x, [3, 0])] == [[0, 1, 2], [3], [4, 5, 6], [7], [8, 9]]
    assert list(chunks(x[:0], [1])) == []
    ten_ms, twenty_ms, random, borders = standard_chunkings(16_000, window=400, seed=5)
    assert (ten_ms, twenty_ms) == ((160,), (320,))
    assert random == standard_chunkings(16_000, window=400, seed=5)[2]
    assert all(1 <= s < 1_600 for s in random)
    assert borders == (1, 7, 199, 401)
    assert 1 in ODD_SIZES
