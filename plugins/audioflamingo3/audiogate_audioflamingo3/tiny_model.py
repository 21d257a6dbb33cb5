"""A tiny random ``AudioFlamingo3ForConditionalGeneration`` for tests (read by
:mod:`audiogate.testing.tiny_models`): the real ids and vocabulary, everything else shrunk.

Kept real: ``<sound>`` 151669 in a 151,672-token vocabulary, 128 mel bins and the
encoder's 1500 positions (each window row is 3000 frames). Needs torch and transformers
(test dependencies); no weights are downloaded.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["LOGITS_TO_KEEP", "build"]

#: The forward takes ``logits_to_keep=1``.
LOGITS_TO_KEEP: Final = True


def build() -> Any:
    """The tiny model (random weights; the caller seeds torch and sets eval mode)."""
    import transformers

    config = transformers.AudioFlamingo3Config(
        audio_config={
            "num_mel_bins": 128,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_source_positions": 1500,
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": 151_672,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "tie_word_embeddings": True,
        },
        audio_token_id=151_669,
    )
    return transformers.AudioFlamingo3ForConditionalGeneration(config)
