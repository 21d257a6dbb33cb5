"""The log-mel frontend: frame arithmetic at the edges, and a tone lands in its mel bin."""

from __future__ import annotations

import numpy as np
import pytest

from audiogate.cancel import NEVER
from audiogate.errors import FeatureError
from audiogate.host import FamilyHost
from audiogate.records import readonly
from audiogate_toyvoice.geometry import frame_count, token_count
from audiogate_toyvoice.melbank import mel_bank


@pytest.mark.parametrize(
    ("samples", "frames", "tokens"),
    [(399, 0, 0), (400, 1, 1), (559, 1, 1), (560, 2, 1), (880, 4, 1), (881, 4, 1), (1040, 5, 2)],
)
def test_frames_and_tokens_at_the_edges(samples: int, frames: int, tokens: int) -> None:
    assert frame_count(samples) == frames
    assert token_count(frames) == tokens


def test_a_clip_shorter_than_a_frame_is_refused(audiogate_host: FamilyHost) -> None:
    policy = audiogate_host.default_policy("toyvoice")
    with pytest.raises(FeatureError, match="shorter than one 400-sample frame"):
        audiogate_host.plan_features(policy, rate_hz=16_000, samples=399, clip_index=0)


def test_a_tone_peaks_in_the_mel_band_that_contains_it(audiogate_host: FamilyHost) -> None:
    policy = audiogate_host.default_policy("toyvoice")
    t = np.arange(16_000) / 16_000
    waveform = readonly((0.5 * np.sin(2 * np.pi * 1_000 * t)).astype(np.float32))
    plan = audiogate_host.plan_features(policy, rate_hz=16_000, samples=16_000, clip_index=0)
    clip = audiogate_host.extract_features(
        policy, plan, waveform, rate_hz=16_000, clip_index=0, cancel=NEVER
    )
    assert clip.features.shape == (98, 40)
    peak_band = int(np.argmax(clip.features.mean(axis=0)))
    bin_1k = 1_000 * 512 // 16_000
    assert peak_band == int(np.argmax(mel_bank()[bin_1k]))
