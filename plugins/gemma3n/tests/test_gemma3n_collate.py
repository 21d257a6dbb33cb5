"""Gemma 3n batch view: padding rows, tail frames, masks, and what collate refuses."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from gemma3n_helpers import mix, noise

from audiogate.cancel import NEVER
from audiogate.errors import PluginError
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, readonly
from audiogate_gemma3n.geometry import feature_frames
from audiogate_gemma3n.logmel import floor_value


def extract(host: FamilyHost, policy: AudioPolicy, clips: list[np.ndarray]):
    out = []
    for index, x in enumerate(clips):
        plan = host.plan_features(policy, rate_hz=16_000, samples=len(x), clip_index=index)
        out.append(
            host.extract_features(
                policy, plan, readonly(x), rate_hz=16_000, clip_index=index, cancel=NEVER
            )
        )
    return out


def test_right_padding_rows_tail_and_mask(host, policy):
    long, short = extract(host, policy, [mix(16_000), noise(8_000)])
    batch = host.collate_features(policy, [long, short])
    features = batch.inputs["input_features"]
    mask = batch.inputs["input_features_mask"]
    assert features.shape == (2, 97, 128)
    assert mask.shape == (2, 97)
    assert batch.tokens == (188, 188)
    assert feature_frames(8_000) == short.frames == 48
    np.testing.assert_array_equal(features[0], long.features)
    np.testing.assert_array_equal(features[1, :48], short.features)
    # Frames 48 and 49 start on real audio (160 * 49 < 8000) and reach into the padding.
    np.testing.assert_array_equal(features[1, 48:50], short.tail)
    assert (features[1, 50:] == floor_value()).all()
    assert mask[0].all()
    assert mask[1].tolist() == [True] * 50 + [False] * 47


def test_one_clip_batch_is_the_clip(host, policy):
    (clip,) = extract(host, policy, [mix(16_000)])
    batch = host.collate_features(policy, [clip])
    np.testing.assert_array_equal(batch.inputs["input_features"][0], clip.features)
    assert batch.inputs["input_features_mask"].all()


def test_plain_clip_features_are_padded_on_the_right(host, policy):
    plain = ClipFeatures(
        features=readonly(np.zeros((3, 128), np.float32)),
        mask=readonly(np.array([True, True, False])),
        frames=3,
        tokens=188,
    )
    (clip,) = extract(host, policy, [mix(1_000)])
    batch = host.collate_features(policy, [clip, plain])
    assert batch.inputs["input_features"].shape == (2, 4, 128)
    assert batch.inputs["input_features_mask"][1].tolist() == [True, True, False, False]


def test_left_padding_needs_our_features_and_the_same_side(host, policy, left_policy):
    plain = ClipFeatures(features=np.zeros((3, 128), np.float32), frames=3, tokens=188)
    with pytest.raises(PluginError, match="left padding needs the clip's waveform"):
        host.collate_features(left_policy, [plain])
    right = extract(host, policy, [mix(16_000)])
    with pytest.raises(PluginError, match=r"extracted with right padding.*pads on the left"):
        host.collate_features(left_policy, right)
    (left,) = extract(host, left_policy, [mix(8_000)])
    (longer,) = extract(host, left_policy, [mix(16_000)])
    stripped = attrs.evolve(left, waveform=None)
    with pytest.raises(PluginError, match="carry none"):
        host.collate_features(left_policy, [longer, stripped])


def test_malformed_features_are_a_plugin_error(host, policy):
    bad = ClipFeatures(features=np.zeros((3, 80), np.float32), frames=3, tokens=188)
    with pytest.raises(PluginError, match=r"clip 1 has features float32\[3, 80\]"):
        host.collate_features(policy, [bad])
