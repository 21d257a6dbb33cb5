"""Token counts and feature plans against the processor's own arithmetic, edge lengths,
and the 300 s bound."""

from __future__ import annotations

import numpy as np
import pytest

from audiogate.cancel import NEVER
from audiogate.errors import FeatureError, LimitError
from audiogate_qwen3omni.geometry import (
    MAX_FRAMES,
    MAX_ROWS,
    MAX_SAMPLES,
    MIN_SAMPLES,
    audio_tokens,
    clip_geometry,
)

LENGTHS = [
    201,
    320,
    321,
    480,
    481,
    640,
    641,
    799,
    800,
    801,
    16_000,
    16_001,
    479_999,
    480_000,
    480_001,
    4_799_839,
    4_799_840,
    MAX_SAMPLES,
]


def test_token_formula_is_the_processors():
    pytest.importorskip("torch")
    from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import (
        _get_feat_extract_output_lengths,
    )

    frames = np.arange(MAX_FRAMES + 1)
    assert [audio_tokens(int(f)) for f in frames] == _get_feat_extract_output_lengths(
        frames
    ).tolist()
    assert audio_tokens(MAX_FRAMES) == MAX_ROWS


@pytest.mark.parametrize("samples", LENGTHS)
def test_processor_counts_tokens_from_samples_alike(processor, samples):
    # ``_get_num_audio_tokens`` (what serving engines ask the processor for).
    assert processor._get_num_audio_tokens(samples) == clip_geometry(samples).tokens


@pytest.mark.parametrize("samples", [201, 1_000, 16_001, 160_037])
def test_plan_and_extraction_agree(host, policy, samples):
    plan = host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)
    waveform = np.random.default_rng(samples).standard_normal(samples).astype(np.float32) * 0.1
    clip = host.extract_features(policy, plan, waveform, rate_hz=16_000, clip_index=0, cancel=NEVER)
    assert clip.features.shape == plan.feature_shape == (128, samples // 160)
    assert clip.mask.shape == (samples // 160,)
    assert int(clip.mask.sum()) == clip.frames == plan.frames == samples // 160
    assert clip.tokens == plan.tokens == audio_tokens(plan.frames)


@pytest.mark.parametrize("samples", [0, 1, 2, 160, 200])
def test_too_short_is_a_feature_error(host, policy, samples):
    with pytest.raises(FeatureError, match="too short"):
        host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)
    assert samples < MIN_SAMPLES


def test_past_the_window_is_a_limit_error(host, policy):
    host.plan_features(policy, rate_hz=16_000, samples=MAX_SAMPLES, clip_index=0)
    with pytest.raises(LimitError):
        host.plan_features(policy, rate_hz=16_000, samples=MAX_SAMPLES + 1, clip_index=0)


def test_another_rate_is_a_feature_error(host, policy):
    with pytest.raises(FeatureError, match="16000 Hz"):
        host.plan_features(policy, rate_hz=48_000, samples=48_000, clip_index=0)
