"""A tiny random ``GlmAsrForConditionalGeneration`` for tests (read by
:mod:`audiogate.testing.tiny_models`): the real ids and vocabulary, everything else shrunk.

Kept real: ``<|pad|>`` 59260 in a 59,264-token vocabulary, 128 mel bins, the encoder's
1500 positions (each window row is 3000 frames) and the projector's merge of 4 frames.
Needs torch and transformers (test dependencies); no weights are downloaded.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["LOGITS_TO_KEEP", "build"]

#: The forward takes ``logits_to_keep=1``.
LOGITS_TO_KEEP: Final = True


def build() -> Any:
    """The tiny model (random weights; the caller seeds torch and sets eval mode)."""
    import transformers

    config = transformers.GlmAsrConfig(
        audio_config={
            "num_mel_bins": 128,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 1500,
        },
        text_config={
            "model_type": "llama",
            "vocab_size": 59_264,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
        },
        audio_token_id=59_260,
    )
    return transformers.GlmAsrForConditionalGeneration(config)
