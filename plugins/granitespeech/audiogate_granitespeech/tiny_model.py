"""A tiny random ``GraniteSpeechForConditionalGeneration`` for tests (read by
:mod:`audiogate.testing.tiny_models`): the real ids and vocabulary, everything else shrunk.

Kept real: ``<|audio|>`` 49159 in a 49,160-token vocabulary, 160-value input rows (two
stacked 80-bin frames), the projector's window of 15 rows and downsample rate 5 (3
queries a window), and the conformer's 200-frame attention blocks. Needs torch and
transformers (test dependencies); no weights are downloaded.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["LOGITS_TO_KEEP", "build"]

#: The forward takes ``logits_to_keep=1``.
LOGITS_TO_KEEP: Final = True


def build() -> Any:
    """The tiny model (random weights; the caller seeds torch and sets eval mode)."""
    import transformers

    config = transformers.GraniteSpeechConfig(
        text_config={
            "model_type": "granite",
            "vocab_size": 49_160,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "bos_token_id": 0,
            "eos_token_id": 0,
            "pad_token_id": 0,
        },
        encoder_config={
            "input_dim": 160,
            "num_layers": 1,
            "hidden_dim": 32,
            "feedforward_mult": 2,
            "num_heads": 2,
            "dim_head": 16,
            "output_dim": 8,
            "context_size": 200,
            "max_pos_emb": 512,
            "conv_kernel_size": 15,
            "conv_expansion_factor": 2,
        },
        projector_config={
            "model_type": "blip_2_qformer",
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "encoder_hidden_size": 32,
            "cross_attention_frequency": 1,
        },
        audio_token_index=49_159,
        window_size=15,
        downsample_rate=5,
        # The real checkpoint ships a LoRA adapter (peft); the tiny model has none.
        has_lora_adapter=False,
    )
    return transformers.GraniteSpeechForConditionalGeneration(config)
