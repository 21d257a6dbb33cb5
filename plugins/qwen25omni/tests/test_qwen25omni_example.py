"""``examples/models/qwen2.5-omni-7b`` loads in transformers as the real checkpoint does,
selects this family with its pinned defaults, and its tokenizer files are fresh."""

from __future__ import annotations

import importlib.util

import pytest
from qwen25omni_helpers import MODEL_DIR

from audiogate_qwen25omni.policy import PINNED

transformers = pytest.importorskip("transformers")


def test_the_directory_selects_the_family_with_the_pinned_defaults(host):
    policy = host.load_model_policy(MODEL_DIR)
    assert policy.family == "qwen25omni"
    assert policy.max_samples_per_clip == PINNED.max_samples_per_clip
    assert policy.options["audio_token_index"] == 151_646


def test_transformers_loads_config_extractor_and_tokenizer():
    config = transformers.AutoConfig.from_pretrained(str(MODEL_DIR), local_files_only=True)
    assert config.model_type == "qwen2_5_omni"
    thinker = config.thinker_config
    assert (thinker.audio_token_index, thinker.audio_start_token_id) == (151_646, 151_647)
    assert thinker.audio_config.num_mel_bins == 128
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
        ("audio_token", "<|AUDIO|>", 151_646),
        ("audio_bos_token", "<|audio_bos|>", 151_647),
        ("audio_eos_token", "<|audio_eos|>", 151_648),
    ):
        assert getattr(tokenizer, name) == token
        assert tokenizer.encode(token, add_special_tokens=False) == [token_id]


@pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is None or importlib.util.find_spec("PIL") is None,
    reason="Qwen2_5OmniProcessor's image and video processors need Pillow and torchvision",
)
def test_auto_processor_loads_it():
    processor = transformers.AutoProcessor.from_pretrained(str(MODEL_DIR), local_files_only=True)
    assert type(processor).__name__ == "Qwen2_5OmniProcessor"


def test_the_stand_in_tokenizer_is_fresh():
    from qwen25omni_build_example import main

    assert main(["--check"]) == 0


def test_the_chat_template_renders_as_the_checkpoints():
    # The checkpoint's rendering of a user turn with an audio part and a question: the
    # default system turn, the audio block, the text right after it.
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
    rendered = tokenizer.apply_chat_template(
        [
            {
                "role": "user",
                "content": [{"type": "audio", "audio": "a.wav"}, {"type": "text", "text": "Why?"}],
            }
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert rendered == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|audio_bos|><|AUDIO|><|audio_eos|>Why?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
