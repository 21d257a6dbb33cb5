"""A checkpoint that cannot serve fails at load, with a typed error naming the file.

Copies of the bundled example model directories, each broken in one way: tokenizer
files that are missing behind a link, endless or too large; a chat template that does
not compile; token ids that contradict the tokenizer; duplicate keys; limits that admit
no clip. Each would otherwise load and then fail every request (or none, silently).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import audiogate.policy.checkpoint as checkpoint
from audiogate.api import AudioGate
from audiogate.errors import MissingExtraError, PolicyError

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
QWEN = "qwen2-audio-7b-instruct"
GEMMA = "gemma-3n-e4b-it"
ALL = sorted(p.name for p in MODELS.iterdir() if (p / "config.json").is_file())


def copy_model(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(MODELS / name, root)
    return root


def edit_json(path: Path, **changes: object) -> None:
    document = json.loads(path.read_text())
    document.update(changes)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("name", ALL)
def test_every_example_loads_and_passes_its_probe(name: str) -> None:
    gate = AudioGate.from_model_dir(MODELS / name)
    assert gate.tokenizer is not None


# --- tokenizer files ---------------------------------------------------------------


@pytest.mark.parametrize("file", ["tokenizer.json", "tokenizer_config.json"])
def test_a_dangling_tokenizer_link_is_refused(tmp_path, file: str) -> None:
    root = copy_model(tmp_path, QWEN)
    (root / file).unlink()
    (root / file).symlink_to(tmp_path / "nowhere")
    with pytest.raises(PolicyError, match="cannot be read") as info:
        AudioGate.from_model_dir(root)
    assert info.value.file == str(root / file)


def test_every_tokenizer_link_dangling_is_not_a_model_without_tokenizer(tmp_path) -> None:
    root = copy_model(tmp_path, QWEN)
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (root / file).unlink()
        (root / file).symlink_to(tmp_path / f"missing-{file}")
    with pytest.raises(PolicyError, match="cannot be read"):
        AudioGate.from_model_dir(root)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory"])
def test_a_chat_template_that_is_not_a_regular_file_is_refused(tmp_path, kind: str) -> None:
    root = copy_model(tmp_path, QWEN)
    template = root / "chat_template.jinja"
    template.unlink()
    if kind == "dev-zero":
        template.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(template)
    else:
        template.mkdir()
    with pytest.raises(PolicyError, match="not a regular file") as info:
        AudioGate.from_model_dir(root)
    assert info.value.file == str(template)


def test_tokenizer_files_over_their_cap_are_refused_unread(tmp_path, monkeypatch) -> None:
    root = copy_model(tmp_path, QWEN)
    size = (root / "tokenizer.json").stat().st_size
    monkeypatch.setattr(checkpoint, "MAX_TOKENIZER_DATA_BYTES", size - 1)
    with pytest.raises(PolicyError, match="more than the") as info:
        AudioGate.from_model_dir(root)
    assert info.value.file == str(root / "tokenizer.json")
    monkeypatch.undo()
    with (root / "chat_template.jinja").open("a") as handle:  # sparse: nothing is written
        handle.truncate(checkpoint.MAX_CONFIG_BYTES + 1)
    with pytest.raises(PolicyError, match="more than the") as info:
        AudioGate.from_model_dir(root)
    assert info.value.file == str(root / "chat_template.jinja")


# --- chat template -----------------------------------------------------------------


def test_a_chat_template_that_does_not_compile_fails_at_load(tmp_path) -> None:
    root = copy_model(tmp_path, QWEN)
    (root / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content ")
    with pytest.raises(PolicyError, match="chat template does not compile: TemplateSyntaxError"):
        AudioGate.from_model_dir(root)


def test_a_chat_template_that_is_not_text_fails_at_load(tmp_path) -> None:
    root = copy_model(tmp_path, QWEN)
    (root / "chat_template.jinja").unlink()
    edit_json(root / "tokenizer_config.json", chat_template=5)
    with pytest.raises(PolicyError, match="chat template"):
        AudioGate.from_model_dir(root)


# --- token ids against the tokenizer -----------------------------------------------


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [(QWEN, "audio_token_index", 0), (GEMMA, "boa_token_id", 0), (GEMMA, "audio_token_id", 7)],
)
def test_token_ids_that_contradict_the_tokenizer_fail_at_load(tmp_path, name, key, value) -> None:
    root = copy_model(tmp_path, name)
    edit_json(root / "config.json", **{key: value})
    with pytest.raises(PolicyError):
        AudioGate.from_model_dir(root)


# --- config values -----------------------------------------------------------------


def test_a_key_given_twice_is_refused(tmp_path) -> None:
    root = copy_model(tmp_path, QWEN)
    path = root / "preprocessor_config.json"
    text = path.read_text().rstrip().removesuffix("}")
    path.write_text(text + ', "max_audio_samples": 16000, "max_audio_samples": 480000}')
    with pytest.raises(PolicyError, match="a key twice") as info:
        AudioGate.from_model_dir(root)
    assert info.value.file == str(path)
    assert info.value.value == "max_audio_samples"


@pytest.mark.parametrize(("name", "samples"), [(QWEN, 1), (QWEN, 320), (GEMMA, 100)])
def test_limits_that_admit_no_clip_fail_at_load(tmp_path, name: str, samples: int) -> None:
    root = copy_model(tmp_path, name)
    edit_json(root / "preprocessor_config.json", max_audio_samples=samples)
    with pytest.raises(PolicyError, match="admits no clip"):
        AudioGate.from_model_dir(root)


def test_the_smallest_clip_cap_that_admits_a_clip_loads(tmp_path) -> None:
    root = copy_model(tmp_path, GEMMA)
    gate = AudioGate.from_model_dir(root)
    shortest = gate.policy.min_samples_per_clip
    edit_json(root / "preprocessor_config.json", max_audio_samples=shortest)
    assert AudioGate.from_model_dir(root).policy.max_samples_per_clip == shortest


def test_an_offending_value_is_shown_short(tmp_path) -> None:
    root = copy_model(tmp_path, QWEN)
    edit_json(root / "preprocessor_config.json", sampling_rate="x" * 1_000_000)
    with pytest.raises(PolicyError) as info:
        AudioGate.from_model_dir(root)
    message = str(info.value)
    assert "/sampling_rate" in message
    assert len(message) < 1_000
    assert info.value.value == "x" * 1_000_000  # the whole value stays on the error


def test_tokenizer_files_without_transformers_fail_at_load(monkeypatch) -> None:
    # Without the chat extra, the gate would have no ids and no template, silently.
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'audiogate\[chat\]'") as info:
        AudioGate.from_model_dir(MODELS / QWEN)
    assert info.value.extra == "chat"
    assert str(MODELS / QWEN) in str(info.value)
    monkeypatch.undo()
    assert AudioGate.from_model_dir(MODELS / QWEN).tokenizer is not None


@pytest.mark.parametrize("kept", ["chat_template.jinja", "tokenizer_config.json"])
def test_tokenizer_configuration_without_a_tokenizer_is_refused(tmp_path, kept: str) -> None:
    # transformers would build an empty tokenizer from it; the probe would then blame
    # the token ids.
    root = copy_model(tmp_path, GEMMA)
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if file != kept:
            (root / file).unlink()
    with pytest.raises(PolicyError, match="but no tokenizer") as info:
        AudioGate.from_model_dir(root)
    assert kept in str(info.value)


def test_a_directory_without_tokenizer_files_has_no_tokenizer(tmp_path) -> None:
    root = copy_model(tmp_path, GEMMA)
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (root / file).unlink()
    assert AudioGate.from_model_dir(root).tokenizer is None
