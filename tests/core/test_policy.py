"""Checkpoint policy loading: pinned defaults, recognized keys, precedence, rejections."""

from __future__ import annotations

import json

import pytest
from shipped import shipped_families

from audiogate.errors import PolicyError
from audiogate.host import FamilyHost
from audiogate.policy import read_checkpoint_configs

MIB = 1 << 20
#: Every shipped family (families.toml): each reads its checkpoint the same way.
FAMILIES = tuple(family.name for family in shipped_families())

# The pinned defaults a checkpoint that declares nothing gets: mlxcel's phi4mm() and gemma3n()
# (src/audio/preprocessing_policy.rs), the Qwen2-Audio serving guide (docs/provenance.md).
PINNED_TABLES = {
    "phi4mm": {
        "revision": "93f923e1a7727d1c4f446756212d9d3e8fcc5d81",
        "target_rate_hz": 16_000,
        "min_source_rate_hz": 8_000,
        "max_source_rate_hz": 192_000,
        "resampling": "scipy_polyphase_integer",
        "max_duration_seconds": 1_800,
        "max_samples_per_clip": 28_800_000,
        "max_normalized_samples_per_request": 28_800_000,
        "max_frames_per_request": 179_998,
        "max_frames_per_clip": 179_998,
        "max_source_duration_us_per_request": 1_800_000_000,
        "max_encoded_bytes_per_clip": 256 * MIB,
        "max_encoded_bytes_per_request": 256 * MIB,
        "max_waveform_result_bytes_per_request": 128 * MIB,
        "max_waveform_working_bytes_per_request": 512 * MIB,
        "max_prepared_result_bytes_per_request": 256 * MIB,
        "max_clips": 16,
        "placeholder": "numbered_per_clip",
        "overflow": "reject",
    },
    "gemma3n": {
        "revision": "181beb3ba4c47098ed8cbc97ee250d1d45ae0107",
        "target_rate_hz": 16_000,
        "max_source_rate_hz": 192_000,
        "resampling": "linear",
        "max_duration_seconds": 30,
        "max_samples_per_clip": 480_000,
        "max_normalized_samples_per_request": 480_000,
        "max_frames_per_request": 2_997,
        "max_frames_per_clip": 2_997,
        "max_source_duration_us_per_request": 30_000_000,
        "max_encoded_bytes_per_clip": 64 * MIB,
        "max_encoded_bytes_per_request": 64 * MIB,
        "max_waveform_result_bytes_per_request": 2 * MIB,
        "max_waveform_working_bytes_per_request": 32 * MIB,
        "max_prepared_result_bytes_per_request": 64 * MIB,
        "max_clips": 16,
        "placeholder": "fixed_soft_tokens_per_clip",
        "soft_tokens_per_clip": 188,
        "overflow": "reject",
    },
    "qwen2audio": {
        "target_rate_hz": 16_000,
        # librosa.load's rates and channels; the serving guide's are the strict profile.
        "min_source_rate_hz": 8_000,
        "max_source_rate_hz": 192_000,
        "allowed_source_rates_hz": None,
        "max_source_channels": 8,
        "resampling": "soxr_hq",
        "max_duration_seconds": 30,
        "max_samples_per_clip": 480_000,
        "min_samples_per_clip": 321,
        "refuse_all_zero": True,
        "overflow": "reject",
    },
}


@pytest.mark.parametrize("family", sorted(PINNED_TABLES))
def test_pinned_defaults_match_the_family_contract(host: FamilyHost, family: str) -> None:
    policy = host.default_policy(family)
    for field, expected in PINNED_TABLES[family].items():
        assert getattr(policy, field) == expected, field


@pytest.mark.parametrize("family", FAMILIES)
def test_every_default_is_pinned_not_read(host: FamilyHost, family: str) -> None:
    policy = host.default_policy(family)
    assert not policy.from_checkpoint
    assert policy.source_of("max_clips").kind == "pinned"
    assert policy.source_of("max_samples_per_clip").kind == "pinned"


@pytest.mark.parametrize("family", FAMILIES)
def test_empty_configs_give_the_pinned_defaults(host: FamilyHost, model_dir, family: str) -> None:
    policy = host.load_model_policy(model_dir(family, preprocessor={}))
    assert policy == host.default_policy(family)
    assert policy.source_of("max_samples_per_clip").kind == "pinned"


@pytest.mark.parametrize("family", FAMILIES)
def test_max_length_override_sets_samples_and_derived_duration(
    host: FamilyHost, model_dir, family: str
) -> None:
    policy = host.load_model_policy(
        model_dir(family, preprocessor={"feature_extractor": {"max_length": 160_000}})
    )
    assert policy.max_samples_per_clip == 160_000
    assert policy.max_duration_seconds == 10
    source = policy.source_of("max_samples_per_clip")
    assert (source.kind, source.origin, source.key) == (
        "checkpoint",
        "preprocessor_config.json",
        "/feature_extractor/max_length",
    )
    assert policy.source_of("max_duration_seconds").kind == "derived"
    assert policy.max_frames_per_clip == policy.estimate_frames(160_000)


@pytest.mark.parametrize("family", FAMILIES)
def test_max_audio_duration_override_caps_samples(host: FamilyHost, model_dir, family: str) -> None:
    policy = host.load_model_policy(
        model_dir(family, preprocessor={"feature_extractor": {"max_audio_duration": 5}})
    )
    assert policy.max_samples_per_clip == 80_000
    assert policy.max_duration_seconds == 5


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("path", ["sampling_rate", "feature_extractor.sampling_rate"])
def test_sampling_rate_24000_is_refused(
    host: FamilyHost, model_dir, family: str, path: str
) -> None:
    document: dict[str, object] = {}
    if "." in path:
        document["feature_extractor"] = {"sampling_rate": 24_000}
    else:
        document["sampling_rate"] = 24_000
    with pytest.raises(PolicyError) as info:
        host.load_model_policy(model_dir(family, preprocessor=document))
    message = str(info.value)
    assert "preprocessor_config.json" in message
    assert "/" + path.replace(".", "/") in message
    assert "24000" in message
    assert "16000" in message


def test_sampling_rate_16000_is_accepted_and_recorded(host: FamilyHost, model_dir) -> None:
    policy = host.load_model_policy(model_dir("qwen2audio", preprocessor={"sampling_rate": 16_000}))
    assert policy.target_rate_hz == 16_000
    assert policy.source_of("target_rate_hz").key == "/sampling_rate"
    assert policy.from_checkpoint


BAD_VALUES = [
    ("string", {"feature_extractor": {"max_length": "160000"}}, "must be an integer"),
    ("negative", {"feature_extractor": {"max_length": -1}}, "must be an integer"),
    ("float", {"feature_extractor": {"max_length": 5.0}}, "must be an integer"),
    ("bool", {"feature_extractor": {"max_length": True}}, "must be an integer"),
    ("null", {"feature_extractor": {"max_length": None}}, "must be an integer"),
    ("zero", {"feature_extractor": {"max_length": 0}}, "from 1 to"),
    ("above pinned", {"feature_extractor": {"max_length": 10**9}}, "pinned maximum"),
    ("zero clips", {"audiogate_audio_limits": {"max_clips": 0}}, "from 1 to"),
    ("too many clips", {"audiogate_audio_limits": {"max_clips": 17}}, "pinned maximum"),
    ("mlxcel namespace", {"mlxcel_audio_limits": {"max_clips": 17}}, "pinned maximum"),
    ("channels", {"feature_extractor": {"channels": 2}}, "must be exactly 1"),
    ("dtype", {"feature_extractor": {"dtype": "float32"}}, "must be exactly 'f32'"),
    # A family's resampler is pinned ("must be exactly") or chosen ("must be one of").
    (
        "resampler",
        {"audiogate_audio_limits": {"resampling_algorithm": "sinc"}},
        "resampling_algorithm: must be",
    ),
    ("numeric resampler", {"mlxcel_audio_limits": {"resampling_algorithm": 3}}, "(got 3)"),
    ("duration above pinned", {"max_audio_duration": 100_000}, "pinned maximum"),
    ("namespace typo", {"audiogate_audio_limits": {"max_clip": 3}}, "not a recognized key"),
    ("namespace type", {"audiogate_audio_limits": [1, 2]}, "JSON object"),
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("case", "document", "rule"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_invalid_recognized_keys_fail_startup_naming_file_path_value_and_rule(
    host: FamilyHost, model_dir, family: str, case: str, document: dict, rule: str
) -> None:
    with pytest.raises(PolicyError) as info:
        host.load_model_policy(model_dir(family, preprocessor=document))
    error = info.value
    assert error.file == "preprocessor_config.json"
    assert error.json_path
    assert error.json_path.startswith("/")
    assert rule in str(error)
    assert "\n" not in str(error)


def test_bound_in_config_json_is_named_with_its_file(host: FamilyHost, model_dir) -> None:
    with pytest.raises(PolicyError) as info:
        host.load_model_policy(
            model_dir("gemma3n", config={"audiogate_audio_limits": {"max_clips": -3}})
        )
    assert info.value.file == "config.json"
    assert info.value.json_path == "/audiogate_audio_limits/max_clips"
    assert info.value.value == -3


def test_processor_file_shadows_config_json(host: FamilyHost, model_dir) -> None:
    policy = host.load_model_policy(
        model_dir(
            "phi4mm",
            config={"audiogate_audio_limits": {"max_clips": 2}},
            preprocessor={"audiogate_audio_limits": {"max_clips": 4}},
        )
    )
    assert policy.max_clips == 4
    assert policy.source_of("max_clips").origin == "preprocessor_config.json"


def test_lower_bounds_take_effect_and_seed_namespace_is_read(host: FamilyHost, model_dir) -> None:
    policy = host.load_model_policy(
        model_dir(
            "gemma3n",
            config={
                "mlxcel_audio_limits": {
                    "max_encoded_bytes_per_request": 1024,
                    "max_source_duration_micros_per_request": 5_000_000,
                    "maximum_source_sample_rate": 48_000,
                },
                "audiogate_audio_limits": {"max_clips": 3, "overflow": "truncate"},
            },
        )
    )
    assert policy.max_encoded_bytes_per_request == 1024
    assert policy.max_source_duration_us_per_request == 5_000_000
    assert policy.max_source_rate_hz == 48_000
    assert policy.max_clips == 3
    assert policy.overflow == "truncate"
    assert (
        policy.source_of("max_source_rate_hz").key
        == "/mlxcel_audio_limits/maximum_source_sample_rate"
    )


def test_our_namespace_takes_precedence_over_mlxcels(host: FamilyHost, model_dir) -> None:
    policy = host.load_model_policy(
        model_dir(
            "gemma3n",
            config={
                "mlxcel_audio_limits": {"max_clips": 2},
                "audiogate_audio_limits": {"max_clips": 5},
            },
        )
    )
    assert policy.max_clips == 5


#: Gemma 3n's processor truncates to 30 s, and its policy may too; no other family's does.
TRUNCATING = ("gemma3n",)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in TRUNCATING])
def test_truncate_mode_is_refused_where_unsupported(
    host: FamilyHost, model_dir, family: str
) -> None:
    with pytest.raises(PolicyError, match="'reject'"):
        host.load_model_policy(
            model_dir(family, config={"audiogate_audio_limits": {"overflow": "truncate"}})
        )


def test_max_source_rate_below_family_minimum_is_refused(host: FamilyHost, model_dir) -> None:
    with pytest.raises(PolicyError, match="minimum source rate 8000"):
        host.load_model_policy(
            model_dir("phi4mm", config={"audiogate_audio_limits": {"max_source_rate_hz": 4000}})
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_unknown_keys_are_ignored(host: FamilyHost, model_dir, family: str) -> None:
    policy = host.load_model_policy(
        model_dir(
            family,
            config={
                "hidden_size": 4096,
                "rope_scaling": {"type": "x"},
                "feature_extractor": {"a": 1},
            },
        )
    )
    assert policy == host.default_policy(family)


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (b"\xff\xfe\x00".decode("latin-1"), "is not valid JSON"),
    ],
)
def test_invalid_json_fails_naming_the_file(
    host: FamilyHost, model_dir, content: str, rule: str
) -> None:
    with pytest.raises(PolicyError, match=rule) as info:
        host.load_model_policy(model_dir("gemma3n", preprocessor=content))
    assert "preprocessor_config.json" in str(info.value)


def test_non_utf8_file_fails_naming_the_file(host: FamilyHost, model_dir) -> None:
    root = model_dir("gemma3n")
    (root / "processor_config.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(PolicyError, match="UTF-8") as info:
        host.load_model_policy(root)
    assert "processor_config.json" in str(info.value)


def test_unreadable_file_fails(host: FamilyHost, model_dir) -> None:
    root = model_dir("gemma3n")
    (root / "preprocessor_config.json").mkdir()
    with pytest.raises(PolicyError, match="is not a regular file"):
        host.load_model_policy(root)
    (root / "preprocessor_config.json").rmdir()
    (root / "preprocessor_config.json").symlink_to(root / "missing.json")  # dangling
    with pytest.raises(PolicyError, match="cannot be read"):
        host.load_model_policy(root)


def test_special_huge_and_unparsable_files_fail_typed(host: FamilyHost, model_dir) -> None:
    import os

    from audiogate.policy.checkpoint import MAX_CONFIG_BYTES

    root = model_dir("gemma3n")
    target = root / "preprocessor_config.json"
    target.unlink(missing_ok=True)
    os.mkfifo(target)  # would block a plain open
    with pytest.raises(PolicyError, match="is not a regular file"):
        host.load_model_policy(root)
    target.unlink()
    with target.open("wb") as handle:
        handle.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(PolicyError, match="more than the"):
        host.load_model_policy(root)
    for text, match in (
        ('{"sampling_rate": ' + "9" * 5000 + "}", "cannot be parsed"),
        ("[" * 100_000 + "]" * 100_000, "cannot be parsed"),
    ):
        target.write_text(text)
        with pytest.raises(PolicyError, match=match):
            host.load_model_policy(root)


def test_both_processor_files_are_read_and_validated(host: FamilyHost, model_dir) -> None:
    # Gemma 3n ships preprocessor_config.json and processor_config.json (audio_seq_length).
    root = model_dir("gemma3n", preprocessor={"feature_extractor": {"sampling_rate": 16_000}})
    processor = root / "processor_config.json"
    document = {"audio_seq_length": 188, "processor_class": "Gemma3nProcessor"}
    processor.write_text(json.dumps({**document, "audio_seq_length": 64}))
    with pytest.raises(PolicyError, match=r"processor_config\.json at /audio_seq_length"):
        host.load_model_policy(root)
    processor.write_text(json.dumps({**document, "audiogate_audio_limits": {"max_clips": 2}}))
    policy = host.load_model_policy(root)
    assert policy.max_clips == 2
    assert policy.source_of("max_clips").origin == "processor_config.json"


def test_a_missing_or_non_string_model_type_says_so(host: FamilyHost, model_dir) -> None:
    root = model_dir("gemma3n", config={"model_type": None})
    with pytest.raises(PolicyError, match="has no model_type"):
        host.load_model_policy(root)
    for value in (3, ["gemma3n"]):
        root = model_dir("gemma3n", config={"model_type": value})
        with pytest.raises(PolicyError, match="must be a string") as info:
            host.load_model_policy(root)
        assert f"(got {value!r})" in str(info.value)


def test_a_broken_tokenizer_is_a_policy_error(model_dir) -> None:
    pytest.importorskip("transformers")
    from audiogate.api import AudioGate

    root = model_dir("gemma3n")
    (root / "tokenizer.json").write_text("{not json")
    with pytest.raises(PolicyError, match="tokenizer cannot be loaded"):
        AudioGate.from_model_dir(root)


def test_missing_config_json_and_missing_directory(host: FamilyHost, tmp_path) -> None:
    with pytest.raises(PolicyError, match=r"config\.json"):
        host.load_model_policy(tmp_path)
    with pytest.raises(PolicyError, match="does not exist"):
        host.load_model_policy(tmp_path / "nope")


def test_first_existing_processor_file_is_used(model_dir) -> None:
    root = model_dir(
        "gemma3n",
        preprocessor={"sampling_rate": 16_000},
        processor={"audio_seq_length": 188},
    )
    configs = read_checkpoint_configs(root)
    assert configs.processor_file == "preprocessor_config.json"
    (root / "preprocessor_config.json").unlink()
    assert read_checkpoint_configs(root).processor_file == "processor_config.json"


def test_unknown_model_type_lists_installed_families(host: FamilyHost, tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(PolicyError) as info:
        host.load_model_policy(tmp_path)
    message = str(info.value)
    assert "'llama'" in message
    for family in FAMILIES:
        assert family in message
    assert "/model_type" in message


def test_policy_is_immutable(host: FamilyHost) -> None:
    policy = host.default_policy("gemma3n")
    with pytest.raises(AttributeError):
        policy.max_clips = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        policy.options["boa_token_id"] = 1  # type: ignore[index]
