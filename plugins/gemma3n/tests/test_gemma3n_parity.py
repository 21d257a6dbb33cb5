"""Parity with ``Gemma3nAudioFeatureExtractor`` (transformers 5.24.0): bank, clips, batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gemma3n_helpers import mix, noise, sweep

from audiogate.cancel import NEVER
from audiogate.errors import FeatureError
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy
from audiogate.records import readonly
from audiogate_gemma3n.logmel import HANN_WINDOW
from audiogate_gemma3n.melbank import htk_mel_filter_bank

pytest.importorskip("transformers")

from transformers import Gemma3nAudioFeatureExtractor
from transformers.models.gemma3n.feature_extraction_gemma3n import create_fb_matrix

TOLERANCE = 5e-6
SIGNALS = {"mix": mix, "noise": noise, "sweep": sweep}


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return {
        "right": Gemma3nAudioFeatureExtractor(),
        "left": Gemma3nAudioFeatureExtractor(padding_side="left"),
    }


def ours(host: FamilyHost, policy: AudioPolicy, clips: list[np.ndarray]):
    extracted = []
    for index, x in enumerate(clips):
        plan = host.plan_features(policy, rate_hz=16_000, samples=len(x), clip_index=index)
        extracted.append(
            host.extract_features(
                policy, plan, readonly(x), rate_hz=16_000, clip_index=index, cancel=NEVER
            )
        )
    return extracted, host.collate_features(policy, extracted)


def test_mel_bank_and_window_equal_the_references(reference):
    bank = htk_mel_filter_bank()
    assert bank.dtype == np.float64
    np.testing.assert_array_equal(bank, create_fb_matrix(513, 125.0, 7600.0, 128, 16_000, 1024))
    np.testing.assert_array_equal(bank, reference["right"].mel_filters)
    np.testing.assert_array_equal(HANN_WINDOW, reference["right"].window)
    assert HANN_WINDOW.dtype == reference["right"].window.dtype == np.float32


@pytest.mark.parametrize("samples", [160, 480, 512])
def test_the_reference_gives_no_frames_where_we_refuse(host, policy, reference, samples):
    # 0.01 s, 0.03 s and 512 samples: the FE admits them with T = 0; we refuse them.
    out = reference["right"](mix(samples), return_tensors="np")
    assert out["input_features"].shape == (1, 0, 128)
    with pytest.raises(FeatureError, match="0 feature frames"):
        host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)


@pytest.mark.parametrize("signal", sorted(SIGNALS))
@pytest.mark.parametrize("samples", [513, 640, 800, 16_000, 116_800, 480_000])
def test_single_clip_features_and_mask(host, policy, reference, signal, samples):
    x = SIGNALS[signal](samples)
    expected = reference["right"](x, return_tensors="np")
    (clip,), batch = ours(host, policy, [x])
    assert clip.features.shape == expected["input_features"].shape[1:]
    np.testing.assert_allclose(clip.features, expected["input_features"][0], atol=TOLERANCE, rtol=0)
    np.testing.assert_array_equal(clip.mask, expected["input_features_mask"][0])
    np.testing.assert_array_equal(batch.inputs["input_features"], clip.features[None])
    np.testing.assert_array_equal(
        batch.inputs["input_features_mask"], expected["input_features_mask"]
    )


def test_a_clip_past_30_seconds_equals_the_reference_after_its_cut(host, policy, reference):
    # Truncate mode keeps the first 480,000 samples: exactly what the FE keeps.
    x = mix(500_000)
    expected = reference["right"](x, return_tensors="np")
    (clip,), _ = ours(host, policy, [x[:480_000]])
    np.testing.assert_allclose(clip.features, expected["input_features"][0], atol=TOLERANCE, rtol=0)


BATCHES = [
    [16_000, 8_000],
    [8_000, 16_000],
    [116_800, 16_000, 513],
    [480_000, 7_000, 123_457],
    [640, 513],
    [16_000, 16_128, 16_000 + 640],
]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("lengths", BATCHES, ids=lambda v: "-".join(map(str, v)))
def test_batches_equal_the_reference_batch(host, policy, left_policy, reference, side, lengths):
    clips = [mix(n, seed=i) if i % 2 == 0 else noise(n, seed=i) for i, n in enumerate(lengths)]
    expected = reference[side](clips, return_tensors="np")
    chosen = policy if side == "right" else left_policy
    _, batch = ours(host, chosen, clips)
    features = batch.inputs["input_features"]
    mask = batch.inputs["input_features_mask"]
    assert features.shape == expected["input_features"].shape
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, expected["input_features_mask"])
    np.testing.assert_allclose(features, expected["input_features"], atol=TOLERANCE, rtol=0)
    assert batch.tokens == (188,) * len(clips)
    assert not features.flags.writeable
    assert not mask.flags.writeable


def test_mlxcel_golden_left_padded_batch_mask(host, left_policy, reference):
    # mlxcel's golden (src/audio/gemma3n/feature_extractor.rs tests): 16,000 and 8,000
    # samples give 97 frames; clip 2's first 50 are padding.
    _, batch = ours(host, left_policy, [mix(16_000), mix(8_000, seed=3)])
    mask = batch.inputs["input_features_mask"]
    assert mask.shape == (2, 97)
    assert mask[0].all()
    assert not mask[1, :50].any()
    assert mask[1, 50:].all()
