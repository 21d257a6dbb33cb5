"""Collation pads each clip to the longest with its clamp floor, the value the batched
reference gives frames that hold only zero padding; malformed clips are refused."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from qwen3omni_helpers import TOLERANCE, make_signal

from audiogate.cancel import NEVER
from audiogate.errors import PluginError


def clips(host, policy, lengths):
    out = []
    for index, samples in enumerate(lengths):
        plan = host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=index)
        waveform = make_signal("am", samples=samples, seed=index)
        out.append(
            host.extract_features(
                policy, plan, waveform, rate_hz=16_000, clip_index=index, cancel=NEVER
            )
        )
    return out


def test_padding_is_the_clamp_floor_of_the_batched_reference(host, policy, processor):
    lengths = [8_000, 24_000]
    batch = host.collate_features(policy, clips(host, policy, lengths))
    features = batch.inputs["input_features"]
    mask = batch.inputs["feature_attention_mask"]
    assert features.shape == (2, 128, 150)
    assert mask.sum(-1).tolist() == [50, 150]
    assert batch.tokens == (7, 20)
    waveforms = [make_signal("am", samples=n, seed=i) for i, n in enumerate(lengths)]
    block = "<|audio_start|><|audio_pad|><|audio_end|>"
    reference = processor(text=block * 2, audio=waveforms, return_tensors="np")
    # Frames 52.. of the short clip see only the zero padding in the reference.
    assert np.abs(features[0, :, 52:] - reference["input_features"][0, :, 52:]).max() <= TOLERANCE
    assert np.unique(features[0, :, 50:]).size == 1


def test_malformed_clips_are_refused(host, policy):
    good = clips(host, policy, [1_600])[0]
    # The host wraps a stage's ValueError as a PluginError naming the family.
    with pytest.raises(PluginError, match="needs at least one clip"):
        host.collate_features(policy, [])
    for bad in (
        attrs.evolve(good, frames=good.frames + 1),
        attrs.evolve(good, mask=None),
        attrs.evolve(good, features=np.zeros((80, good.frames), dtype=np.float32)),
    ):
        with pytest.raises(PluginError, match="clip 1"):
            host.collate_features(policy, [bad])
