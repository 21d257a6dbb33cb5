"""``examples/models/qwen3-omni-30b-a3b-instruct`` loads in transformers as the real
checkpoint does, selects this family with its pinned defaults, and its tokenizer files are fresh."""

from __future__ import annotations

import importlib.util

import pytest
from qwen3omni_helpers import MODEL_DIR

from audiogate_qwen3omni.policy import PINNED

transformers = pytest.importorskip("transformers")


def test_the_directory_selects_the_family_with_the_pinned_defaults(host):
    policy = host.load_model_policy(MODEL_DIR)
    assert policy.family == "qwen3omni"
    assert policy.max_samples_per_clip == PINNED.max_samples_per_clip
    assert policy.options["audio_token_index"] == 151_675


def test_transformers_loads_config_extractor_and_tokenizer():
    config = transformers.AutoConfig.from_pretrained(str(MODEL_DIR), local_files_only=True)
    assert config.model_type == "qwen3_omni_moe"
    thinker = config.thinker_config
    assert (thinker.audio_token_id, thinker.audio_start_token_id) == (151_675, 151_669)
    assert (thinker.audio_config.num_mel_bins, thinker.audio_config.n_window) == (128, 50)
    extractor = transformers.AutoFeatureExtractor.from_pretrained(
        str(MODEL_DIR), local_files_only=True
    )
    assert type(extractor).__name__ == "WhisperFeatureExtractor"
    assert (extractor.n_samples, extractor.nb_max_frames, extractor.feature_size) == (
        4_800_000,
        30_000,
        128,
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
    for name, token, token_id in (
        ("audio_token", "<|audio_pad|>", 151_675),
        ("audio_bos_token", "<|audio_start|>", 151_669),
        ("audio_eos_token", "<|audio_end|>", 151_670),
    ):
        assert getattr(tokenizer, name) == token
        assert tokenizer.encode(token, add_special_tokens=False) == [token_id]


@pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is None or importlib.util.find_spec("PIL") is None,
    reason="Qwen3OmniMoeProcessor's image and video processors need Pillow and torchvision",
)
def test_auto_processor_loads_it():
    processor = transformers.AutoProcessor.from_pretrained(str(MODEL_DIR), local_files_only=True)
    assert type(processor).__name__ == "Qwen3OmniMoeProcessor"


def test_the_stand_in_tokenizer_is_fresh():
    from qwen3omni_build_example import main

    assert main(["--check"]) == 0


def test_the_chat_template_renders_as_the_checkpoints():
    # As stored renderings of the checkpoint's template show it: no default system turn,
    # list content part by part, the audio block right before the text.
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
    rendered = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": [{"type": "text", "text": "You are helpful."}]},
            {
                "role": "user",
                "content": [
                    {"type": "audio", "audio": "a.wav"},
                    {"type": "text", "text": "What sound is this?"},
                ],
            },
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert rendered == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What sound is this?"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
