"""The bundled example model directories load offline and match their real checkpoints.

``examples/models/README.md`` gives the provenance of every file and id checked here.
"""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from shipped import shipped_families

pytest.importorskip("transformers")

from transformers import AutoConfig, AutoFeatureExtractor, AutoProcessor, AutoTokenizer

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
AUDIO = Path(__file__).resolve().parents[2] / "examples" / "audio"
PROMPT = "Summarize the discussion."

#: directory → (config model_type, feature_extractor_type, {token: real id})
EXPECTED: dict[str, tuple[str, str, dict[str, int]]] = {
    "phi-4-multimodal-instruct": (
        "phi4mm",
        "Phi4MMAudioFeatureExtractor",
        {
            "<|endoftext|>": 199_999,
            "<|endoftext10|>": 200_010,
            "<|endoftext11|>": 200_011,
            "<|assistant|>": 200_019,
            "<|end|>": 200_020,
            "<|user|>": 200_021,
            "<|system|>": 200_022,
        },
    ),
    "phi-4-multimodal-instruct-hf": (
        "phi4_multimodal",
        "Phi4MultimodalFeatureExtractor",
        {
            "<|endoftext|>": 199_999,
            "<|image|>": 200_010,
            "<|audio|>": 200_011,
            "<|assistant|>": 200_019,
            "<|end|>": 200_020,
            "<|user|>": 200_021,
        },
    ),
    "gemma-3n-e4b-it": (
        "gemma3n",
        "Gemma3nAudioFeatureExtractor",
        {
            "<pad>": 0,
            "<eos>": 1,
            "<bos>": 2,
            "<start_of_turn>": 105,
            "<end_of_turn>": 106,
            "<start_of_image>": 255_999,
            "<start_of_audio>": 256_000,
            "<end_of_image>": 262_144,
            "<image_soft_token>": 262_145,
            "<end_of_audio>": 262_272,
            "<audio_soft_token>": 262_273,
        },
    ),
    "qwen2-audio-7b-instruct": (
        "qwen2_audio",
        "WhisperFeatureExtractor",
        {
            "<|endoftext|>": 151_643,
            "<|im_start|>": 151_644,
            "<|im_end|>": 151_645,
            "<|AUDIO|>": 151_646,
            "<|audio_bos|>": 151_647,
            "<|audio_eos|>": 151_648,
        },
    ),
}

#: directory → (user content, exact rendering with add_generation_prompt=True)
RENDERED: dict[str, tuple[object, str]] = {
    # The remote-code template only accepts string content; audio is written inline.
    "phi-4-multimodal-instruct": (
        f"<|audio_1|>{PROMPT}",
        f"<|user|><|audio_1|>{PROMPT}<|end|><|assistant|>",
    ),
    "phi-4-multimodal-instruct-hf": (
        [{"type": "audio"}, {"type": "text", "text": PROMPT}],
        f"<|user|><|audio|>{PROMPT}<|end|><|assistant|>",
    ),
    "gemma-3n-e4b-it": (
        [{"type": "audio"}, {"type": "text", "text": PROMPT}],
        f"<bos><start_of_turn>user\n<audio_soft_token>{PROMPT}<end_of_turn>\n"
        "<start_of_turn>model\n",
    ),
    "qwen2-audio-7b-instruct": (
        [{"type": "audio"}, {"type": "text", "text": PROMPT}],
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\nAudio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n{PROMPT}<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
}

DIRECTORIES = sorted(EXPECTED)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "example_models_build_tokenizers", MODELS / "build_tokenizers.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve the module's string annotations through sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_directory_is_covered():
    # The first three families' directories are checked here; a family shipped later
    # lists its own in families.toml and checks them in its plugin's tests.
    listed = {e for family in shipped_families() for e in family.examples} - set(DIRECTORIES)
    found = sorted(p.parent.name for p in MODELS.glob("*/config.json"))
    assert found == sorted([*DIRECTORIES, *listed])
    assert sorted(s.directory for s in _generator().STAND_INS) == DIRECTORIES


@pytest.mark.parametrize("name", DIRECTORIES)
def test_json_files_parse_and_declare_the_family(name):
    model_type, extractor, _ = EXPECTED[name]
    documents = {
        p.name: json.loads(p.read_text(encoding="utf-8")) for p in (MODELS / name).glob("*.json")
    }
    assert {"config.json", "preprocessor_config.json", "tokenizer.json"} <= set(documents)
    assert all(isinstance(doc, dict) for doc in documents.values())
    assert documents["config.json"]["model_type"] == model_type
    assert documents["preprocessor_config.json"]["feature_extractor_type"] == extractor


@pytest.mark.parametrize("name", DIRECTORIES)
def test_tokenizer_loads_offline_with_the_real_special_ids(name):
    tokenizer = AutoTokenizer.from_pretrained(MODELS / name)
    for token, real_id in EXPECTED[name][2].items():
        assert tokenizer.convert_tokens_to_ids(token) == real_id, token
        assert tokenizer.encode(token, add_special_tokens=False) == [real_id], token
        assert tokenizer.decode([real_id]) == token


@pytest.mark.parametrize("name", DIRECTORIES)
def test_chat_template_renders_like_the_real_checkpoint(name):
    tokenizer = AutoTokenizer.from_pretrained(MODELS / name)
    content, expected = RENDERED[name]
    messages = [{"role": "user", "content": content}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == expected
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    table = EXPECTED[name][2]
    pattern = "|".join(re.escape(t) for t in sorted(table, key=len, reverse=True))
    in_text = [table[m.group(0)] for m in re.finditer(pattern, text)]
    assert [i for i in ids if i in table.values()] == in_text


def test_phi4_remote_template_rejects_content_lists():
    """The remote-code template concatenates ``message['content']`` as a string."""
    tokenizer = AutoTokenizer.from_pretrained(MODELS / "phi-4-multimodal-instruct")
    with pytest.raises(TypeError):
        tokenizer.apply_chat_template(
            [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}], tokenize=False
        )


@pytest.mark.parametrize(
    ("name", "attribute", "token_id"),
    [
        ("phi-4-multimodal-instruct-hf", "audio_token", 200_011),
        ("phi-4-multimodal-instruct-hf", "image_token", 200_010),
        ("gemma-3n-e4b-it", "audio_token", 262_273),
        ("gemma-3n-e4b-it", "boa_token", 256_000),
        ("gemma-3n-e4b-it", "eoa_token", 262_272),
    ],
)
def test_named_model_tokens_match_the_processor_contract(name, attribute, token_id):
    tokenizer = AutoTokenizer.from_pretrained(MODELS / name)
    assert tokenizer.convert_tokens_to_ids(getattr(tokenizer, attribute)) == token_id


@pytest.mark.parametrize(
    ("name", "checks"),
    [
        ("gemma-3n-e4b-it", {"audio_token_id": 262_273, "audio_soft_tokens_per_image": 188}),
        ("qwen2-audio-7b-instruct", {"audio_token_id": 151_646}),
        ("phi-4-multimodal-instruct-hf", {"eos_token_id": [199_999, 200_020]}),
    ],
)
def test_native_configs_and_extractors_load(name, checks):
    config = AutoConfig.from_pretrained(MODELS / name)
    for key, value in checks.items():
        assert getattr(config, key) == value
    extractor = AutoFeatureExtractor.from_pretrained(MODELS / name)
    assert type(extractor).__name__ == EXPECTED[name][1]
    assert extractor.sampling_rate == 16_000


def test_qwen2_audio_processor_expands_on_the_stand_in():
    """One second of audio is 25 ``<|AUDIO|>`` ids in the real processor's arithmetic."""
    processor = AutoProcessor.from_pretrained(MODELS / "qwen2-audio-7b-instruct")
    content, expected = RENDERED["qwen2-audio-7b-instruct"]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    assert text == expected
    audio = np.full(16_000, 0.01, dtype=np.float32)
    out = processor(text=text, audio=[audio], sampling_rate=16_000, return_tensors="np")
    assert out["input_ids"][0].tolist().count(151_646) == 25


def test_committed_tokenizers_are_fresh(tmp_path):
    generator = _generator()
    for spec in generator.STAND_INS:
        generator.build(spec, tmp_path / spec.directory)
        for file in generator.TOKENIZER_FILES:
            fresh = (tmp_path / spec.directory / file).read_bytes()
            committed = (MODELS / spec.directory / file).read_bytes()
            assert fresh == committed, (
                f"{spec.directory}/{file} is stale: run python examples/models/build_tokenizers.py"
            )


@pytest.mark.parametrize(
    ("name", "rate_hz", "channels"),
    [("speech_16k.wav", 16_000, 1), ("speech_44k1_stereo.wav", 44_100, 2)],
)
def test_example_audio_is_plain_pcm16_wave(name, rate_hz, channels):
    data = (AUDIO / name).read_bytes()
    assert data[:4] == b"RIFF"
    assert data[8:16] == b"WAVEfmt "
    fmt_tag, n_channels, rate, _, block_align, bits = struct.unpack("<HHIIHH", data[20:36])
    assert (fmt_tag, n_channels, rate, bits) == (1, channels, rate_hz, 16)
    assert block_align == 2 * channels
    assert data[36:40] == b"data"
    frames = int.from_bytes(data[40:44], "little") // block_align
    assert 2.0 <= frames / rate_hz <= 4.0
