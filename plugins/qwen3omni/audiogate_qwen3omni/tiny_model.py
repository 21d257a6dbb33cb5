"""A tiny random ``Qwen3OmniMoeThinkerForConditionalGeneration`` for tests (read by
:mod:`audiogate.testing.tiny_models`): the real token ids, vocabulary and audio frontend
(128 mel bins, the encoder's window), everything else shrunk. Needs torch and
transformers (test dependencies); no weights are downloaded.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build"]


#: Read by the thinker's position ids (not parameters of the config class; the
#: checkpoint's config.json carries them).
_POSITION_IDS: dict[str, Any] = {"vision_start_token_id": 151_652, "vision_end_token_id": 151_653}


def build() -> Any:
    """The tiny thinker (random weights; the caller seeds torch and sets eval mode)."""
    import transformers

    config = transformers.Qwen3OmniMoeThinkerConfig(
        audio_config={
            "d_model": 16,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 32,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
            "n_window": 50,
            "n_window_infer": 800,
            "conv_chunksize": 500,
            "downsample_hidden_size": 8,
            "output_dim": 32,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "out_hidden_size": 32,
            "deepstack_visual_indexes": [],
        },
        text_config={
            "vocab_size": 152_064,
            "hidden_size": 32,
            "intermediate_size": 64,
            "moe_intermediate_size": 16,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1_000_000.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        },
        audio_token_id=151_675,
        audio_start_token_id=151_669,
        image_token_id=151_655,
        video_token_id=151_656,
        position_id_per_seconds=13,
        **_POSITION_IDS,
    )
    return transformers.Qwen3OmniMoeThinkerForConditionalGeneration(config)
