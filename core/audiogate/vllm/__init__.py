"""audiogate as vLLM's audio renderer: vLLM's render protocol (``GenerateRequest`` with
msgpack features), its per-family names, hashes that cannot serve stale work, and the
inputs vLLM's engine takes in process (docs/vllm.md).

Version-specific details live in :mod:`audiogate.vllm.adapter`
(:data:`~audiogate.vllm.adapter.SUPPORTED_VLLM`). vLLM itself is never imported here
except by :mod:`audiogate.vllm.engine`'s helpers that build its objects.
"""

from __future__ import annotations

from audiogate.vllm.adapter import (
    BATCHED,
    ENTRY_POINT_GROUP,
    FLAT_CHUNKS,
    SUPPORTED_VLLM,
    TESTED_VLLM,
    FieldLayout,
    VllmFamily,
    VllmVersionError,
    batched_field,
    check_vllm_version,
    register_vllm_family,
    vllm_families,
    vllm_family,
)
from audiogate.vllm.hashes import HASH_FORMAT, mm_hash
from audiogate.vllm.render import (
    ItemCache,
    RenderCall,
    RenderError,
    build_generate_request,
    encode_item,
    feature_items,
    parse_render_call,
    resolve_sampling_params,
    vllm_messages,
)
from audiogate.vllm.tensors import FLOAT_DTYPES, FloatDtype, decode_tensor, encode_tensor

__all__ = [
    "BATCHED",
    "ENTRY_POINT_GROUP",
    "FLAT_CHUNKS",
    "FLOAT_DTYPES",
    "HASH_FORMAT",
    "SUPPORTED_VLLM",
    "TESTED_VLLM",
    "FieldLayout",
    "FloatDtype",
    "ItemCache",
    "RenderCall",
    "RenderError",
    "VllmFamily",
    "VllmVersionError",
    "batched_field",
    "build_generate_request",
    "check_vllm_version",
    "decode_tensor",
    "encode_item",
    "encode_tensor",
    "feature_items",
    "mm_hash",
    "parse_render_call",
    "register_vllm_family",
    "resolve_sampling_params",
    "vllm_families",
    "vllm_family",
    "vllm_messages",
]
