"""Parity with the original ``_extract_spectrogram`` path at every rate the policy admits.

WAV bytes (mono and stereo, PCM16 and float32) are decoded by ``audiogate.decode``, then
resampled and featurised through the host; the oracle is the original algorithm
(``reference_phi4mm.py``, including its ``scipy.signal.resample_poly`` and 8 kHz fillzero
path) on the same decoded waveform, as the float64 array ``soundfile`` would hand it.
"Every rate from 8 to 96 kHz" is sampled at the rates that exercise each branch of the
integer-ratio rule: 8 kHz and 16 kHz as they are, 11.025/12 kHz relabelled 8 kHz,
22.05/24 kHz relabelled 16 kHz, and factors 2 (32, 44.1 kHz), 3 (48 kHz), 5 (88.2 kHz)
and 6 (96 kHz).
"""

from __future__ import annotations

import numpy as np
import pytest
from phi4mm_helpers import signal, wav_bytes
from reference_phi4mm import compute_audio_embed_size, original_features

from audiogate.cancel import NEVER
from audiogate.decode import DecodeLimits, decode, inspect
from audiogate.host import FamilyHost

TOLERANCE = 2e-6
RATES = [8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 88_200, 96_000]
SECONDS = [0.03, 0.05, 1.0, 7.3]
LONG = [
    (8_000, "pcm16", 2),
    (11_025, "f32", 2),
    (16_000, "pcm16", 1),
    (44_100, "pcm16", 2),
    (48_000, "f32", 1),
    (96_000, "f32", 1),
]


def _through_audiogate(host: FamilyHost, policy, data: bytes):
    limits = DecodeLimits(
        min_rate_hz=policy.min_source_rate_hz, max_rate_hz=policy.max_source_rate_hz
    )
    geometry = inspect(data, clip_index=0, limits=limits)
    decoded = decode(data, geometry, clip_index=0, limits=limits)
    resample = host.plan_resample(
        policy, source_rate_hz=geometry.rate_hz, source_samples=geometry.frames, clip_index=0
    )
    wave = host.resample(policy, resample, decoded, clip_index=0, cancel=NEVER)
    plan = host.plan_features(
        policy, rate_hz=resample.output_rate_hz, samples=wave.size, clip_index=0
    )
    clip = host.extract_features(
        policy, plan, wave, rate_hz=resample.output_rate_hz, clip_index=0, cancel=NEVER
    )
    return decoded, plan, clip


def _check(host: FamilyHost, policy, rate: int, seconds: float, encoding: str, channels: int):
    samples = round(rate * seconds)
    data = wav_bytes(signal(samples, rate, channels=channels, seed=rate + channels), rate, encoding)
    decoded, plan, clip = _through_audiogate(host, policy, data)
    expected = original_features(decoded.astype(np.float64), rate)
    assert clip.features.shape == expected.shape, (rate, seconds, encoding, channels)
    assert plan.frames == expected.shape[0]
    assert plan.tokens == compute_audio_embed_size(expected.shape[0])
    error = float(np.abs(clip.features - expected).max())
    assert error <= TOLERANCE, (rate, seconds, encoding, channels, error)


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("seconds", SECONDS)
@pytest.mark.parametrize("encoding", ["pcm16", "f32"])
@pytest.mark.parametrize("channels", [1, 2], ids=["mono", "stereo"])
def test_matches_the_original_algorithm(
    host: FamilyHost, remote, rate: int, seconds: float, encoding: str, channels: int
) -> None:
    _check(host, remote, rate, seconds, encoding, channels)


@pytest.mark.parametrize(("rate", "encoding", "channels"), LONG)
@pytest.mark.slow
def test_matches_the_original_algorithm_at_60_seconds(
    host: FamilyHost, remote, rate: int, encoding: str, channels: int
) -> None:
    _check(host, remote, rate, 60.0, encoding, channels)


@pytest.mark.parametrize(
    ("rate", "frames"), [(8_000, 98), (11_025, 136), (22_050, 136), (24_000, 148), (44_100, 136)]
)
def test_frame_counts_keep_the_time_stretch_of_the_integer_ratio_rule(
    host: FamilyHost, remote, rate: int, frames: int
) -> None:
    """One second at these rates gives the original's frame counts, not the ~98 of soxr."""
    data = wav_bytes(signal(rate, rate), rate, "pcm16")
    _, plan, _ = _through_audiogate(host, remote, data)
    assert plan.frames == frames
