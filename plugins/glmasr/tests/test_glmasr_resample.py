"""The resampler against what transformers' ``load_audio`` does: ``librosa.load(sr=16000)`` is
soxr HQ over the whole clip, then ``fix_length`` to ``ceil(n · 16000 / rate)`` samples
(zero-padded or cut); restated here with soxr itself (librosa is not a test dependency)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from audiogate.cancel import NEVER
from audiogate.errors import DecodeError

soxr = pytest.importorskip("soxr")

RATES = (8_000, 11_025, 16_000, 22_050, 32_000, 44_100, 48_000, 88_200, 96_000, 192_000)


def loader(x: np.ndarray, rate: int) -> np.ndarray:
    """``librosa.load``'s resample step: soxr HQ, then ``fix_length``."""
    if rate == 16_000:
        return x
    y = soxr.resample(x, rate, 16_000, "HQ")
    size = math.ceil(x.size * 16_000 / rate)
    return np.pad(y, (0, max(0, size - y.size)))[:size]


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("samples", [1, 2, 999, 48_001])
def test_resampled_samples_are_the_loaders(host, policy, rate, samples):
    x = np.random.default_rng(rate + samples).uniform(-0.8, 0.8, samples).astype(np.float32)
    x.flags.writeable = False
    plan = host.plan_resample(policy, source_rate_hz=rate, source_samples=samples, clip_index=0)
    y = host.resample(policy, plan, x, clip_index=0, cancel=NEVER)
    assert plan.output_samples == y.shape[0] == math.ceil(samples * 16_000 / rate)
    assert y.dtype == np.float32
    assert not y.flags.writeable
    np.testing.assert_array_equal(y, loader(x, rate))


def test_a_rate_outside_the_allowed_ones_is_refused(host, policy):
    import attrs

    strict = attrs.evolve(policy, allowed_source_rates_hz=(16_000, 48_000))
    with pytest.raises(DecodeError) as caught:
        host.plan_resample(strict, source_rate_hz=44_100, source_samples=100, clip_index=1)
    assert caught.value.clip_index == 1
