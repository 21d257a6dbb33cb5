"""Gemma 3n pinned policy, recognized keys, schema freshness and hook wiring."""

from __future__ import annotations

import pytest

from audiogate.errors import PolicyError
from audiogate.host import FamilyHost, create_host
from audiogate.policy import (
    AudioPolicy,
    CheckpointConfigs,
    apply_keys,
    build_schema,
    load_packaged_schema,
)
from audiogate_gemma3n import policy as gemma_policy
from audiogate_gemma3n.geometry import MIN_SAMPLES, feature_frames


def _parse(host: FamilyHost, model: dict[str, object], processor: dict[str, object] | None = None):
    return host.parse_policy(
        "gemma3n",
        CheckpointConfigs(
            model={"model_type": "gemma3n", **model},
            processor=processor,
            processor_file="preprocessor_config.json" if processor is not None else None,
        ),
    )


def test_pinned_defaults_are_mlxcels(policy: AudioPolicy):
    assert policy.family == "gemma3n"
    assert policy.revision == "181beb3ba4c47098ed8cbc97ee250d1d45ae0107"
    assert policy.target_rate_hz == 16_000
    assert policy.resampling == "linear"
    assert policy.max_duration_seconds == 30
    assert policy.max_samples_per_clip == 480_000
    assert policy.max_frames_per_clip == policy.max_frames_per_request == 2_997
    assert policy.max_source_rate_hz == 192_000
    assert policy.max_encoded_bytes_per_clip == policy.max_encoded_bytes_per_request == 64 << 20
    assert policy.max_waveform_result_bytes_per_request == 2 << 20
    assert policy.max_waveform_working_bytes_per_request == 32 << 20
    assert policy.max_prepared_result_bytes_per_request == 64 << 20
    assert policy.max_clips == 16
    assert policy.soft_tokens_per_clip == 188
    assert policy.overflow == "reject"
    assert policy.min_samples_per_clip == MIN_SAMPLES == 513
    assert dict(policy.options) == {
        "boa_token_id": 256_000,
        "eoa_token_id": 262_272,
        "audio_token_id": 262_273,
        "padding_side": "right",
    }


def test_core_frame_estimate_agrees_with_the_frontend(policy: AudioPolicy):
    for n in [*range(0, 2_000), *range(479_000, 480_001, 7)]:
        assert policy.estimate_frames(n) == feature_frames(n), n


def test_truncate_is_opt_in_and_the_overflow_enum_is_closed(host: FamilyHost):
    spec = gemma_policy.spec()

    def apply(value: object) -> AudioPolicy:
        configs = CheckpointConfigs(
            model={"model_type": "gemma3n", "audiogate_audio_limits": {"overflow": value}}
        )
        return apply_keys(spec.defaults, spec.keys, spec.schema, configs)

    assert gemma_policy.PINNED.overflow == "reject"
    assert apply("truncate").overflow == "truncate"
    assert apply("reject").overflow == "reject"
    for wrong in ("clip", "TRUNCATE", 1, None):
        with pytest.raises(PolicyError, match=r"overflow.*must be one of 'reject', 'truncate'"):
            apply(wrong)
    # The same through the host's policy hook.
    truncating = _parse(host, {"audiogate_audio_limits": {"overflow": "truncate"}})
    assert truncating.overflow == "truncate"


def test_config_overrides_token_ids_and_processor_sets_padding_side(host: FamilyHost):
    policy = _parse(
        host,
        {"boa_token_id": 300_000, "audio_token_id": 300_002, "eoa_token_id": 300_001},
        processor={"padding_side": "left", "audio_seq_length": 188},
    )
    assert policy.options["boa_token_id"] == 300_000
    assert policy.options["audio_token_id"] == 300_002
    assert policy.options["eoa_token_id"] == 300_001
    assert policy.options["padding_side"] == "left"
    assert policy.source_of("options.padding_side").key == "/padding_side"


@pytest.mark.parametrize(
    ("model", "processor", "match"),
    [
        ({}, {"padding_side": "center"}, "padding_side"),
        ({"audio_soft_tokens_per_image": 187}, None, "must be exactly 188"),
        ({}, {"audio_seq_length": 256}, "must be exactly 188"),
        ({}, {"sampling_rate": 24_000}, "must be exactly 16000"),
        ({}, {"feature_extractor": {"frame_length": 400}}, "must be exactly 512"),
        ({}, {"max_audio_duration": 31}, "from 1 to 30"),
    ],
)
def test_frontend_drift_fails_start_up(host: FamilyHost, model, processor, match):
    with pytest.raises(PolicyError, match=match):
        _parse(host, model, processor)


def test_max_length_lowers_the_caps(host: FamilyHost):
    policy = _parse(host, {}, {"feature_extractor": {"max_length": 160_000}})
    assert policy.max_samples_per_clip == 160_000
    assert policy.max_duration_seconds == 10
    assert policy.max_frames_per_clip == feature_frames(160_000) == 997


def test_schema_is_fresh():
    built = build_schema("gemma3n", gemma_policy.POLICY_KEYS)
    assert built == load_packaged_schema("audiogate_gemma3n")


def test_the_plugin_registers_the_stages_of_its_package_and_nothing_else(host: FamilyHost):
    # The host calls them only for a gemma3n policy, so none checks policy.family.
    from audiogate_gemma3n import plugin

    assert plugin.__all__ == ["audiogate_register_families"]
    assert set(host.implementations("gemma3n")) == {
        "audiogate_register_families",
        "audiogate_plan_resample",
        "audiogate_resample",
        "audiogate_plan_features",
        "audiogate_extract_features",
        "audiogate_collate_features",
        "audiogate_expand_prompt",
        "audiogate_open_feature_stream",
    }


@pytest.mark.install
def test_the_entry_point_registers_the_family():
    host = create_host(load_entry_points=True)
    family = host.family("gemma3n")
    assert family.distribution == "audiogate-gemma3n"
    assert family.spec.model_types == ("gemma3n",)
    assert set(host.implementations("gemma3n")) >= {
        "audiogate_register_families",
        "audiogate_plan_resample",
        "audiogate_resample",
        "audiogate_plan_features",
        "audiogate_extract_features",
        "audiogate_collate_features",
        "audiogate_expand_prompt",
    }


def attrs_evolve(policy: AudioPolicy, **changes: object) -> AudioPolicy:
    import attrs

    return attrs.evolve(policy, **changes)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hop_length", 320),
        ("frame_length", 400),
        ("feature_size", 80),
        ("fft_length", 512),
        ("feature_extractor_type", "WhisperFeatureExtractor"),
    ],
)
def test_a_flat_frontend_declaration_other_than_ours_is_refused(host: FamilyHost, key, value):
    # Gemma3nAudioFeatureExtractor saves its settings flat in preprocessor_config.json:
    # a checkpoint whose frontend differs must not load with ours.
    import json
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[3] / "examples/models/gemma-3n-e4b-it"
    document = json.loads((shipped / "preprocessor_config.json").read_text())
    _parse(host, {}, document)  # the shipped values are ours
    with pytest.raises(PolicyError, match=f"preprocessor_config.json at /{key}"):
        _parse(host, {}, {**document, key: value})
