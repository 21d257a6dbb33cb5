"""Test kit for a family's streaming stage (``open_feature_stream``): chunkings, and the
check that a stream fed any chunking gives the whole clip's resample + features.

::

    from audiogate.testing.streaming import assert_stream_matches_whole_clip, chunkings

    def test_20ms_chunks(audiogate_host, policy):
        assert_stream_matches_whole_clip(
            audiogate_host, policy, 48_000, noise_samples(48_000, seed=1), [960]
        )

Everything goes through the plugin host, as the streaming frontend calls it; the whole
clip is the host's ``resample`` then ``extract_features`` of the concatenated samples.
Comparisons are bit for bit unless a tolerance is given (a family whose streamed math
cannot keep the whole clip's float order declares one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.acquire.clip import EncodedClip
from audiogate.cancel import NEVER, CancelToken
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.pipeline.plans import ClipPlan
from audiogate.pipeline.preflight import preflight
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures
from audiogate.streaming.stage import FeatureStream

if TYPE_CHECKING:
    from hypothesis import strategies as st

__all__ = [
    "ODD_SIZES",
    "StreamedClip",
    "assert_cancel_stops_the_stream",
    "assert_stream_matches_whole_clip",
    "bits",
    "chunk_strategy",
    "chunks",
    "noise_samples",
    "open_stream",
    "standard_chunkings",
    "whole_clip_plan",
]

#: Chunk sizes in source frames that put borders inside typical resampler filters and
#: 400- or 512-sample analysis windows (cycled).
ODD_SIZES: Final = (1, 2, 3, 7, 13, 159, 161, 199, 401, 513)


def noise_samples(n: int, seed: int, scale: float = 0.1) -> npt.NDArray[np.float32]:
    """Gaussian noise ``[shape=(n,)]`` of standard deviation ``scale``, clipped to [-1, 1]."""
    x = np.random.default_rng(seed).standard_normal(n) * scale
    return np.clip(x, -1.0, 1.0).astype(np.float32)


def bits(x: npt.NDArray[np.float32]) -> npt.NDArray[np.uint32]:
    """The float32 array's bit patterns (``-0.0`` and NaN payloads compare exactly)."""
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def chunks(x: npt.NDArray[np.float32], sizes: Sequence[int]) -> Iterator[npt.NDArray[np.float32]]:
    """``x`` cut into consecutive chunks of ``sizes`` frames, cycled (sizes under 1 count
    as 1; the last chunk may be shorter)."""
    start, index = 0, 0
    while start < x.shape[0]:
        size = max(1, sizes[index % len(sizes)])
        yield x[start : start + size]
        start, index = start + size, index + 1


def standard_chunkings(
    rate_hz: int, *, window: int = 400, seed: int = 0
) -> tuple[tuple[int, ...], ...]:
    """Fixed chunkings at ``rate_hz``: 10 ms, 20 ms, seeded random sizes up to 100 ms, and
    sizes that put borders inside a filter or window of ``window`` samples (1, a prime
    below it, one more than it). One-sample pushes are :data:`ODD_SIZES`' first; push
    ``(1,)`` yourself on short clips."""
    rng = np.random.default_rng(seed)
    random = tuple(int(s) for s in rng.integers(1, max(2, rate_hz // 10), size=6))
    return (
        (max(1, rate_hz // 100),),
        (max(1, rate_hz // 50),),
        random,
        (1, 7, max(1, window // 2 - 1), window + 1),
    )


def chunk_strategy(
    rate_hz: int, odd_sizes: Sequence[int] = ODD_SIZES
) -> st.SearchStrategy[list[int]]:
    """A hypothesis strategy of chunk sizes at ``rate_hz``: 10 ms, 20 ms, random up to
    100 ms, and runs of ``odd_sizes``."""
    from hypothesis import strategies as st

    return st.one_of(
        st.just([max(1, rate_hz // 100)]),
        st.just([max(1, rate_hz // 50)]),
        st.lists(st.integers(1, max(1, rate_hz // 10)), min_size=1, max_size=8),
        st.lists(st.sampled_from(list(odd_sizes)), min_size=1, max_size=6),
    )


def whole_clip_plan(host: FamilyHost, policy: AudioPolicy, rate_hz: int, frames: int) -> ClipPlan:
    """The plan of a mono clip of ``frames`` frames at ``rate_hz`` (only its geometry)."""
    fmt = SourceFormat.raw("pcm16", rate_hz=rate_hz, channels=1)
    clip = EncodedClip(data=bytes(2 * frames), source_format=fmt, ordinal=1)
    return preflight(host, policy, [clip]).clips[0]


def open_stream(
    host: FamilyHost, policy: AudioPolicy, rate_hz: int, *, cancel: CancelToken = NEVER
) -> FeatureStream | None:
    """The family's feature stream for a clip at ``rate_hz``, opened as the streaming
    frontend opens it (the resample plan probed at one second), or ``None``."""
    probe = host.plan_resample(policy, source_rate_hz=rate_hz, source_samples=rate_hz, clip_index=0)
    return host.open_feature_stream(
        policy, source_rate_hz=rate_hz, resample=probe, clip_index=0, cancel=cancel
    )


@attrs.frozen(kw_only=True)
class StreamedClip:
    """Both sides of one parity check, for a family's own further assertions.

    :param waveform: the stream's normalized waveform.
    :param features: the stream's features.
    :param whole_waveform: the host's ``resample`` of the whole clip.
    :param whole_features: the host's ``extract_features`` of that waveform.
    """

    waveform: npt.NDArray[np.float32]
    features: ClipFeatures
    whole_waveform: npt.NDArray[np.float32]
    whole_features: ClipFeatures


def _same(name: str, got: Any, want: Any, atol: float) -> None:
    if isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        assert isinstance(got, np.ndarray), f"{name}: {got!r}, whole clip an array"
        assert isinstance(want, np.ndarray), f"{name}: an array, whole clip {want!r}"
        if (got.shape, got.dtype) != (want.shape, want.dtype):
            raise AssertionError(
                f"{name}: {got.dtype}{got.shape}, whole clip {want.dtype}{want.shape}"
            )
        if atol == 0.0 or not np.issubdtype(want.dtype, np.floating):
            same = np.array_equal(
                np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8)
            )
        else:
            same = bool(np.allclose(got, want, rtol=0.0, atol=atol, equal_nan=True))
        if not same:
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            raise AssertionError(
                f"{name} differs from the whole clip's: {int(np.count_nonzero(diff))} of "
                f"{want.size} values, at most {float(np.nanmax(diff, initial=0.0))}"
            )
    elif isinstance(want, float) and isinstance(got, float) and math.isnan(want):
        assert math.isnan(got), f"{name}: {got!r}, whole clip NaN"
    elif isinstance(want, float) and atol:
        assert abs(float(got) - want) <= atol, f"{name}: {got} != {want}"
    else:
        assert got == want, f"{name}: {got!r}, whole clip {want!r}"


def assert_stream_matches_whole_clip(
    host: FamilyHost,
    policy: AudioPolicy,
    rate_hz: int,
    samples: npt.NDArray[np.float32],
    sizes: Sequence[int],
    *,
    atol: float = 0.0,
) -> StreamedClip:
    """Push ``samples`` (mono float32 at ``rate_hz``) in chunks of ``sizes`` through the
    family's stream and check it against the whole clip.

    Checked: the stream opens; before each chunk :meth:`FeatureStream.planned_nbytes`
    bounds what it then holds; ``finish`` passes the host's feature checks (shape,
    frames, tokens, read-only); the waveform and every field of the features record equal
    the whole clip's (bit for bit, or within ``atol`` for float arrays and floats);
    ``close`` leaves ``nbytes == 0``.

    :returns: both sides, for further checks.
    """
    plan = whole_clip_plan(host, policy, rate_hz, samples.shape[0])
    whole_wave = host.resample(policy, plan.resample, samples, clip_index=0, cancel=NEVER)
    whole = host.extract_features(
        policy,
        plan.features,
        whole_wave,
        rate_hz=plan.resample.output_rate_hz,
        clip_index=0,
        cancel=NEVER,
    )
    stream = open_stream(host, policy, rate_hz)
    assert stream is not None, f"{policy.family} opened no feature stream at {rate_hz} Hz"
    try:
        for chunk in chunks(samples, sizes):
            bound = stream.planned_nbytes(chunk.shape[0])
            stream.push(chunk)
            assert stream.nbytes <= bound, (
                f"the stream holds {stream.nbytes} bytes, reserved {bound}"
            )
        waveform, features = stream.finish(plan)
    finally:
        stream.close()
    assert stream.nbytes == 0, "a closed stream still holds bytes"
    host.check_features(policy, plan.features, features, clip_index=0)
    assert not waveform.flags.writeable, "the streamed waveform is writable"
    _same("waveform", waveform, whole_wave, atol)
    assert type(features) is type(whole), (
        f"the stream made {type(features).__name__}, the whole clip {type(whole).__name__}"
    )
    if attrs.has(type(whole)):
        for field in attrs.fields(type(whole)):
            name = field.name
            _same(f"features.{name}", getattr(features, name), getattr(whole, name), atol)
    return StreamedClip(
        waveform=waveform, features=features, whole_waveform=whole_wave, whole_features=whole
    )


def assert_cancel_stops_the_stream(host: FamilyHost, policy: AudioPolicy, rate_hz: int) -> None:
    """A stream whose token is cancelled stops with :class:`PreprocessCancelled` by the
    next second of source it takes (or at ``finish``), and ``close`` then releases it."""
    token = CancelToken()
    stream = open_stream(host, policy, rate_hz, cancel=token)
    assert stream is not None, f"{policy.family} opened no feature stream at {rate_hz} Hz"
    try:
        stream.push(noise_samples(rate_hz, 0))
        token.cancel()
        try:
            stream.push(noise_samples(rate_hz, 1))
            stream.finish(whole_clip_plan(host, policy, rate_hz, 2 * rate_hz))
        except PreprocessCancelled:
            pass
        else:
            raise AssertionError("a cancelled stream finished")
    finally:
        stream.close()
    assert stream.nbytes == 0, "a closed stream still holds bytes"
