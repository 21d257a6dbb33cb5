"""The SpeechLib integer-ratio resampler: rate rule, preflight, SciPy oracle, cancellation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
from phi4mm_helpers import CancelAfter, sine

from audiogate.cancel import NEVER, Checkpoint
from audiogate.errors import DecodeError, LimitError, PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.records import readonly
from audiogate.testing.memory import traced_in_fresh_thread
from audiogate_phi4mm.resample import (
    BLOCK_OUTPUTS,
    MAX_POLYPHASE_WORK_UNITS,
    decimate,
    decimation_filter,
    plan_speechlib_resample,
    speechlib_rate_rule,
)

TOLERANCE = 2e-6

# (source rate, down, effective rate): processing_phi4mm.py's floor divisions.
RULE = [
    (8_000, 1, 8_000),
    (8_001, 1, 8_000),
    (11_025, 1, 8_000),
    (12_000, 1, 8_000),
    (15_999, 1, 8_000),
    (16_000, 1, 16_000),
    (16_001, 1, 16_000),
    (22_050, 1, 16_000),
    (24_000, 1, 16_000),
    (31_999, 1, 16_000),
    (32_000, 2, 16_000),
    (44_100, 2, 16_000),
    (48_000, 3, 16_000),
    (88_200, 5, 16_000),
    (96_000, 6, 16_000),
    (192_000, 12, 16_000),
]


@pytest.mark.parametrize(("rate", "down", "effective"), RULE)
def test_integer_ratio_rule_keeps_the_published_quirks(rate, down, effective) -> None:
    assert speechlib_rate_rule(rate, clip_index=0) == (down, effective)
    plan = plan_speechlib_resample(source_rate_hz=rate, source_samples=10_001, clip_index=0)
    assert plan.output_rate_hz == effective
    assert plan.output_samples == -(-10_001 // down)
    assert plan.algorithm == ("identity" if down == 1 else "scipy_polyphase_integer")


@pytest.mark.parametrize("rate", [7_999, 4_000, 1])
def test_rates_below_8khz_are_refused_by_the_plan(host: FamilyHost, remote, rate) -> None:
    with pytest.raises(DecodeError) as info:
        host.plan_resample(remote, source_rate_hz=rate, source_samples=16_000, clip_index=2)
    assert info.value.code == "rate_below_minimum"
    assert info.value.clip_index == 2
    assert str(rate) in str(info.value)
    assert "8000" in str(info.value)


def test_downsample_factor_above_12_is_a_limit() -> None:
    with pytest.raises(LimitError) as info:
        plan_speechlib_resample(source_rate_hz=208_000, source_samples=100, clip_index=1)
    assert info.value.limit == "Phi4MM downsample factor"
    assert (info.value.actual, info.value.maximum, info.value.clip_index) == (13, 12, 1)


@pytest.mark.parametrize(("rate", "down"), [(48_000, 3), (192_000, 12), (32_000, 2)])
def test_polyphase_work_is_bounded_before_allocation(rate, down) -> None:
    taps = 20 * down + 1
    most = MAX_POLYPHASE_WORK_UNITS // taps  # outputs at the bound
    plan = plan_speechlib_resample(source_rate_hz=rate, source_samples=most * down, clip_index=0)
    assert plan.detail["work_units"] == most * taps <= MAX_POLYPHASE_WORK_UNITS
    with pytest.raises(LimitError) as info:
        plan_speechlib_resample(source_rate_hz=rate, source_samples=most * down + 1, clip_index=0)
    assert info.value.limit == "Phi4MM resample work units"
    assert info.value.actual == (most + 1) * taps
    assert info.value.maximum == 536_870_912


def test_the_filter_is_scipys() -> None:
    for down in range(2, 13):
        expected = scipy.signal.firwin(20 * down + 1, 1.0 / down, window=("kaiser", 5.0))
        np.testing.assert_array_equal(decimation_filter(down), expected)


def _lengths(down: int) -> list[int]:
    block = BLOCK_OUTPUTS * down
    return [1, 2, down, 20 * down + 1, 997, block - 1, block, block + 1, 2 * block + 7 * down - 3]


@pytest.mark.parametrize("down", range(2, 13))
def test_matches_resample_poly_on_float64_and_float32_input(down: int) -> None:
    rng = np.random.default_rng(down)
    for n in _lengths(down):
        x = (0.5 * rng.standard_normal(n)).astype(np.float32)
        ours = decimate(x, down=down, clip_index=0, cancel=NEVER)
        oracle = scipy.signal.resample_poly(x.astype(np.float64), 1, down)
        assert ours.shape == oracle.shape == (-(-n // down),)
        assert ours.dtype == np.float32
        assert not ours.flags.writeable
        assert np.abs(ours - oracle).max() <= TOLERANCE
        # The float64 result rounded to float32: equal except within float64 ulps of a tie.
        assert np.count_nonzero(ours != oracle.astype(np.float32)) <= max(1, n // 100_000)
        oracle32 = scipy.signal.resample_poly(x, 1, down)  # SciPy computes in float32 here
        assert np.abs(ours - oracle32).max() <= TOLERANCE


@pytest.mark.parametrize(
    ("down", "golden"),
    [
        (2, [0.0022468742, 0.028348744, 0.057180017, 0.084596574]),
        (3, [0.0039218343, 0.042409703, 0.08486806, 0.12377945]),
    ],
)
def test_mlxcel_polyphase_goldens(down: int, golden: list[float]) -> None:
    """``neutral_polyphase_matches_pinned_scipy_reference`` (SciPy 1.15.2, 2e-6)."""
    x = sine(64, 48_000)
    ours = decimate(x, down=down, clip_index=0, cancel=NEVER)
    np.testing.assert_allclose(ours[:4], golden, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("rate", [44_100, 48_000, 96_000])
def test_host_resample_runs_the_plan(host: FamilyHost, remote, rate) -> None:
    x = readonly(sine(rate // 3 + 17, rate))
    plan = host.plan_resample(remote, source_rate_hz=rate, source_samples=x.size, clip_index=0)
    out = host.resample(remote, plan, x, clip_index=0, cancel=NEVER)
    down = rate // 16_000
    oracle = scipy.signal.resample_poly(x.astype(np.float64), 1, down)
    assert np.abs(out - oracle).max() <= TOLERANCE
    assert plan.output_samples == oracle.size


@pytest.mark.parametrize("rate", [8_000, 11_025, 16_000, 24_000])
def test_factor_one_rates_are_relabelled_not_resampled(host: FamilyHost, remote, rate) -> None:
    x = readonly(sine(3_000, rate))
    plan = host.plan_resample(remote, source_rate_hz=rate, source_samples=x.size, clip_index=0)
    out = host.resample(remote, plan, x, clip_index=0, cancel=NEVER)
    np.testing.assert_array_equal(out, x)
    assert not out.flags.writeable
    assert plan.detail["relabelled"] == (rate not in (8_000, 16_000))


def test_cancellation_is_noticed_inside_the_block_loop() -> None:
    x = (0.1 * np.random.default_rng(0).standard_normal(BLOCK_OUTPUTS * 3 * 5)).astype(np.float32)
    token = CancelAfter(Checkpoint.RESAMPLE, after=3)
    with pytest.raises(PreprocessCancelled) as info:
        decimate(x, down=3, clip_index=4, cancel=token)
    assert (info.value.checkpoint, info.value.clip_index) == ("Resample", 4)
    assert token.checks == 3  # after two of five blocks, not at a stage boundary


def test_working_bytes_bound_the_measured_scratch() -> None:
    down = 6
    n = BLOCK_OUTPUTS * down * 3 + 5
    x = (0.1 * np.random.default_rng(1).standard_normal(n)).astype(np.float32)
    plan = plan_speechlib_resample(source_rate_hz=96_000, source_samples=n, clip_index=0)
    decimation_filter(down)  # the cached filter design is not per-clip scratch
    out, peak = traced_in_fresh_thread(lambda: decimate(x, down=down, clip_index=0, cancel=NEVER))
    assert peak - out.nbytes <= plan.working_bytes
    assert plan.working_bytes < 8 << 20
