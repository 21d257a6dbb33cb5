"""Gemma 3n feature plan and extractor: frame arithmetic, refusals, shapes, masks, cancel."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from gemma3n_helpers import CancelAfter, mix, noise

from audiogate.cancel import NEVER, Checkpoint
from audiogate.errors import (
    FeatureError,
    LimitError,
    NonFiniteSampleError,
    PluginError,
    PreprocessCancelled,
)
from audiogate.host import FamilyHost
from audiogate.pipeline import EncodedClip, preflight, prepare_clips
from audiogate.policy import AudioPolicy
from audiogate.records import readonly
from audiogate.testing.audio import wav_bytes
from audiogate_gemma3n.features import Gemma3nClipFeatures, extract_features, plan_features
from audiogate_gemma3n.geometry import (
    MIN_SAMPLES,
    encoder_tokens,
    feature_frames,
    valid_frames_in_padded_batch,
)
from audiogate_gemma3n.logmel import FRAMES_PER_BLOCK, floor_value


@pytest.mark.parametrize(
    ("samples", "frames"),
    [(0, 0), (1, 0), (128, 0), (512, 0), (513, 1), (640, 1), (672, 2), (800, 3),
     (16_000, 97), (116_800, 728), (480_000, 2_997)],
)  # fmt: skip
def test_frame_count_pads_to_128_then_frames_513_by_160(samples, frames):
    assert feature_frames(samples) == frames
    padded = -(-samples // 128) * 128
    assert frames == (0 if padded < 513 else (padded - 513) // 160 + 1)


@pytest.mark.parametrize(
    ("frames", "tokens"), [(1, 1), (8, 1), (16, 1), (17, 2), (97, 7), (728, 46), (2_997, 188)]
)
def test_encoder_tokens(frames, tokens):
    assert encoder_tokens(frames) == tokens


def test_two_to_four_frames_past_the_clip_are_valid_in_a_batch():
    extra = {valid_frames_in_padded_batch(n) - feature_frames(n) for n in range(513, 20_000)}
    assert extra == {2, 3, 4}
    assert valid_frames_in_padded_batch(16_000) - feature_frames(16_000) == 3


def test_plan_of_a_30_second_clip(host: FamilyHost, policy: AudioPolicy):
    plan = host.plan_features(policy, rate_hz=16_000, samples=480_000, clip_index=0)
    assert plan.frames == 2_997
    assert plan.tokens == 188
    assert plan.feature_shape == (2_997, 128)
    assert dict(plan.detail) == {"encoder_tokens": 188}
    tail = valid_frames_in_padded_batch(480_000) - 2_997
    assert plan.feature_bytes == (2_997 + tail) * 128 * 4 + 2_997
    assert 0 < plan.working_bytes < 16 << 20  # fixed block scratch + T x 478 magnitudes


def test_plan_of_one_second_reports_the_real_encoder_tokens(policy: AudioPolicy):
    plan = plan_features(policy, rate_hz=16_000, samples=16_000, clip_index=0)
    assert (plan.frames, plan.tokens, plan.detail["encoder_tokens"]) == (97, 188, 7)


def test_clips_of_at_most_512_samples_are_refused(host: FamilyHost, policy: AudioPolicy):
    # The reference gives them zero frames; we refuse them with the minimum named.
    for samples in (0, 1, 160, 480, 512):
        with pytest.raises(FeatureError, match=r"clip 4.*0 feature frames.*at least 513") as e:
            host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=3)
        assert e.value.clip_index == 3
    plan = host.plan_features(policy, rate_hz=16_000, samples=MIN_SAMPLES, clip_index=0)
    assert plan.frames == 1


def test_plan_refuses_other_rates_and_over_long_clips(policy: AudioPolicy):
    with pytest.raises(FeatureError, match=r"16000 Hz.*got 22050"):
        plan_features(policy, rate_hz=22_050, samples=16_000, clip_index=0)
    with pytest.raises(LimitError, match=r"clip 2.*480001.*480000"):
        plan_features(policy, rate_hz=16_000, samples=480_001, clip_index=1)


def test_truncate_mode_plans_the_cut_length(policy: AudioPolicy):
    truncating = attrs.evolve(policy, overflow="truncate")
    plan = plan_features(truncating, rate_hz=16_000, samples=480_000, clip_index=0)
    assert plan.frames == 2_997


@pytest.mark.parametrize("rate_hz", [16_000, 8_000, 44_100])
def test_truncate_mode_cuts_a_long_clip_within_the_pinned_request_caps(
    host: FamilyHost, policy: AudioPolicy, rate_hz: int
):
    # The pinned request caps are 30 s of source: the cut clip counts as its 30 s kept.
    truncating = attrs.evolve(policy, overflow="truncate")
    source = noise(int(rate_hz * 31.5))
    request = [EncodedClip(data=wav_bytes(source, rate_hz=rate_hz, encoding="f32"), ordinal=1)]
    (clip,) = prepare_clips(host, truncating, request).clips
    assert clip.truncated
    assert clip.normalized_samples == 480_000
    assert clip.processed_duration_us == 30_000_000
    assert clip.received_duration_us == 31_500_000
    assert clip.frames == 2_997
    # The pinned reject mode refuses it at the header.
    with pytest.raises(LimitError, match="source duration per clip"):
        preflight(host, policy, request)


def _extract(policy: AudioPolicy, x: np.ndarray, **kwargs):
    plan = plan_features(policy, rate_hz=16_000, samples=len(x), clip_index=0)
    return plan, extract_features(
        policy, plan, readonly(x), rate_hz=16_000, clip_index=kwargs.pop("clip_index", 0), **kwargs
    )


def test_features_match_the_plan_through_the_host(host: FamilyHost, policy: AudioPolicy):
    x = readonly(mix(16_000))
    plan = host.plan_features(policy, rate_hz=16_000, samples=16_000, clip_index=0)
    clip = host.extract_features(policy, plan, x, rate_hz=16_000, clip_index=0, cancel=NEVER)
    assert isinstance(clip, Gemma3nClipFeatures)
    assert clip.features.shape == (97, 128)
    assert clip.features.dtype == np.float32
    assert not clip.features.flags.writeable
    assert clip.mask is not None
    assert clip.mask.dtype == np.bool_
    assert clip.mask.all()
    assert (clip.frames, clip.tokens, clip.samples) == (97, 188, 16_000)
    assert clip.tail.shape == (3, 128)
    assert clip.waveform is None
    assert np.isfinite(clip.features).all()


def test_silence_sits_exactly_on_the_log_floor(policy: AudioPolicy):
    _, clip = _extract(policy, np.zeros(4_000, np.float32))
    assert floor_value() == np.float32(-11.512925)
    assert (clip.features == floor_value()).all()


def test_blocks_do_not_change_values(policy: AudioPolicy):
    # Many blocks against one: frame t depends only on its own samples, bit for bit.
    x = noise(160 * (3 * FRAMES_PER_BLOCK) + 1_000)
    _, whole = _extract(policy, x)
    for start in (0, FRAMES_PER_BLOCK - 3, 2 * FRAMES_PER_BLOCK + 1):
        _, part = _extract(policy, x[160 * start : 160 * (start + 10) + 513])
        np.testing.assert_array_equal(part.features[:10], whole.features[start : start + 10])


def test_left_padding_masks_the_first_frame_of_an_unaligned_clip(left_policy: AudioPolicy):
    _, aligned = _extract(left_policy, mix(16_000))  # 16000 = 125 x 128: no padding
    assert aligned.mask is not None
    assert aligned.mask.all()
    _, shifted = _extract(left_policy, mix(16_100))  # 28 leading zeros
    assert shifted.mask is not None
    assert shifted.mask.tolist() == [False] + [True] * (shifted.frames - 1)
    assert shifted.tail.shape == (0, 128)
    assert shifted.waveform is not None


def test_non_finite_and_out_of_range_samples_are_refused(policy: AudioPolicy):
    x = mix(2_000)
    x[700] = np.nan
    with pytest.raises(NonFiniteSampleError, match=r"clip 3.*frame 700"):
        _extract(policy, x, clip_index=2)
    x = mix(2_000)
    x[5] = 1.01
    with pytest.raises(FeatureError, match=r"clip 1.*sample 5 is 1\.0099.*outside.*\[-1, 1\]"):
        _extract(policy, x)


def test_a_waveform_that_does_not_fit_the_plan_is_a_plugin_error(policy: AudioPolicy):
    plan = plan_features(policy, rate_hz=16_000, samples=16_000, clip_index=0)
    with pytest.raises(PluginError, match="16160 samples"):
        extract_features(policy, plan, mix(16_160), rate_hz=16_000, clip_index=0)


def test_cancellation_is_noticed_between_frame_blocks(policy: AudioPolicy):
    x = noise(480_000)
    token = CancelAfter(Checkpoint.FEATURE, 3)
    with pytest.raises(PreprocessCancelled) as caught:
        _extract(policy, x, cancel=token, clip_index=5)
    assert caught.value.checkpoint == "Feature"
    assert caught.value.clip_index == 5
    assert token.checks == 3  # before the end: 2,997 frames are 12 blocks
