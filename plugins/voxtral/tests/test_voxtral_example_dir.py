"""``examples/models/voxtral-mini-3b-2507``: transformers loads it as it loads the real
checkpoint, its files select this family and its pinned policy, and its two stand-in
tokenizers (``tekken.json`` for mistral-common, ``tokenizer.json`` for audiogate) agree."""

from __future__ import annotations

import json

import pytest
from voxtral_tokenizer import MODEL_DIR, SPECIAL_TOKENS, main

import audiogate_voxtral.plugin as family_plugin
from audiogate.host import create_host
from audiogate.policy import read_checkpoint_configs

transformers = pytest.importorskip("transformers")


def test_the_tokenizer_files_are_fresh():
    assert main(["--check"]) == 0


def test_auto_classes_load_it_offline():
    extractor = transformers.AutoFeatureExtractor.from_pretrained(str(MODEL_DIR))
    assert type(extractor).__name__ == "WhisperFeatureExtractor"
    assert (extractor.feature_size, extractor.n_samples, extractor.nb_max_frames) == (
        128,
        480_000,
        3000,
    )
    config = transformers.AutoConfig.from_pretrained(str(MODEL_DIR))
    assert (config.model_type, config.audio_token_id) == ("voxtral", 24)
    pytest.importorskip("torch")
    processor = transformers.AutoProcessor.from_pretrained(str(MODEL_DIR))
    assert type(processor).__name__ == "VoxtralProcessor"
    assert (processor.audio_token, processor.audio_token_id) == ("[AUDIO]", 24)


def test_its_configs_give_the_pinned_policy():
    host = create_host(plugins=[family_plugin], load_entry_points=False)
    configs = read_checkpoint_configs(MODEL_DIR)
    family = host.family_for_model_type(configs.model["model_type"])
    policy = host.parse_policy(family.spec.name, configs)
    assert policy.family == "voxtral"
    pinned = host.default_policy("voxtral")
    assert policy.as_dict() == pinned.as_dict()
    assert policy.from_checkpoint


def test_special_tokens_sit_at_their_ids_in_both_tokenizers(tokenizer):
    document = json.loads((MODEL_DIR / "tekken.json").read_text())
    tekken = {t["token_str"]: t["rank"] for t in document["special_tokens"]}
    assert tekken == SPECIAL_TOKENS
    for token in ("<s>", "</s>", "[INST]", "[/INST]", "[AUDIO]", "[BEGIN_AUDIO]", "[TRANSCRIBE]"):
        assert tokenizer.convert_tokens_to_ids(token) == SPECIAL_TOKENS[token]
    assert document["audio"]["frame_rate"] == 12.5
    assert document["audio"]["chunk_length_s"] == 30.0


CONVERSATIONS = [
    [{"role": "user", "content": "Hello, how are you? é ü 日本"}],
    [
        {"role": "user", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": "y "},
        {"role": "user", "content": "c"},
    ],
    [
        {"role": "system", "content": "Answer in French."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "One"}, {"type": "text", "text": " two"}],
        },
        {"role": "assistant", "content": "Un deux.  "},
        {"role": "user", "content": "Three?"},
    ],
]


@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_the_chat_template_renders_what_mistral_common_encodes(tokenizer, conversation):
    """The fast tokenizer's template, tokenized, against mistral-common's
    ``encode_chat_completion`` on ``tekken.json`` (text conversations)."""
    pytest.importorskip("mistral_common")
    mistral = transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR))
    assert type(mistral).__name__ == "MistralCommonBackend"
    want = mistral.apply_chat_template(conversation, tokenize=True, return_dict=False)
    text = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert tokenizer.encode(text, add_special_tokens=False) == list(want)
