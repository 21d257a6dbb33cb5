"""Policy, schema, resample and feature plans: pinned values and every refusal."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
import soxr

import audiogate_qwen2audio.plugin as qwen_plugin
from audiogate.cancel import NEVER
from audiogate.errors import DecodeError, FeatureError, LimitError, PolicyError
from audiogate.host import create_host
from audiogate.pipeline import EncodedClip, preflight
from audiogate.policy import build_schema, load_packaged_schema
from audiogate.testing.audio import wav_bytes
from audiogate_qwen2audio.policy import POLICY_KEYS, ROW_BYTES

#: Qwen/Qwen2-Audio-7B-Instruct preprocessor_config.json (examples/models/README.md).
PREPROCESSOR = {
    "chunk_length": 30,
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 128,
    "hop_length": 160,
    "n_fft": 400,
    "n_samples": 480000,
    "nb_max_frames": 3000,
    "padding_side": "right",
    "padding_value": 0.0,
    "processor_class": "Qwen2AudioProcessor",
    "return_attention_mask": True,
    "sampling_rate": 16000,
}
CONFIG = {
    "audio_token_index": 151646,
    "audio_config": {
        "model_type": "qwen2_audio_encoder",
        "num_mel_bins": 128,
        "max_source_positions": 1500,
        "d_model": 1280,
    },
    "text_config": {"model_type": "qwen2", "vocab_size": 156032},
}


def test_pinned_policy_is_the_serving_guides(policy):
    # Rates and channels are librosa.load's (the strict profile narrows them).
    assert policy.allowed_source_rates_hz is None
    assert (policy.min_source_rate_hz, policy.max_source_rate_hz) == (8_000, 192_000)
    assert policy.max_source_channels == 8
    assert policy.options["strict_source_rates"] is False
    assert policy.refuse_all_zero is True
    assert policy.min_samples_per_clip == 321
    assert policy.max_duration_seconds == 30
    assert policy.max_samples_per_clip == 480_000
    assert policy.max_frames_per_clip == 3000
    assert policy.overflow == "reject"
    assert policy.options["audio_token_index"] == 151_646
    assert policy.options["max_rows_per_clip"] == 750
    assert policy.options["row_bytes"] == 16_384
    assert policy.estimate_frames(16_000) == 100  # ceil(N / 160), as the mask counts


def test_packaged_schema_is_fresh():
    assert load_packaged_schema("audiogate_qwen2audio") == build_schema("qwen2audio", POLICY_KEYS)


def test_the_real_checkpoint_configs_load(qwen_host, model_dir):
    policy = qwen_host.load_model_policy(
        model_dir("qwen2audio", config=CONFIG, preprocessor=PREPROCESSOR)
    )
    assert policy.family == "qwen2audio"
    assert policy.options["audio_token_index"] == 151_646
    assert policy.source_of("options.nb_max_frames").key == "/nb_max_frames"


@pytest.mark.parametrize(
    ("file", "key", "value"),
    [
        ("preprocessor", "n_fft", 512),
        ("preprocessor", "feature_size", 80),
        ("preprocessor", "nb_max_frames", 1500),
        ("preprocessor", "sampling_rate", 24000),
        ("preprocessor", "padding_side", "left"),  # the model reads right-padded masks
        ("config", "audio_config", {"num_mel_bins": 80}),
        ("config", "audio_config", {"max_source_positions": 750}),
    ],
)
def test_a_frontend_we_cannot_reproduce_fails_start_up(qwen_host, model_dir, file, key, value):
    config, preprocessor = dict(CONFIG), dict(PREPROCESSOR)
    (preprocessor if file == "preprocessor" else config)[key] = value
    with pytest.raises(PolicyError):
        qwen_host.load_model_policy(
            model_dir("qwen2audio", config=config, preprocessor=preprocessor)
        )


def test_the_plugin_registers_the_stages_of_its_package_and_nothing_else(qwen_host):
    # The host calls them only for a qwen2audio policy, so none checks policy.family.
    assert qwen_plugin.__all__ == ["audiogate_register_families"]
    assert set(qwen_host.implementations("qwen2audio")) == {
        "audiogate_register_families",
        "audiogate_plan_resample",
        "audiogate_resample",
        "audiogate_plan_features",
        "audiogate_extract_features",
        "audiogate_collate_features",
        "audiogate_expand_prompt",
        "audiogate_open_feature_stream",
    }


# --- resampling ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "samples", "out"),
    [
        (16_000, 16_000, 16_000),
        (44_100, 44_100, 16_000),
        (44_100, 100, 37),  # soxr gives 36; librosa.load pads to ceil(100·160/441) = 37
        (48_000, 1_440_000, 480_000),
        (48_000, 1_000, 334),
    ],
)
def test_resample_plans_use_librosa_lengths(qwen_host, policy, rate, samples, out):
    plan = qwen_host.plan_resample(
        policy, source_rate_hz=rate, source_samples=samples, clip_index=0
    )
    assert plan.output_rate_hz == 16_000
    assert plan.output_samples == out
    assert plan.algorithm == ("identity" if rate == 16_000 else "soxr_hq")


@pytest.mark.parametrize("rate", [8_000, 11_025, 22_050, 24_000, 32_000, 44_101, 96_000])
def test_the_strict_profile_refuses_rates_outside_the_guides_three(qwen_host, strict_policy, rate):
    with pytest.raises(DecodeError) as caught:
        qwen_host.plan_resample(
            strict_policy, source_rate_hz=rate, source_samples=1000, clip_index=2
        )
    assert caught.value.code == "rate_not_allowed"
    assert caught.value.clip_index == 2
    assert f"{rate} Hz" in str(caught.value)
    assert "16000, 44100, 48000" in str(caught.value)


@pytest.mark.parametrize("rate", [8_000, 11_025, 22_050, 96_000, 192_000])
def test_any_rate_plans_with_soxr_by_default(qwen_host, policy, rate):
    plan = qwen_host.plan_resample(policy, source_rate_hz=rate, source_samples=1000, clip_index=0)
    assert plan.algorithm == "soxr_hq"


def test_the_strict_profile_is_a_checkpoint_key(qwen_host, model_dir):
    from audiogate.policy import LIMIT_NAMESPACES

    strict = qwen_host.load_model_policy(
        model_dir(
            "qwen2audio",
            config={
                "model_type": "qwen2_audio",
                LIMIT_NAMESPACES[0]: {"strict_source_rates": True, "max_source_channels": 2},
            },
        )
    )
    assert strict.options["strict_source_rates"] is True
    assert strict.max_source_channels == 2
    with pytest.raises(DecodeError, match="allowed rates: 16000, 44100, 48000 Hz"):
        qwen_host.plan_resample(strict, source_rate_hz=22_050, source_samples=10, clip_index=0)


def test_a_checkpoint_may_narrow_the_rates(qwen_host, policy):
    narrowed = attrs.evolve(policy, allowed_source_rates_hz=(16_000, 48_000))
    with pytest.raises(DecodeError, match="allowed rates: 16000, 48000 Hz"):
        qwen_host.plan_resample(narrowed, source_rate_hz=44_100, source_samples=10, clip_index=0)


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_resampling_equals_librosa_load(qwen_host, policy, rate):
    rng = np.random.default_rng(rate)
    x = (0.3 * rng.standard_normal(rate + 123)).astype(np.float32)
    x.flags.writeable = False
    plan = qwen_host.plan_resample(policy, source_rate_hz=rate, source_samples=x.size, clip_index=0)
    got = qwen_host.resample(policy, plan, x, clip_index=0, cancel=NEVER)
    want = soxr.resample(x, rate, 16_000, "soxr_hq")
    want = np.pad(want, (0, plan.output_samples - want.size))
    np.testing.assert_array_equal(got, want)
    assert not got.flags.writeable


def test_the_identity_passes_a_read_only_waveform_through(qwen_host, policy):
    x = np.linspace(-0.5, 0.5, 1000, dtype=np.float32)
    plan = qwen_host.plan_resample(policy, source_rate_hz=16_000, source_samples=1000, clip_index=0)
    got = qwen_host.resample(policy, plan, x, clip_index=0, cancel=NEVER)
    np.testing.assert_array_equal(got, x)
    assert not got.flags.writeable
    assert x.flags.writeable


# --- feature plans -------------------------------------------------------------------


@pytest.mark.parametrize("samples", [0, 1, 2, 160, 319, 320])
def test_320_samples_or_fewer_are_too_short(qwen_host, policy, samples):
    with pytest.raises(FeatureError) as caught:
        qwen_host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=1)
    message = str(caught.value)
    assert f"{samples} normalized samples" in message
    assert "more than 320" in message
    assert caught.value.clip_index == 1


def test_more_than_30_seconds_is_refused_not_truncated(qwen_host, policy):
    with pytest.raises(LimitError) as caught:
        qwen_host.plan_features(policy, rate_hz=16_000, samples=480_001, clip_index=0)
    assert caught.value.limit == "duration samples"
    assert (caught.value.actual, caught.value.maximum) == (480_001, 480_000)


def test_only_16_khz_reaches_the_frontend(qwen_host, policy):
    with pytest.raises(FeatureError, match="16000 Hz input, not 44100 Hz"):
        qwen_host.plan_features(policy, rate_hz=44_100, samples=16_000, clip_index=0)


@pytest.mark.parametrize(("samples", "tokens"), [(321, 1), (16_000, 25), (480_000, 750)])
def test_feature_plan_counts_and_bytes(qwen_host, policy, samples, tokens):
    plan = qwen_host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)
    assert plan.tokens == tokens
    assert plan.frames == -(-samples // 160)
    assert plan.feature_shape == (128, 3000)
    assert plan.feature_bytes == 128 * 3000 * 4 + 3000 + tokens * ROW_BYTES
    assert plan.detail["rows"] == tokens
    assert 0 < plan.working_bytes < 8 << 20


def test_sixteen_maximal_clips_fit_the_prepared_result_budget(qwen_host, policy):
    clip = wav_bytes(np.full(480_000, 0.25), rate_hz=16_000)
    clips = [EncodedClip(data=clip, ordinal=i + 1) for i in range(16)]
    plan = preflight(qwen_host, policy, clips)
    # 16 × (features + mask + 750 rows) + the collated copy the preflight adds.
    assert plan.prepared_result_bytes == 16 * (1_536_000 + 3000 + 750 * 16_384) + 16 * 1_539_000
    assert plan.prepared_result_bytes <= policy.max_prepared_result_bytes_per_request
    assert sum(c.features.tokens for c in plan.clips) == 12_000


@pytest.mark.install
@pytest.mark.install
def test_the_installed_entry_point_registers_the_family():
    host = create_host(load_entry_points=True)
    family = host.family("qwen2audio")
    assert family.distribution == "audiogate-qwen2audio"
    assert host.family_for_model_type("qwen2_audio").spec.name == "qwen2audio"
    assert set(host.implementations("qwen2audio")) >= {
        "audiogate_register_families",
        "audiogate_plan_resample",
        "audiogate_resample",
        "audiogate_plan_features",
        "audiogate_extract_features",
        "audiogate_collate_features",
        "audiogate_expand_prompt",
        "audiogate_open_feature_stream",
    }
