"""Tiny randomly initialised transformers models that consume audiogate's output.

Each keeps the family's real special-token ids and vocabulary size, and shrinks
everything else (the configs below), so a test can run the real model code's
placeholder checks on our ``input_ids`` and collated features in milliseconds. Needs
torch and transformers (test dependencies); no weights are downloaded.

Phi-4 MM, Gemma 3n and Qwen2-Audio are built here. Any other installed family brings its
own: a module ``tiny_model`` in its package (the package of its ``audiogate.families``
entry point, e.g. ``audiogate_voxtral.tiny_model``) with

* ``build() -> model``: the tiny model (seeded and put in eval mode here);
* optionally ``LOGITS_TO_KEEP: bool`` (default ``False``): the forward takes
  ``logits_to_keep=1`` (worth it for a large vocabulary);
* optionally ``forward_inputs(model_inputs) -> dict``: the collated inputs under the
  names the model's forward takes, where they differ.

So a shipped family's tiny model is its folder's business, not this module's.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType
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
#: Whether the forward takes ``logits_to_keep`` (Qwen2-Audio's does not).
_LOGITS_TO_KEEP = {"phi4mm": True, "gemma3n": True, "qwen2audio": False}


def _family_module(family: str) -> ModuleType | None:
    """The ``tiny_model`` module of the installed plugin registering ``family``, if any."""
    from importlib.metadata import entry_points

    for entry in entry_points(group="audiogate.families", name=family):
        package = entry.module.partition(".")[0]
        name = f"{package}.tiny_model"
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
    return None


def build_tiny_model(family: str, *, seed: int = 0) -> Any:
    """A tiny random model of ``family`` in eval mode.

    :raises ValueError: neither this module nor the family's plugin has one.
    """
    builder = _BUILDERS.get(family)
    if builder is None:
        module = _family_module(family)
        builder = getattr(module, "build", None)
    if builder is None:
        raise ValueError(
            f"no tiny model for {family!r}: one of {sorted(_BUILDERS)}, or a family whose "
            "package has a tiny_model module with build()"
        )
    import torch

    torch.manual_seed(seed)
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

    module = None if family in _BUILDERS else _family_module(family)
    if family == "phi4mm":
        model_inputs = native_phi4mm_inputs(model_inputs)
    elif module is not None and hasattr(module, "forward_inputs"):
        model_inputs = module.forward_inputs(model_inputs)
    tensors = {name: torch.from_numpy(np.array(value)) for name, value in model_inputs.items()}
    ids = torch.tensor([list(input_ids)], dtype=torch.long)
    extra: dict[str, Any] = {"attention_mask": torch.ones_like(ids)}
    keep = _LOGITS_TO_KEEP.get(family, bool(getattr(module, "LOGITS_TO_KEEP", False)))
    if keep:
        extra["logits_to_keep"] = 1  # the 200k-262k vocabulary dominates otherwise
    with torch.no_grad():
        return model(input_ids=ids, **tensors, **extra)
