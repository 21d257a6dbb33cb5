"""The Gemma 3n streaming stage equals the whole clip's resample + features, bit for bit."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audiogate.cancel import NEVER
from audiogate.errors import FeatureError, NonFiniteSampleError
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy, CheckpointConfigs
from audiogate.streaming.stage import FeatureStream
from audiogate.testing.streaming import (
    assert_cancel_stops_the_stream,
    assert_stream_matches_whole_clip,
    bits,
    chunk_strategy,
    chunks,
    noise_samples,
    open_stream,
    whole_clip_plan,
)
from audiogate_gemma3n.features import extract_features
from audiogate_gemma3n.resample import (
    SINC,
    linear_resample,
    resample,
    sinc_kernel,
    sinc_resample,
)
from audiogate_gemma3n.streaming import (
    STREAM_BLOCK_FRAMES,
    Gemma3nFeatureStream,
    LinearResampleStream,
    SincResampleStream,
    open_feature_stream,
)

RATES = (8_000, 11_025, 16_000, 22_050, 44_100, 48_000)
# The kit's odd chunk sizes (audiogate.testing.streaming.ODD_SIZES) put borders inside
# the sinc filter (up to 74 taps at these rates) and the 512-sample frames.


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


def _stream(host: FamilyHost, policy: AudioPolicy, rate_hz: int) -> Gemma3nFeatureStream:
    stream = open_stream(host, policy, rate_hz)
    assert isinstance(stream, Gemma3nFeatureStream)
    return stream


@pytest.mark.parametrize("kind", ["linear", "sinc"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_resamples_as_the_whole_clip(kind: str, data: st.DataObject) -> None:
    rate = data.draw(st.sampled_from([r for r in RATES if r != 16_000] + [32_000, 96_000, 44_101]))
    n = data.draw(st.one_of(st.integers(0, 40), st.integers(41, rate // 2)))
    sizes = data.draw(chunk_strategy(rate))
    x = noise_samples(n, data.draw(st.integers(0, 2**16)))
    stream_type = LinearResampleStream if kind == "linear" else SincResampleStream
    whole = (linear_resample if kind == "linear" else sinc_resample)(x, in_rate_hz=rate)
    stream = stream_type(in_rate_hz=rate)
    parts = [stream.push(chunk) for chunk in chunks(x, sizes)]
    parts.append(stream.finish())
    assert np.array_equal(bits(np.concatenate(parts)), bits(whole))


@pytest.mark.parametrize("kind", ["linear", "sinc"])
def test_one_sample_at_a_time(kind: str) -> None:
    x = noise_samples(3_000, 7)
    for rate in (8_000, 44_100, 48_000):
        stream_type = LinearResampleStream if kind == "linear" else SincResampleStream
        whole = (linear_resample if kind == "linear" else sinc_resample)(x, in_rate_hz=rate)
        stream = stream_type(in_rate_hz=rate)
        parts = [stream.push(x[i : i + 1]) for i in range(x.shape[0])]
        parts.append(stream.finish())
        assert np.array_equal(bits(np.concatenate(parts)), bits(whole))


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
        x = noise_samples(n, n)
        whole = sinc_resample(x, in_rate_hz=rate)
        stream = SincResampleStream(in_rate_hz=rate)
        parts = [stream.push(chunk) for chunk in chunks(x, [rate // 50])]
        parts.append(stream.finish())
        assert np.array_equal(bits(np.concatenate(parts)), bits(whole))


@pytest.mark.parametrize("rate", [8_000, 22_050, 44_100, 48_000])
def test_blas_sums_a_products_rows_as_the_sinc_stream_assumes(rate: int) -> None:
    # SincResampleStream computes a phase's rows in groups of 4 inside the whole clip's
    # 8,192-row products, and a product's last rows at finish (redoing the group before
    # a one-row remainder): exact only while the BLAS sums a row of ``view @ taps`` the
    # same in a product from any multiple of 4 to the product's end as in the whole
    # product. If this fails, this BLAS build rounds rows by their place otherwise: the
    # stream must run the whole clip's own products (same first row and length).
    kernel = sinc_kernel(rate, 16_000)
    band = kernel.taps.shape[1]
    x = noise_samples(8_192 * kernel.in_step + band, rate)
    for phase in sorted({0, kernel.out_step - 1}):
        taps = kernel.taps[phase]
        start = int(kernel.offsets[phase])
        for rows in (8_192, 1_001, 1_002, 1_003, 5, 1):
            view = np.lib.stride_tricks.as_strided(
                x[start:],
                shape=(rows, band),
                strides=(kernel.in_step * x.strides[0], x.strides[0]),
                writeable=False,
            )
            whole = view @ taps
            for first in sorted(
                {*range(0, min(rows, 64), 4), *range(rows - rows % 4 - 64, rows, 4)}
            ):
                if first < 0:
                    continue
                stop = first + (rows - first) // 4 * 4
                if stop > first:  # a streamed product of whole groups
                    assert np.array_equal(bits(view[first:stop] @ taps), bits(whole[first:stop]))
                if rows - first == 1 and first:  # finish: the group before, redone
                    first -= 4
                assert np.array_equal(bits(view[first:] @ taps), bits(whole[first:]))


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
    sizes = data.draw(chunk_strategy(rate))
    assert_stream_matches_whole_clip(
        host, chosen, rate, noise_samples(n, data.draw(st.integers(0, 2**16))), sizes
    )


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
    assert_stream_matches_whole_clip(host, policy, 16_000, noise_samples(samples, samples), sizes)


def test_a_long_clip_in_20ms_chunks(host: FamilyHost, policy: AudioPolicy) -> None:
    assert_stream_matches_whole_clip(host, policy, 48_000, noise_samples(48_000 * 4, 1), [960])


def test_out_of_range_samples_fail_as_the_whole_clip(
    host: FamilyHost, policy: AudioPolicy, sinc_policy: AudioPolicy
) -> None:
    # A full-scale square wave rings past 1.0 through the sinc filter.
    square = np.where(np.arange(9_600) // 24 % 2, 1.0, -1.0).astype(np.float32)
    nan = noise_samples(9_600, 3)
    nan[5_001] = np.nan  # a sample the linear resampler reads (3·1667)
    for chosen, x, error in (
        (sinc_policy, square, FeatureError),
        (policy, nan, NonFiniteSampleError),
    ):
        plan = whole_clip_plan(host, chosen, 48_000, x.shape[0])
        wave = resample(chosen, plan.resample, x, clip_index=0, cancel=NEVER)
        assert wave is not None
        with pytest.raises(error) as whole:
            extract_features(chosen, plan.features, wave, rate_hz=16_000, clip_index=0)
        stream = _stream(host, chosen, 48_000)
        for chunk in chunks(x, [960]):
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
    stream.push(noise_samples(9_600, 0))
    with pytest.raises(Exception, match="streamed as linear"):
        stream.finish(whole_clip_plan(host, policy, 48_000, 9_601))
    stream.close()
    stream.close()
    assert stream.nbytes == 0
    with pytest.raises(RuntimeError):
        stream.push(noise_samples(10, 0))


def test_a_cancelled_stream_stops_at_its_next_batch(host: FamilyHost, policy: AudioPolicy) -> None:
    assert_cancel_stops_the_stream(host, policy, 48_000)
