"""Gemma 3n's band-limited resampler (``resampling_algorithm = "torchaudio_sinc"``):
against a dense torch oracle of torchaudio's ``sinc_interp_hann`` resampling, analytic
tones, edge lengths, plans and policy selection; the linear default unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gemma3n_helpers import CancelAfter

import audiogate_gemma3n.policy as gemma_policy
from audiogate.cancel import NEVER, Checkpoint
from audiogate.errors import PolicyError, PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy, CheckpointConfigs
from audiogate.records import readonly
from audiogate.testing.memory import traced_in_fresh_thread
from audiogate_gemma3n.resample import (
    OUTPUTS_PER_BLOCK,
    SINC,
    linear_resample,
    sinc_output_length,
    sinc_resample,
)

torch = pytest.importorskip("torch")

#: Summation order differs from a float32 conv1d: a few float32 ulps of unit-scale signal.
TOLERANCE = 1e-6
RATES = [8_000, 11_025, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000, 192_000]


def oracle(x: np.ndarray, fs: int, out: int = 16_000) -> np.ndarray:
    """torchaudio's resampling written out densely: the whole kernel matrix (float64,
    stored float32), the input padded by ``width`` and ``width + orig``, a strided conv1d,
    and the output cut to ``ceil(new·n/orig)`` computed in float32."""
    g = math.gcd(fs, out)
    orig, new = fs // g, out // g
    base = min(orig, new) * 0.99
    width = math.ceil(6 * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1)[:, None, None] / new + idx
    t = (t * base).clamp(-6, 6)
    window = torch.cos(t * math.pi / 6 / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.tensor(1.0, dtype=t.dtype), t.sin() / t)
    kernel = (kernel * window * (base / orig)).to(torch.float32)
    padded = torch.nn.functional.pad(torch.from_numpy(x)[None], (width, width + orig))
    y = torch.nn.functional.conv1d(padded[:, None], kernel, stride=orig)
    y = y.transpose(1, 2).reshape(-1)
    length = int(torch.ceil(torch.as_tensor(new * len(x) / orig)))
    return y[:length].numpy()


def _signal(n: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 0.3).astype(np.float32)


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


@pytest.mark.parametrize("fs", RATES)
@pytest.mark.parametrize("n", [1, 2, 3, 40, 441, 1_000, 48_001])
def test_equals_the_dense_torch_oracle(fs, n):
    x = _signal(n, seed=n)
    got = sinc_resample(x, in_rate_hz=fs)
    want = oracle(x, fs)
    assert got.shape == want.shape == (sinc_output_length(n, in_rate_hz=fs),)
    assert got.dtype == np.float32
    assert not got.flags.writeable
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)


def test_a_rate_that_does_not_reduce_is_banded():
    # 44.101 kHz: 16,000 phases; torchaudio's dense kernel would be 16,000 × 44,135.
    x = _signal(44_101 // 4)
    got = sinc_resample(x, in_rate_hz=44_101)
    assert got.shape == (sinc_output_length(len(x), in_rate_hz=44_101),)
    # Bands and the dense formula agree on the first phases (a slice of the oracle's rows).
    reference = sinc_resample(x, in_rate_hz=44_100)
    assert np.abs(got[:2_000] - reference[:2_000]).max() < 0.05


def test_the_output_length_rounds_the_quotient_to_float32():
    # 22,050 Hz → 16 kHz is 320/441; n = 441·k + 1 gives k·320 + 0.7256: ceil → +1.
    assert sinc_output_length(442, in_rate_hz=22_050) == 321
    # A quotient just above a large integer rounds to it in float32 first.
    n = 441 * 1_500 + 1  # 480,000 + 0.3628... at 44.1 kHz
    assert sinc_output_length(n, in_rate_hz=44_100) == math.ceil(float(np.float32(160 * n / 441)))
    assert sinc_output_length(0, in_rate_hz=48_000) == 0
    assert sinc_output_length(5, in_rate_hz=16_000) == 5


def test_it_band_limits_where_linear_aliases():
    # 12 kHz at 48 kHz is above the 8 kHz Nyquist: linear folds it to 4 kHz at nearly full
    # amplitude, the sinc filter removes it; a 1 kHz tone passes both.
    t = np.arange(48_000) / 48_000
    high = (0.5 * np.sin(2 * np.pi * 12_000 * t)).astype(np.float32)
    low = (0.5 * np.sin(2 * np.pi * 1_000 * t)).astype(np.float32)
    middle = slice(1_000, -1_000)
    assert np.abs(sinc_resample(high, in_rate_hz=48_000)[middle]).max() < 1e-3
    assert np.abs(linear_resample(high, in_rate_hz=48_000)[middle]).max() > 0.4
    passed = sinc_resample(low, in_rate_hz=48_000)[middle]
    expected = 0.5 * np.sin(2 * np.pi * 1_000 * np.arange(16_000) / 16_000)[middle]
    np.testing.assert_allclose(passed, expected, atol=2e-3)


def test_equal_rates_copy():
    x = _signal(100)
    out = sinc_resample(x, in_rate_hz=16_000)
    np.testing.assert_array_equal(out, x)
    assert out is not x


def test_refuses_what_is_not_mono_float32():
    with pytest.raises(ValueError, match="mono float32"):
        sinc_resample(np.zeros((2, 10), dtype=np.float32), in_rate_hz=48_000)
    with pytest.raises(ValueError, match="mono float32"):
        sinc_resample(np.zeros(10, dtype=np.float64), in_rate_hz=48_000)


def test_cancellation_is_polled_per_block():
    x = _signal(48_000 * 8)
    token = CancelAfter(Checkpoint.RESAMPLE, 2)
    with pytest.raises(PreprocessCancelled) as raised:
        sinc_resample(x, in_rate_hz=48_000, cancel=token, clip_index=3)
    assert raised.value.checkpoint == Checkpoint.RESAMPLE
    assert token.checks == 2  # the second poll is inside the loop
    assert len(x) * 16_000 // 48_000 > 2 * OUTPUTS_PER_BLOCK


def test_the_key_selects_it_and_the_host_plans_and_runs_it(
    host: FamilyHost, policy: AudioPolicy, sinc_policy: AudioPolicy
):
    assert policy.resampling == "linear"  # the default stays mlxcel's
    assert sinc_policy.resampling == SINC
    source = sinc_policy.source_of("resampling")
    assert source.key == "/audiogate_audio_limits/resampling_algorithm"
    x = readonly(_signal(44_100))
    plan = host.plan_resample(
        sinc_policy, source_rate_hz=44_100, source_samples=len(x), clip_index=0
    )
    assert (plan.algorithm, plan.output_samples) == (SINC, 16_000)
    assert plan.detail["anti_aliasing"] is True
    assert plan.working_bytes > 0
    out = host.resample(sinc_policy, plan, x, clip_index=0, cancel=NEVER)
    np.testing.assert_array_equal(out, sinc_resample(x, in_rate_hz=44_100))
    # 16 kHz sources are the identity either way.
    same = host.plan_resample(sinc_policy, source_rate_hz=16_000, source_samples=10, clip_index=0)
    assert same.algorithm == "identity"
    # The linear path is what it was.
    linear = host.plan_resample(policy, source_rate_hz=44_100, source_samples=len(x), clip_index=0)
    assert linear.algorithm == "linear"
    np.testing.assert_array_equal(
        host.resample(policy, linear, x, clip_index=0, cancel=NEVER),
        linear_resample(x, in_rate_hz=44_100),
    )


def test_an_unknown_resampler_is_refused_at_start_up(host: FamilyHost):
    for wrong in ("soxr_hq", "sinc", 1):
        with pytest.raises(PolicyError, match="must be one of 'linear', 'torchaudio_sinc'"):
            host.parse_policy(
                "gemma3n",
                CheckpointConfigs(
                    model={
                        "model_type": "gemma3n",
                        "audiogate_audio_limits": {"resampling_algorithm": wrong},
                    }
                ),
            )
    keys = [k for k in gemma_policy.POLICY_KEYS if k.target == "resampling"]
    assert [k.enum for k in keys] == [("linear", "torchaudio_sinc")]


@pytest.mark.parametrize(("rate_hz", "samples"), [(48_000, 144_000), (44_100, 99_999), (8_000, 7)])
def test_plan_memory_bounds_the_run(sinc_policy: AudioPolicy, host: FamilyHost, rate_hz, samples):
    x = readonly(_signal(samples))
    plan = host.plan_resample(
        sinc_policy, source_rate_hz=rate_hz, source_samples=samples, clip_index=0
    )
    _, peak = traced_in_fresh_thread(
        lambda: host.resample(sinc_policy, plan, x, clip_index=0, cancel=NEVER)
    )
    assert peak <= plan.output_samples * 4 + plan.working_bytes
