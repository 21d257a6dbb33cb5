"""The example checkpoint's files, and what transformers itself saves, parse to the pinned
policy; a file that declares another frontend is refused, not ignored."""

from __future__ import annotations

import json
import shutil

import pytest

from audiogate.errors import PolicyError
from audiogate.policy import read_checkpoint_configs
from conftest import MODEL_DIR


def test_the_example_checkpoint_parses_to_the_pinned_policy(host, policy):
    parsed = host.parse_policy("granitespeech", read_checkpoint_configs(MODEL_DIR))
    assert parsed == policy
    assert parsed.source_of("options.audio_token_index").kind != "pinned"
    assert parsed.source_of("options.n_fft").kind != "pinned"


def test_what_transformers_saves_parses(host, policy, tmp_path):
    pytest.importorskip("torch")
    from granitespeech_helpers import build_extractor

    build_extractor().save_pretrained(str(tmp_path))
    shutil.copy(MODEL_DIR / "config.json", tmp_path / "config.json")
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert saved["melspec_kwargs"]["n_fft"] == 512
    assert host.parse_policy("granitespeech", read_checkpoint_configs(tmp_path)) == policy


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (("melspec_kwargs", "n_mels"), 128),
        (("melspec_kwargs", "hop_length"), 320),
        (("projector_window_size",), 10),
        (("sampling_rate",), 22_050),
        (("padding_side",), "left"),
    ],
)
def test_another_frontend_is_refused(host, tmp_path, key, value):
    for name in ("config.json", "processor_config.json"):
        shutil.copy(MODEL_DIR / name, tmp_path / name)
    document = json.loads((MODEL_DIR / "preprocessor_config.json").read_text())
    target = document
    for part in key[:-1]:
        target = target[part]
    target[key[-1]] = value
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(document))
    with pytest.raises(PolicyError):
        host.parse_policy("granitespeech", read_checkpoint_configs(tmp_path))


def test_another_audio_token_id_is_taken_from_config(host, tmp_path):
    for name in ("preprocessor_config.json", "processor_config.json"):
        shutil.copy(MODEL_DIR / name, tmp_path / name)
    config = json.loads((MODEL_DIR / "config.json").read_text())
    config["audio_token_index"] = 49_155  # granite-speech-3.2's
    (tmp_path / "config.json").write_text(json.dumps(config))
    parsed = host.parse_policy("granitespeech", read_checkpoint_configs(tmp_path))
    assert parsed.options["audio_token_index"] == 49_155
