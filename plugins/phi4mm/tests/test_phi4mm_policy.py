"""Phi-4 MM policy: pinned defaults, variant selection from the checkpoint's own files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audiogate.errors import PolicyError
from audiogate.host import FamilyHost
from audiogate.policy import build_schema, dump_schema
from audiogate_phi4mm import policy as phi_policy

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "models"


def test_pinned_defaults_are_the_remote_code_frontend(host: FamilyHost) -> None:
    policy = host.default_policy("phi4mm")
    assert policy.variant == "remote_code"
    assert policy.resampling == "scipy_polyphase_integer"
    assert policy.min_source_rate_hz == 8_000
    assert policy.max_waveform_working_bytes_per_request == 512 << 20
    assert dict(policy.options) == {
        "audio_token_id": 200_011,
        "image_token_id": 200_010,
        "audio_compression_rate": 8,
        "audio_downsample_rate": 1,
    }


def test_no_declaration_gives_the_pinned_remote_code_variant(host: FamilyHost, model_dir) -> None:
    root = model_dir("phi4mm")
    (root / "config.json").write_text(json.dumps({}))
    policy = host.parse_policy("phi4mm", _configs(root))
    assert policy.variant == "remote_code"
    assert policy.source_of("variant").kind == "pinned"


def _configs(root: Path):
    from audiogate.policy import read_checkpoint_configs

    return read_checkpoint_configs(root)


@pytest.mark.parametrize(
    ("config", "preprocessor", "file", "pointer"),
    [
        ({"model_type": "phi4_multimodal"}, None, "config.json", "/model_type"),
        (
            {"model_type": "phi4_multimodal"},
            {"processor_class": "Phi4MultimodalProcessor"},
            "preprocessor_config.json",
            "/processor_class",
        ),
        (
            {},
            {"feature_extractor_type": "Phi4MultimodalFeatureExtractor"},
            "preprocessor_config.json",
            "/feature_extractor_type",
        ),
        (
            {},
            {"audio_processor": {"feature_extractor_type": "Phi4MultimodalFeatureExtractor"}},
            "preprocessor_config.json",
            "/audio_processor/feature_extractor_type",
        ),
    ],
)
def test_native_declarations_select_the_native_variant(
    host: FamilyHost, model_dir, config, preprocessor, file, pointer
) -> None:
    root = model_dir("phi4mm", preprocessor=preprocessor)
    (root / "config.json").write_text(json.dumps(config))
    policy = host.parse_policy("phi4mm", _configs(root))
    assert policy.variant == "native"
    assert policy.resampling == "soxr_hq"
    assert policy.min_source_rate_hz == 1
    source = policy.source_of("variant")
    assert (source.kind, source.origin, source.key) == ("checkpoint", file, pointer)
    assert policy.source_of("resampling").kind == "derived"
    assert policy.source_of("min_source_rate_hz").kind == "derived"
    # The bounds are the family's, whichever frontend.
    pinned = host.default_policy("phi4mm")
    assert policy.max_frames_per_request == pinned.max_frames_per_request
    assert dict(policy.options) == dict(pinned.options)


def test_remote_code_declarations_are_recorded(host: FamilyHost, model_dir) -> None:
    policy = host.load_model_policy(
        model_dir(
            "phi4mm",
            preprocessor={
                "processor_class": "Phi4MMProcessor",
                "feature_extractor_type": "Phi4MMAudioFeatureExtractor",
                "audio_compression_rate": 8,
                "audio_downsample_rate": 1,
            },
        )
    )
    assert policy.variant == "remote_code"
    assert policy.source_of("variant").origin == "preprocessor_config.json"
    assert policy.resampling == "scipy_polyphase_integer"
    assert policy.min_source_rate_hz == 8_000


@pytest.mark.parametrize(
    ("config", "preprocessor"),
    [
        ({"model_type": "phi4mm"}, {"processor_class": "Phi4MultimodalProcessor"}),
        (
            {"model_type": "phi4_multimodal"},
            {"feature_extractor_type": "Phi4MMAudioFeatureExtractor"},
        ),
        (
            {},
            {
                "processor_class": "Phi4MMProcessor",
                "feature_extractor_type": "Phi4MultimodalFeatureExtractor",
            },
        ),
    ],
)
def test_contradictory_declarations_fail_startup(
    host: FamilyHost, model_dir, config, preprocessor
) -> None:
    root = model_dir("phi4mm", preprocessor=preprocessor)
    (root / "config.json").write_text(json.dumps(config))
    with pytest.raises(PolicyError, match="both the remote-code and the transformers-native"):
        host.parse_policy("phi4mm", _configs(root))


@pytest.mark.parametrize(
    ("document", "pointer"),
    [
        ({"processor_class": "WhisperProcessor"}, "/processor_class"),
        ({"feature_extractor_type": 3}, "/feature_extractor_type"),
    ],
)
def test_a_foreign_processor_declaration_fails_startup(
    host: FamilyHost, model_dir, document, pointer
) -> None:
    with pytest.raises(PolicyError, match="must name a Phi-4 MM processor") as info:
        host.load_model_policy(model_dir("phi4mm", preprocessor=document))
    assert info.value.file == "preprocessor_config.json"
    assert info.value.json_path == pointer


def test_native_checkpoint_may_not_pin_the_remote_code_resampler(
    host: FamilyHost, model_dir
) -> None:
    root = model_dir(
        "phi4mm",
        preprocessor={
            "audiogate_audio_limits": {"resampling_algorithm": "scipy_polyphase_integer"}
        },
    )
    (root / "config.json").write_text(json.dumps({"model_type": "phi4_multimodal"}))
    with pytest.raises(PolicyError, match="'soxr_hq'") as info:
        host.parse_policy("phi4mm", _configs(root))
    assert info.value.json_path == "/audiogate_audio_limits/resampling_algorithm"


def test_the_shipped_schema_is_fresh() -> None:
    shipped = (Path(phi_policy.__file__).parent / "schema.json").read_text("utf-8")
    assert shipped == dump_schema(build_schema("phi4mm", phi_policy.POLICY_KEYS))


@pytest.mark.parametrize(
    ("directory", "variant"),
    [("phi-4-multimodal-instruct", "remote_code"), ("phi-4-multimodal-instruct-hf", "native")],
)
def test_example_model_directories_select_their_variant(
    host: FamilyHost, directory: str, variant: str
) -> None:
    root = EXAMPLES / directory
    if not root.is_dir():
        pytest.skip(f"{root} is not in this checkout")
    assert host.load_model_policy(root).variant == variant


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("feature_size", 128),
        ("win_length", 512),
        ("hop_length", 320),
        ("n_fft", 1024),
        ("padding_side", "left"),
    ],
)
def test_a_flat_native_frontend_other_than_ours_is_refused(
    host: FamilyHost, model_dir, key, value
) -> None:
    # Phi4MultimodalFeatureExtractor saves its frontend flat in preprocessor_config.json.
    shipped = Path(__file__).resolve().parents[3] / "examples/models/phi-4-multimodal-instruct-hf"
    document = json.loads((shipped / "preprocessor_config.json").read_text())
    native = {"model_type": "phi4_multimodal"}
    root = model_dir("phi4mm", config=native, preprocessor=document)
    assert host.load_model_policy(root).variant == "native"
    drifted = model_dir("phi4mm", config=native, preprocessor={**document, key: value})
    with pytest.raises(PolicyError, match=f"preprocessor_config.json at /{key}"):
        host.load_model_policy(drifted)


def test_the_native_variant_bounds_source_rates_by_its_own_minimum(
    host: FamilyHost, model_dir
) -> None:
    # The native frontend takes any rate from 1 Hz; a checkpoint lowering the maximum
    # below the remote-code minimum (8 kHz) is valid there, and refused for remote code.
    limits = {"audiogate_audio_limits": {"max_source_rate_hz": 4_000}}
    native = {"model_type": "phi4_multimodal", **limits}
    policy = host.load_model_policy(model_dir("phi4mm", config=native))
    assert (policy.variant, policy.max_source_rate_hz, policy.min_source_rate_hz) == (
        "native",
        4_000,
        1,
    )
    with pytest.raises(PolicyError, match="minimum source rate 8000 Hz"):
        host.load_model_policy(model_dir("phi4mm", config=limits))
