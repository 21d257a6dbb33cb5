"""Tiny randomly initialised transformers models that consume audiogate's output.

Each keeps the family's real special-token ids and vocabulary size, and shrinks
everything else (the configs below), so a test can run the real model code's
placeholder checks on our ``input_ids`` and collated features in milliseconds. Needs
torch and transformers (test dependencies); no weights are downloaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from unittest import mock

__all__ = [
    "REMOTE_PHI4MM_FORWARD_PARAMETERS",
    "build_tiny_model",
    "forward_tiny_model",
    "native_phi4mm_inputs",
]


def _phi4mm() -> Any:
    import transformers

    config = transformers.Phi4MultimodalConfig(
        vocab_size=200_064,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        original_max_position_embeddings=4096,
        audio_config={
            "hidden_size": 32,
            "intermediate_size": 32,
            "num_blocks": 1,
            "num_attention_heads": 2,
            # Both must equal hidden_size, or the conv stack fails to build.
            "ext_pw_out_channel": 32,
            "depthwise_separable_out_channel": 32,
            "nemo_conv_channels": 8,
            "input_size": 80,
            "time_reduction": 8,
            "bias_max_distance": 64,
        },
        # Always built even for audio; left at its default it costs ~430 M parameters.
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
            "crop_size": 28,
        },
    )
    return transformers.Phi4MultimodalForCausalLM(config)


def _gemma3n() -> Any:
    import transformers
    from transformers.models.gemma3n.configuration_gemma3n import Gemma3nVisionConfig

    config = transformers.Gemma3nConfig(
        text_config={
            "vocab_size": 262_400,
            "vocab_size_per_layer_input": 262_144,
            "hidden_size": 32,
            "hidden_size_per_layer_input": 4,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "laurel_rank": 4,
            "num_kv_shared_layers": 0,
            # At least the test sequence length, so the last token sees the audio.
            "sliding_window": 1024,
            "max_position_embeddings": 4096,
        },
        audio_config={
            "input_feat_size": 128,
            "hidden_size": 32,
            "conf_num_attention_heads": 2,
            "conf_num_hidden_layers": 1,
            "sscp_conv_channel_size": [8, 4],
        },
        vision_config={"hidden_size": 16},
    )

    class VisionStub(transformers.PreTrainedModel):  # type: ignore[no-untyped-call]
        config_class = Gemma3nVisionConfig

        def forward(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
            raise AssertionError("the vision tower is a stub")

    original = transformers.AutoModel.from_config

    def from_config(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        # The real timm vision tower cannot be imported against the CPU torch build.
        if isinstance(cfg, Gemma3nVisionConfig):
            return VisionStub(cfg)
        return original(cfg, *args, **kwargs)  # type: ignore[no-untyped-call]

    with mock.patch.object(transformers.AutoModel, "from_config", side_effect=from_config):
        return transformers.Gemma3nForConditionalGeneration(config)


def _qwen2audio() -> Any:
    import transformers

    config = transformers.Qwen2AudioConfig(
        audio_config={
            "d_model": 16,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 32,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
        },
        text_config={
            "vocab_size": 151_936,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
        },
        audio_token_index=151_646,
    )
    return transformers.Qwen2AudioForConditionalGeneration(config)


_BUILDERS = {"phi4mm": _phi4mm, "gemma3n": _gemma3n, "qwen2audio": _qwen2audio}


def build_tiny_model(family: str, *, seed: int = 0) -> Any:
    """A tiny random model of ``family`` in eval mode."""
    import torch

    torch.manual_seed(seed)
    try:
        builder = _BUILDERS[family]
    except KeyError:
        raise ValueError(f"no tiny model for {family!r}; one of {sorted(_BUILDERS)}") from None
    return builder().eval()


#: The parameters of ``Phi4MMForCausalLM.forward`` in the pinned remote
#: ``modeling_phi4mm.py`` (``93f923e1``), restated since that model is not in transformers.
#: It takes no ``**kwargs``: any other name is a ``TypeError`` there.
REMOTE_PHI4MM_FORWARD_PARAMETERS: frozenset[str] = frozenset(
    {
        "input_ids",
        "attention_mask",
        "position_ids",
        "past_key_values",
        "inputs_embeds",
        "input_image_embeds",
        "image_sizes",
        "image_attention_mask",
        "input_audio_embeds",
        "audio_embed_sizes",
        "audio_attention_mask",
        "input_mode",
        "labels",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "num_logits_to_keep",
    }
)


def native_phi4mm_inputs(model_inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Phi-4 MM remote-code inputs under the names of transformers' native port.

    The remote-code ``Phi4MMForCausalLM`` is not part of transformers, so the tiny model
    is its native port, ``Phi4MultimodalForCausalLM``: the same network, whose forward
    takes ``audio_input_features`` for ``input_audio_embeds`` and has no ``input_mode``.
    It accepts any other keyword silently, so remote names passed as they are would
    drop the audio without an error. Native inputs pass through unchanged.
    """
    inputs = dict(model_inputs)
    if "input_audio_embeds" in inputs:
        inputs["audio_input_features"] = inputs.pop("input_audio_embeds")
    inputs.pop("input_mode", None)
    return inputs


def forward_tiny_model(
    family: str, model: Any, input_ids: Sequence[int], model_inputs: Mapping[str, Any]
) -> Any:
    """Run one forward pass on our ids and collated inputs; returns the model output.

    Phi-4 MM remote-code inputs go to the native port (:func:`native_phi4mm_inputs`).
    """
    import numpy as np
    import torch

    if family == "phi4mm":
        model_inputs = native_phi4mm_inputs(model_inputs)
    tensors = {name: torch.from_numpy(np.array(value)) for name, value in model_inputs.items()}
    ids = torch.tensor([list(input_ids)], dtype=torch.long)
    extra: dict[str, Any] = {"attention_mask": torch.ones_like(ids)}
    if family != "qwen2audio":
        extra["logits_to_keep"] = 1  # the 200k-262k vocabulary dominates otherwise
    with torch.no_grad():
        return model(input_ids=ids, **tensors, **extra)
