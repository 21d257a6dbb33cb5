"""The Gemma 3n streaming stage equals the whole clip's resample + features, bit for bit."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audiogate.acquire.clip import EncodedClip
from audiogate.cancel import NEVER, CancelToken
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import FeatureError, NonFiniteSampleError, PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.pipeline.plans import ClipPlan
from audiogate.pipeline.preflight import preflight
from audiogate.policy import AudioPolicy, CheckpointConfigs
from audiogate.streaming.stage import FeatureStream
from audiogate_gemma3n.features import extract_features
from audiogate_gemma3n.resample import SINC, linear_resample, resample, sinc_resample
from audiogate_gemma3n.streaming import (
    STREAM_BLOCK_FRAMES,
    Gemma3nFeatureStream,
    LinearResampleStream,
    SincResampleStream,
    open_feature_stream,
)

RATES = (8_000, 11_025, 16_000, 22_050, 44_100, 48_000)
#: Chunk sizes that put borders inside the sinc filter (up to 74 taps at these rates) and
#: the 512-sample frames, cycled.
ODD_SIZES = (1, 2, 3, 7, 13, 159, 161, 199, 401, 513)


def _signal(n: int, seed: int, scale: float = 0.1) -> npt.NDArray[np.float32]:
    x = np.random.default_rng(seed).standard_normal(n) * scale
    return np.clip(x, -1.0, 1.0).astype(np.float32)


def _chunks(x: npt.NDArray[np.float32], sizes: Sequence[int]) -> Iterator[npt.NDArray[np.float32]]:
    start, index = 0, 0
    while start < x.shape[0]:
        size = max(1, sizes[index % len(sizes)])
        yield x[start : start + size]
        start, index = start + size, index + 1


def _chunkings(rate: int) -> st.SearchStrategy[list[int]]:
    return st.one_of(
        st.just([rate // 100]),  # 10 ms
        st.just([rate // 50]),  # 20 ms
        st.lists(st.integers(1, rate // 10), min_size=1, max_size=8),
        st.lists(st.sampled_from(ODD_SIZES), min_size=1, max_size=6),
    )


def _bits(x: npt.NDArray[np.float32]) -> npt.NDArray[np.uint32]:
    return np.ascontiguousarray(x).view(np.uint32)


@pytest.fixture
def sinc_policy(host: FamilyHost) -> AudioPolicy:
    return host.parse_policy(
        "gemma3n",
        CheckpointConfigs(
            model={"model_type": "gemma3n"},
            processor={"audiogate_audio_limits": {"resampling_algorithm": SINC}},
            processor_file="preprocessor_config.json",
        ),
    )


def _clip_plan(host: FamilyHost, policy: AudioPolicy, rate_hz: int, frames: int) -> ClipPlan:
    """The whole clip's plan (only the geometry is read)."""
    fmt = SourceFormat.raw("pcm16", rate_hz=rate_hz, channels=1)
    clip = EncodedClip(data=bytes(2 * frames), source_format=fmt, ordinal=1)
    return preflight(host, policy, [clip]).clips[0]


def _stream(host: FamilyHost, policy: AudioPolicy, rate_hz: int) -> Gemma3nFeatureStream:
    probe = host.plan_resample(policy, source_rate_hz=rate_hz, source_samples=rate_hz, clip_index=0)
    stream = open_feature_stream(policy, source_rate_hz=rate_hz, resample=probe)
    assert stream is not None
    return stream


def _check_same(
    host: FamilyHost,
    policy: AudioPolicy,
    rate_hz: int,
    x: npt.NDArray[np.float32],
    sizes: Sequence[int],
) -> None:
    plan = _clip_plan(host, policy, rate_hz, x.shape[0])
    # The host's: the family's resampler, or the core's where the policy selects it.
    wave = host.resample(policy, plan.resample, x, clip_index=0, cancel=NEVER)
    whole = extract_features(policy, plan.features, wave, rate_hz=16_000, clip_index=0)
    stream = _stream(host, policy, rate_hz)
    for chunk in _chunks(x, sizes):
        # What the core reserves before a chunk bounds what the stream then holds.
        bound = stream.planned_nbytes(chunk.shape[0])
        stream.push(chunk)
        assert stream.nbytes <= bound
    waveform, features = stream.finish(plan)
    stream.close()
    assert stream.nbytes == 0
    assert np.array_equal(_bits(waveform), _bits(wave))
    assert not waveform.flags.writeable
    assert not features.features.flags.writeable
    assert np.array_equal(_bits(features.features), _bits(whole.features))
    assert np.array_equal(_bits(features.tail), _bits(whole.tail))
    assert features.mask is not None
    assert whole.mask is not None
    assert np.array_equal(features.mask, whole.mask)
    assert (features.frames, features.tokens, features.samples, features.padding_side) == (
        whole.frames,
        whole.tokens,
        whole.samples,
        whole.padding_side,
    )
    assert features.waveform is None
    assert whole.waveform is None


@pytest.mark.parametrize("kind", ["linear", "sinc"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_resamples_as_the_whole_clip(kind: str, data: st.DataObject) -> None:
    rate = data.draw(st.sampled_from([r for r in RATES if r != 16_000] + [32_000, 96_000, 44_101]))
    n = data.draw(st.one_of(st.integers(0, 40), st.integers(41, rate // 2)))
    sizes = data.draw(_chunkings(rate))
    x = _signal(n, data.draw(st.integers(0, 2**16)))
    stream_type = LinearResampleStream if kind == "linear" else SincResampleStream
    whole = (linear_resample if kind == "linear" else sinc_resample)(x, in_rate_hz=rate)
    stream = stream_type(in_rate_hz=rate)
    parts = [stream.push(chunk) for chunk in _chunks(x, sizes)]
    parts.append(stream.finish())
    assert np.array_equal(_bits(np.concatenate(parts)), _bits(whole))


@pytest.mark.parametrize("kind", ["linear", "sinc"])
def test_one_sample_at_a_time(kind: str) -> None:
    x = _signal(3_000, 7)
    for rate in (8_000, 44_100, 48_000):
        stream_type = LinearResampleStream if kind == "linear" else SincResampleStream
        whole = (linear_resample if kind == "linear" else sinc_resample)(x, in_rate_hz=rate)
        stream = stream_type(in_rate_hz=rate)
        parts = [stream.push(x[i : i + 1]) for i in range(x.shape[0])]
        parts.append(stream.finish())
        assert np.array_equal(_bits(np.concatenate(parts)), _bits(whole))


def test_sinc_products_keep_the_whole_clips_rows() -> None:
    # 8,192-row products, their last groups and one-row remainders (44.1 and 22.05 kHz:
    # rows of 441 samples, BLAS products; 48 and 8 kHz: overlapping rows). At 2,167 and
    # 1,809 samples a phase's last row is a one-row remainder that OpenBLAS sums apart.
    for rate, n in (
        (48_000, 3 * 8_192 * 3 + 7),
        (44_100, 441 * 8_193 // 160),
        (8_000, 4_097),
        (44_100, 2_167),
        (22_050, 1_809),
    ):
        x = _signal(n, n)
        whole = sinc_resample(x, in_rate_hz=rate)
        stream = SincResampleStream(in_rate_hz=rate)
        parts = [stream.push(chunk) for chunk in _chunks(x, [rate // 50])]
        parts.append(stream.finish())
        assert np.array_equal(_bits(np.concatenate(parts)), _bits(whole))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_chunking_gives_the_whole_clips_features(
    host: FamilyHost, policy: AudioPolicy, sinc_policy: AudioPolicy, data: st.DataObject
) -> None:
    soxr_policy = attrs.evolve(policy, resampling="soxr_hq")  # the core's resampler
    chosen = data.draw(st.sampled_from([policy, sinc_policy, soxr_policy]))
    rate = data.draw(st.sampled_from(RATES))
    seconds = data.draw(st.floats(0.05, 1.5))
    n = max(int(rate * seconds), rate * 520 // 16_000 + 1)
    sizes = data.draw(_chunkings(rate))
    _check_same(host, chosen, rate, _signal(n, data.draw(st.integers(0, 2**16))), sizes)


@pytest.mark.parametrize(
    "samples",
    [
        513,  # the shortest clip: one frame, exactly one window
        514,  # one past
        640,  # a multiple of 128: no padding
        512 + 160 * STREAM_BLOCK_FRAMES,  # the frames of a streamed block end at its end
        512 + 160 * STREAM_BLOCK_FRAMES + 1,
        16_000,
    ],
)
@pytest.mark.parametrize("sizes", [[1], [160], [320], [13, 401]])
def test_edge_lengths_at_16k(
    host: FamilyHost, policy: AudioPolicy, samples: int, sizes: list[int]
) -> None:
    _check_same(host, policy, 16_000, _signal(samples, samples), sizes)


def test_a_long_clip_in_20ms_chunks(host: FamilyHost, policy: AudioPolicy) -> None:
    _check_same(host, policy, 48_000, _signal(48_000 * 4, 1), [960])


def test_out_of_range_samples_fail_as_the_whole_clip(
    host: FamilyHost, policy: AudioPolicy, sinc_policy: AudioPolicy
) -> None:
    # A full-scale square wave rings past 1.0 through the sinc filter.
    square = np.where(np.arange(9_600) // 24 % 2, 1.0, -1.0).astype(np.float32)
    nan = _signal(9_600, 3)
    nan[5_001] = np.nan  # a sample the linear resampler reads (3·1667)
    for chosen, x, error in (
        (sinc_policy, square, FeatureError),
        (policy, nan, NonFiniteSampleError),
    ):
        plan = _clip_plan(host, chosen, 48_000, x.shape[0])
        wave = resample(chosen, plan.resample, x, clip_index=0, cancel=NEVER)
        assert wave is not None
        with pytest.raises(error) as whole:
            extract_features(chosen, plan.features, wave, rate_hz=16_000, clip_index=0)
        stream = _stream(host, chosen, 48_000)
        for chunk in _chunks(x, [960]):
            stream.push(chunk)
        with pytest.raises(error) as streamed:
            stream.finish(plan)
        assert str(streamed.value) == str(whole.value)


def test_what_does_not_stream_is_left_to_the_core(
    host: FamilyHost, policy: AudioPolicy, left_policy: AudioPolicy
) -> None:
    probe = host.plan_resample(policy, source_rate_hz=48_000, source_samples=48_000, clip_index=0)
    opened = open_feature_stream(policy, source_rate_hz=48_000, resample=probe)
    assert isinstance(opened, FeatureStream)
    assert open_feature_stream(left_policy, source_rate_hz=48_000, resample=probe) is None
    mlx = attrs.evolve(policy, feature_backend="mlx")
    assert open_feature_stream(mlx, source_rate_hz=48_000, resample=probe) is None
    other = attrs.evolve(probe, algorithm="soxr_vhq")
    assert open_feature_stream(policy, source_rate_hz=48_000, resample=other) is None


def test_a_plan_of_another_clip_is_refused(host: FamilyHost, policy: AudioPolicy) -> None:
    stream = _stream(host, policy, 48_000)
    stream.push(_signal(9_600, 0))
    with pytest.raises(Exception, match="streamed as linear"):
        stream.finish(_clip_plan(host, policy, 48_000, 9_601))
    stream.close()
    stream.close()
    assert stream.nbytes == 0
    with pytest.raises(RuntimeError):
        stream.push(_signal(10, 0))


def test_a_cancelled_stream_stops_at_its_next_batch(host: FamilyHost, policy: AudioPolicy) -> None:
    token = CancelToken()
    probe = host.plan_resample(policy, source_rate_hz=48_000, source_samples=48_000, clip_index=0)
    stream = open_feature_stream(policy, source_rate_hz=48_000, resample=probe, cancel=token)
    assert stream is not None
    stream.push(_signal(48_000, 0))
    token.cancel()
    with pytest.raises(PreprocessCancelled):
        stream.push(_signal(48_000, 1))
    stream.close()
    assert stream.nbytes == 0
