"""Gemma 3n's linear resampler: mlxcel's golden, the pinned float32 formula, plans, cancellation."""

from __future__ import annotations

import numpy as np
import pytest
from gemma3n_helpers import CancelAfter
from hypothesis import given, settings
from hypothesis import strategies as st

from audiogate.cancel import NEVER, Checkpoint
from audiogate.errors import DecodeError, LimitError, PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy
from audiogate.records import readonly
from audiogate.testing.memory import traced_in_fresh_thread
from audiogate_gemma3n.resample import (
    OUTPUTS_PER_BLOCK,
    linear_output_length,
    linear_resample,
)


def pinned_formula(x: np.ndarray, fs: int) -> np.ndarray:
    """mlxcel's resampler written out literally, one output at a time in float32."""
    n = len(x)
    if fs == 16_000:
        return x.copy()
    out = np.empty(-(-n * 16_000 // fs), dtype=np.float32)
    for i in range(len(out)):
        pos = i * fs
        left, rem = pos // 16_000, pos % 16_000
        frac = np.float32(rem) / np.float32(16_000)
        a, b = x[min(left, n - 1)], x[min(left + 1, n - 1)]
        out[i] = a + (b - a) * frac
    return out


def test_mlxcel_golden_downmixed_8k_stereo():
    # Stereo float 8 kHz [2, 0, -2, 0, 0.5, -0.5] -> mono [1, -1, 0] (core decoder) -> 16 kHz.
    mono = np.array([1.0, -1.0, 0.0], dtype=np.float32)
    out = linear_resample(mono, in_rate_hz=8_000)
    assert out.dtype == np.float32
    assert out.tolist() == [1.0, 0.0, -1.0, -0.5, 0.0, 0.0]
    assert not out.flags.writeable
    assert linear_resample(mono, in_rate_hz=8_000).tolist() == out.tolist()  # deterministic


def test_mlxcel_golden_through_the_host(host: FamilyHost, policy: AudioPolicy):
    plan = host.plan_resample(policy, source_rate_hz=8_000, source_samples=3, clip_index=0)
    assert (plan.algorithm, plan.output_rate_hz, plan.output_samples) == ("linear", 16_000, 6)
    assert plan.detail["anti_aliasing"] is False
    samples = np.array([1.0, -1.0, 0.0], dtype=np.float32)
    samples.flags.writeable = False
    out = host.resample(policy, plan, samples, clip_index=0, cancel=NEVER)
    assert out.tolist() == [1.0, 0.0, -1.0, -0.5, 0.0, 0.0]


RATES = [1, 7, 8_000, 11_025, 12_000, 15_999, 16_001, 22_050, 24_000, 32_000, 44_100, 44_101,
         48_000, 88_200, 96_000, 176_400, 192_000]  # fmt: skip


@pytest.mark.parametrize("fs", RATES)
@pytest.mark.parametrize("n", [1, 2, 3, 161, 1_000])
def test_matches_the_pinned_formula_exactly(fs, n):
    if linear_output_length(n, in_rate_hz=fs) > 20_000:
        n = 3  # keep the scalar loop short at very low rates
    x = np.random.default_rng(fs + n).uniform(-1, 1, n).astype(np.float32)
    expected = pinned_formula(x, fs)
    out = linear_resample(x, in_rate_hz=fs)
    assert out.shape == expected.shape == (linear_output_length(n, in_rate_hz=fs),)
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(
    fs=st.integers(min_value=1, max_value=192_000),
    n=st.integers(min_value=0, max_value=3_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_rate_and_length_match_the_vectorised_reference(fs, n, seed):
    x = np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)
    length = linear_output_length(n, in_rate_hz=fs)
    if length > 200_000:
        return
    # The same formula vectorised over every output (int64 index math, float32 values).
    i = np.arange(length, dtype=np.int64)
    pos = i * fs
    left = pos // 16_000
    frac = (pos % 16_000).astype(np.float32) / np.float32(16_000)
    expected = x.copy() if fs == 16_000 else np.empty(0, np.float32)
    if fs != 16_000 and n:
        a, b = x[np.minimum(left, n - 1)], x[np.minimum(left + 1, n - 1)]
        expected = a + (b - a) * frac
    np.testing.assert_array_equal(linear_resample(x, in_rate_hz=fs), expected)


def _formula_at(x: np.ndarray, fs: int, lo: int, hi: int) -> np.ndarray:
    i = np.arange(lo, hi, dtype=np.int64)
    left = i * fs // 16_000
    frac = (i * fs % 16_000).astype(np.float32) / np.float32(16_000)
    a = x[np.minimum(left, len(x) - 1)]
    b = x[np.minimum(left + 1, len(x) - 1)]
    return a + (b - a) * frac


@pytest.mark.parametrize("fs", [44_100, 48_000, 8_000, 44_101])
@pytest.mark.slow
def test_long_clips_across_blocks_match_the_formula(fs):
    # 30 s: many blocks, periods sliced or gathered, and the clamped right edge.
    n = fs * 30 if fs != 8_000 else 8_000 * 10
    x = np.random.default_rng(fs).uniform(-1, 1, n).astype(np.float32)
    out = linear_resample(x, in_rate_hz=fs)
    assert out.shape == (linear_output_length(n, in_rate_hz=fs),)
    np.testing.assert_array_equal(out, _formula_at(x, fs, 0, len(out)))
    for lo in (0, OUTPUTS_PER_BLOCK - 5, len(out) - 10):
        hi = min(lo + 10, len(out))
        np.testing.assert_array_equal(
            out[lo:hi], pinned_formula(x, fs)[lo:hi] if n < 10**5 else _formula_at(x, fs, lo, hi)
        )


def test_identity_is_an_independent_read_only_copy(host: FamilyHost, policy: AudioPolicy):
    x = np.linspace(-1, 1, 1_000, dtype=np.float32)
    plan = host.plan_resample(policy, source_rate_hz=16_000, source_samples=1_000, clip_index=0)
    assert (plan.algorithm, plan.output_samples, plan.working_bytes) == ("identity", 1_000, 0)
    out = host.resample(policy, plan, x, clip_index=0, cancel=NEVER)
    np.testing.assert_array_equal(out, x)
    assert out is not x
    assert not np.shares_memory(out, x)
    assert not out.flags.writeable


def test_no_anti_aliasing_is_documented_behaviour():
    # A 12 kHz tone at 48 kHz folds to 4 kHz (16 - 12): kept for parity with mlxcel.
    t = np.arange(48_000) / 48_000
    out = linear_resample(np.sin(2 * np.pi * 12_000 * t).astype(np.float32), in_rate_hz=48_000)
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(np.argmax(spectrum) * 16_000 / len(out) - 4_000) < 2


def test_plan_bounds_and_sizes(host: FamilyHost, policy: AudioPolicy):
    plan = host.plan_resample(policy, source_rate_hz=44_100, source_samples=44_100, clip_index=2)
    assert plan.output_samples == 16_000
    assert plan.source_samples == 44_100
    assert 0 < plan.working_bytes < 2 << 20
    big = host.plan_resample(policy, source_rate_hz=44_101, source_samples=10**6, clip_index=0)
    assert big.working_bytes < 4 << 20  # blocks bound the scratch, not the clip length
    with pytest.raises(LimitError, match=r"source sample rate.*\(clip 3\).*192000"):
        host.plan_resample(policy, source_rate_hz=192_001, source_samples=10, clip_index=2)
    with pytest.raises(DecodeError, match=r"clip 2.*0 Hz"):
        host.plan_resample(policy, source_rate_hz=0, source_samples=10, clip_index=1)


def test_cancellation_is_noticed_inside_the_loop():
    x = np.zeros(48_000 * 10, dtype=np.float32)
    token = CancelAfter(Checkpoint.RESAMPLE, 3)
    with pytest.raises(PreprocessCancelled) as caught:
        linear_resample(x, in_rate_hz=48_000, clip_index=4, cancel=token)
    assert caught.value.checkpoint == "Resample"
    assert caught.value.clip_index == 4
    assert token.checks == 3  # stopped at the third block, not at the end


@pytest.mark.parametrize(
    ("rate_hz", "samples"),
    # Rates sharing few factors with 16 kHz (long residue tables) and short clips, where
    # the tables, not the blocks, set the peak.
    [(44_101, 1_764), (47_999, 4_799), (7_919, 7_919), (191_999, 95_999), (11_025, 441)],
)
def test_the_traced_peak_stays_within_the_plan_for_long_residue_tables(
    host: FamilyHost, policy: AudioPolicy, rate_hz: int, samples: int
):
    x = readonly(np.random.default_rng(0).uniform(-0.5, 0.5, samples).astype(np.float32))
    plan = host.plan_resample(policy, source_rate_hz=rate_hz, source_samples=samples, clip_index=0)
    _, peak = traced_in_fresh_thread(
        lambda: host.resample(policy, plan, x, clip_index=0, cancel=NEVER)
    )
    assert peak <= plan.output_samples * 4 + plan.working_bytes
