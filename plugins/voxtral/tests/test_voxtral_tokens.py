"""Windows and token counts: the one function against mistral-common's ``AudioEncoder``
arithmetic (re-derived here, and mistral-common's own where installed) and the model's."""

from __future__ import annotations

import math

import pytest

from audiogate.errors import FeatureError, LimitError
from audiogate_voxtral.geometry import audio_tokens, voxtral_geometry

EDGES = [1, 2, 159, 160, 161, 399, 400, 16_000, 479_999, 480_000, 480_001, 960_000, 960_001]


def mistral_tokens(padded: int) -> int:
    """``AudioEncoder._encode_audio_tokens`` of mistral-common 1.13, restated."""
    hop, per_token = 160, int((16_000 // 12.5) / 160)
    frames = math.ceil(padded / hop - 1) if padded % hop else padded // hop
    return math.ceil(frames / per_token)


@pytest.mark.parametrize("samples", EDGES)
def test_windows_padding_and_tokens(samples):
    geometry = voxtral_geometry(samples)
    windows = math.ceil(samples / 480_000)
    assert geometry.windows == windows
    assert geometry.padded_samples == 480_000 * windows
    assert geometry.frames == 3000 * windows
    assert geometry.tokens == 375 * windows == mistral_tokens(geometry.padded_samples)


@pytest.mark.parametrize("padded", [0, 1, 159, 160, 161, 1279, 1280, 1281, 12_345, 480_000])
def test_audio_tokens_is_the_encoder_rule_for_any_length(padded):
    assert audio_tokens(padded) == mistral_tokens(padded)


def test_mistral_commons_own_count():
    audio = pytest.importorskip("mistral_common.tokens.tokenizers.audio")
    config = audio.AudioConfig(
        sampling_rate=16_000,
        frame_rate=12.5,
        encoding_config=audio.AudioSpectrogramConfig(
            num_mel_bins=128, hop_length=160, window_size=400
        ),
        chunk_length_s=30.0,
    )
    for samples in EDGES:
        geometry = voxtral_geometry(samples)
        assert config.num_audio_tokens(geometry.padded_samples) == geometry.tokens


def test_the_model_folds_each_window_into_375_positions():
    """The encoder's stride-2 conv (3000 → 1500) and the projector's fold of
    ``intermediate_size / hidden_size`` = 4 positions, from the example ``config.json``."""
    import json

    from voxtral_tokenizer import MODEL_DIR

    audio = json.loads((MODEL_DIR / "config.json").read_text())["audio_config"]
    positions = audio["max_source_positions"]
    fold = audio["intermediate_size"] // audio["hidden_size"]
    assert positions * 2 == 3000
    assert positions // fold == voxtral_geometry(1).tokens == 375


def test_plans_match_the_geometry_and_refuse_outside_the_policy(host, policy):
    for samples in EDGES:
        plan = host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)
        geometry = voxtral_geometry(samples)
        assert (plan.frames, plan.tokens) == (geometry.frames, geometry.tokens)
        assert plan.feature_shape == (geometry.windows, 128, 3000)
        assert plan.frames == policy.estimate_frames(samples)
    with pytest.raises(FeatureError, match="too short"):
        host.plan_features(policy, rate_hz=16_000, samples=0, clip_index=0)
    with pytest.raises(FeatureError, match="16000 Hz"):
        host.plan_features(policy, rate_hz=8_000, samples=8_000, clip_index=0)
    most = policy.max_samples_per_clip
    assert host.plan_features(policy, rate_hz=16_000, samples=most, clip_index=0).tokens == 22_500
    with pytest.raises(LimitError):
        host.plan_features(policy, rate_hz=16_000, samples=most + 1, clip_index=0)
