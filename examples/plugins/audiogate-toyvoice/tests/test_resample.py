"""The windowed-sinc resampler against analytic tones: accuracy, anti-aliasing, length."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import DecodeError, LimitError, PreprocessCancelled
from audiogate.records import readonly
from audiogate_toyvoice.policy import PINNED
from audiogate_toyvoice.resample import MAX_PHASES, plan_resample, resample

EDGE = 200  # outputs near either end see the zero padding


def tone(freq_hz: float, *, rate_hz: int, samples: int) -> npt.NDArray[np.float32]:
    t = np.arange(samples) / rate_hz
    return readonly((0.5 * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32))


@pytest.mark.parametrize("rate_hz", [8_000, 22_050, 44_100, 48_000, 96_000])
def test_a_tone_in_the_passband_comes_out_as_the_same_tone(rate_hz: int) -> None:
    samples = 2 * rate_hz + 7
    plan = plan_resample(PINNED, source_rate_hz=rate_hz, source_samples=samples, clip_index=0)
    assert plan is not None
    out = resample(
        PINNED, plan, tone(1_000, rate_hz=rate_hz, samples=samples), clip_index=0, cancel=NEVER
    )
    expected = tone(1_000, rate_hz=16_000, samples=plan.output_samples)
    assert out.shape == (plan.output_samples,)
    assert not out.flags.writeable
    assert np.abs(out - expected)[EDGE:-EDGE].max() < 1e-4


@pytest.mark.parametrize("rate_hz", [22_050, 44_100, 48_000])
def test_a_tone_above_the_output_nyquist_is_removed(rate_hz: int) -> None:
    plan = plan_resample(PINNED, source_rate_hz=rate_hz, source_samples=rate_hz, clip_index=0)
    assert plan is not None
    out = resample(
        PINNED, plan, tone(9_000, rate_hz=rate_hz, samples=rate_hz), clip_index=0, cancel=NEVER
    )
    rms = float(np.sqrt(np.mean(out[EDGE:-EDGE] ** 2)))
    assert rms < 0.5 / np.sqrt(2) * 1e-3  # at least 60 dB down


@pytest.mark.parametrize(
    ("samples", "rate_hz", "expected"),
    [
        (1, 48_000, 1),
        (3, 48_000, 1),
        (4, 48_000, 2),
        (441, 44_100, 160),
        (442, 44_100, 161),
        (5, 8_000, 10),
    ],
)
def test_output_length_is_the_ceiling_of_the_exact_ratio(
    samples: int, rate_hz: int, expected: int
) -> None:
    plan = plan_resample(PINNED, source_rate_hz=rate_hz, source_samples=samples, clip_index=0)
    assert plan is not None
    assert plan.output_samples == expected
    out = resample(
        PINNED, plan, tone(440, rate_hz=rate_hz, samples=samples), clip_index=0, cancel=NEVER
    )
    assert out.shape == (expected,)


def test_the_target_rate_is_left_to_the_core_identity() -> None:
    assert plan_resample(PINNED, source_rate_hz=16_000, source_samples=9, clip_index=0) is None


def test_rates_outside_the_policy_are_refused_naming_the_clip() -> None:
    # Messages number clips from 1, as the summaries do: clip_index 3 is "clip 4".
    with pytest.raises(DecodeError, match="clip 4"):
        plan_resample(PINNED, source_rate_hz=4_000, source_samples=9, clip_index=3)


def test_cancellation_is_polled_per_block() -> None:
    class CancelOnSecondPoll(CancelToken):
        polls = 0

        def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
            self.polls += 1
            if self.polls == 2:
                self.cancel()
            super().check(checkpoint, clip_index)

    plan = plan_resample(PINNED, source_rate_hz=48_000, source_samples=48_000, clip_index=0)
    assert plan is not None
    token = CancelOnSecondPoll()
    with pytest.raises(PreprocessCancelled, match="Resample"):
        resample(
            PINNED, plan, tone(440, rate_hz=48_000, samples=48_000), clip_index=0, cancel=token
        )
    assert token.polls == 2


@pytest.mark.parametrize("rate_hz", [16_001, 44_099, 95_999])
def test_a_rate_needing_too_many_filter_phases_is_refused_when_planned(rate_hz: int) -> None:
    # The bank is built at admission: 95,999 Hz would need 16,000 phases (~270 MB to build).
    with pytest.raises(LimitError, match="filter phases"):
        plan_resample(PINNED, source_rate_hz=rate_hz, source_samples=1_000, clip_index=0)


@pytest.mark.parametrize("rate_hz", [8_000, 11_025, 22_050, 32_000, 44_100, 48_000, 88_200, 96_000])
def test_every_common_rate_stays_within_the_phase_bound(rate_hz: int) -> None:
    plan = plan_resample(PINNED, source_rate_hz=rate_hz, source_samples=1_000, clip_index=0)
    assert plan is not None
    assert plan.detail["up"] <= MAX_PHASES
