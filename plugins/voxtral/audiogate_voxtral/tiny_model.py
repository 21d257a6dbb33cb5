"""A tiny random ``VoxtralForConditionalGeneration`` for tests (read by
:mod:`audiogate.testing.tiny_models`): the real ids and vocabulary, everything else shrunk.

The real parts that matter are kept: ``[AUDIO]`` 24, the 131,072-token vocabulary, 128
mel bins, 1500 encoder positions per 3000-frame window and ``intermediate_size`` = 4 ×
``hidden_size`` in the encoder (the projector folds four positions into one token: 375 a
window). Needs torch and transformers (test dependencies); no weights are downloaded.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["LOGITS_TO_KEEP", "build"]

#: The forward takes ``logits_to_keep=1`` (the 131k vocabulary dominates otherwise).
LOGITS_TO_KEEP: Final = True


def build() -> Any:
    """The tiny model (random weights; the caller seeds torch and sets eval mode)."""
    import transformers

    config = transformers.VoxtralConfig(
        audio_token_id=24,
        text_config={
            "model_type": "llama",
            "vocab_size": 131_072,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "tie_word_embeddings": True,
        },
        audio_config={
            "model_type": "voxtral_encoder",
            "hidden_size": 16,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
        },
    )
    return transformers.VoxtralForConditionalGeneration(config)
