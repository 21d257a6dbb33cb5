"""Collation into the audio inputs of both Phi-4 MM models, and the hook wiring."""

from __future__ import annotations

import numpy as np
import pytest

from audiogate.cancel import NEVER
from audiogate.errors import PluginError
from audiogate.host import FamilyHost, create_host
from audiogate.records import ClipFeatures, FeaturePlan, readonly
from audiogate.testing.tiny_models import REMOTE_PHI4MM_FORWARD_PARAMETERS


def _clip(frames: int, tokens: int, fill: float) -> ClipFeatures:
    features = readonly(np.full((frames, 80), fill, dtype=np.float32))
    return ClipFeatures(features=features, frames=frames, tokens=tokens)


#: The features' name in each variant's model forward.
FEATURES = {"remote_code": "input_audio_embeds", "native": "audio_input_features"}


@pytest.mark.parametrize("variant", ["remote_code", "native"])
def test_clips_are_zero_padded_with_a_mask_and_sizes(host: FamilyHost, variant, request) -> None:
    policy = request.getfixturevalue("remote" if variant == "remote_code" else "native")
    assert policy.variant == variant
    batch = host.collate_features(policy, [_clip(9, 2, 1.0), _clip(20, 3, 2.0), _clip(1, 1, 3.0)])
    features = batch.inputs[FEATURES[variant]]
    mask = batch.inputs["audio_attention_mask"]
    sizes = batch.inputs["audio_embed_sizes"]
    assert set(batch.inputs) == {FEATURES[variant], "audio_embed_sizes", "audio_attention_mask"}
    assert features.shape == (3, 20, 80)
    assert features.dtype == np.float32
    assert mask.shape == (3, 20)
    assert mask.dtype == np.bool_
    assert sizes.dtype == np.int64
    assert sizes.tolist() == [2, 3, 1]
    assert batch.tokens == (2, 3, 1)
    assert mask.sum(axis=1).tolist() == [9, 20, 1]
    assert (features[0, :9] == 1.0).all()
    assert not features[0, 9:].any()
    assert (features[2, :1] == 3.0).all()
    assert not features[2, 1:].any()
    assert not any(a.flags.writeable for a in batch.inputs.values())


def test_a_single_native_clip_still_carries_its_mask(host: FamilyHost, native) -> None:
    batch = host.collate_features(native, [_clip(5, 1, 0.5)])
    assert batch.inputs["audio_attention_mask"].all()
    assert batch.inputs["audio_input_features"].shape == (1, 5, 80)


def test_a_single_remote_clip_has_no_mask_as_its_processor_returns(
    host: FamilyHost, remote
) -> None:
    batch = host.collate_features(remote, [_clip(5, 1, 0.5)])
    assert set(batch.inputs) == {"input_audio_embeds", "audio_embed_sizes"}
    assert batch.inputs["input_audio_embeds"].shape == (1, 5, 80)


def test_remote_inputs_are_names_the_remote_forward_takes(host: FamilyHost, remote) -> None:
    for clips in ([_clip(5, 1, 0.5)], [_clip(5, 1, 0.5), _clip(9, 2, 1.0)]):
        batch = host.collate_features(remote, clips)
        assert set(batch.inputs) <= REMOTE_PHI4MM_FORWARD_PARAMETERS


def test_the_plugin_registers_its_stages_and_nothing_else(host: FamilyHost) -> None:
    """The host calls phi4mm's stages only for a phi4mm policy: none checks policy.family."""
    from audiogate_phi4mm import plugin

    assert plugin.__all__ == ["audiogate_register_families"]
    assert "audiogate_parse_policy" in host.implementations("phi4mm")


def test_extraction_refuses_a_plan_for_another_length(host: FamilyHost, remote) -> None:
    wave = readonly(np.zeros(1_000, np.float32))
    wrong = FeaturePlan(frames=5, tokens=1, feature_shape=(5, 80), feature_bytes=1_600)
    # The plugin's ValueError reaches the caller typed, through the host.
    with pytest.raises(PluginError, match="the plan says 5"):
        host.extract_features(remote, wrong, wave, rate_hz=16_000, clip_index=0, cancel=NEVER)


@pytest.mark.install
def test_plugin_implements_every_stage_hook() -> None:
    installed = create_host(load_entry_points=True)
    assert set(installed.implementations("phi4mm")) == {
        "audiogate_register_families",
        "audiogate_parse_policy",
        "audiogate_plan_resample",
        "audiogate_resample",
        "audiogate_plan_features",
        "audiogate_extract_features",
        "audiogate_collate_features",
        "audiogate_expand_prompt",
        "audiogate_open_feature_stream",
    }
