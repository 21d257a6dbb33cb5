"""vLLM in process: a prepared request as the input vLLM's engine takes without running
a processor (``vllm.inputs.mm_input``: token ids, multimodal kwargs, hashes and
placeholder ranges), for the engine's ``add_request`` (``LLM.llm_engine``, ``AsyncLLM``).
``LLM.generate`` renders its prompts itself and would take such an input for a plain
token prompt, dropping its multimodal kwargs.

The kwargs are built exactly as the render endpoint sends them (vLLM's msgpack item,
in the model dtype) and decoded by vLLM's own deserializer, so an in-process engine sees
what a ``/inference/v1/generate`` consumer of audiogate's render would see. Needs vLLM
installed in the same environment (docs/vllm.md); checked against
:data:`~audiogate.vllm.adapter.SUPPORTED_VLLM`.
"""

from __future__ import annotations

import base64
from typing import Any

from audiogate.extras import require_module
from audiogate.host import FamilyHost
from audiogate.request import PreparedRequest
from audiogate.vllm.adapter import check_vllm_version, vllm_family
from audiogate.vllm.hashes import mm_hash
from audiogate.vllm.render import RenderError, check_disjoint, encode_item, feature_items
from audiogate.vllm.tensors import FloatDtype

__all__ = ["engine_input"]

_HINT = "install vLLM in this environment (docs/vllm.md)"


def engine_input(
    prepared: PreparedRequest,
    host: FamilyHost,
    *,
    dtype: FloatDtype = "bfloat16",
    cache_salt: str | None = None,
) -> Any:
    """``prepared`` as vLLM's already-processed engine input (a ``MultiModalInput``
    dict; a ``TokensPrompt`` for a text-only request).

    :param host: the gate's plugin host (``gate.host``; the hashes name its families).
    :param dtype: the model's dtype (the features travel in it).
    :raises RenderError: a family vLLM does not serve, or overlapping placeholders.
    :raises VllmVersionError: the installed vLLM is outside the supported range.
    :raises MissingExtraError: vLLM is not installed.
    """
    vllm = require_module("vllm", purpose="building vLLM engine inputs", hint=_HINT)
    check_vllm_version(str(vllm.__version__))
    inputs = require_module("vllm.inputs", purpose="building vLLM engine inputs", hint=_HINT)
    token_ids = list(prepared.input_ids)
    if not prepared.audio_spans:
        return inputs.TokensPrompt(prompt_token_ids=token_ids)
    adapter = vllm_family(prepared.family)
    if adapter is None:
        raise RenderError(f"vLLM does not serve audio for family {prepared.family!r}")
    serde = require_module(
        "vllm.entrypoints.scale_out.token_in_token_out.mm_serde",
        purpose="building vLLM engine inputs",
        hint=_HINT,
    )
    multimodal = require_module(
        "vllm.multimodal.inputs", purpose="building vLLM engine inputs", hint=_HINT
    )
    clips = prepared.batch.clips if prepared.batch is not None else ()
    hashes = [mm_hash(host, prepared.policy, clip, adapter, dtype) for clip in clips]
    ranges = [adapter.placeholder(prepared, index) for index in range(len(hashes))]
    check_disjoint(ranges, prepared.family)
    items = [
        serde.decode_mm_kwargs_item(base64.b64encode(encode_item(tensors, dtype, adapter)).decode())
        for tensors in feature_items(prepared, adapter)
    ]
    modality = adapter.modality
    return inputs.mm_input(
        prompt_token_ids=token_ids,
        mm_kwargs=multimodal.MultiModalKwargsItems({modality: items}),
        mm_hashes={modality: hashes},
        mm_placeholders={
            modality: [multimodal.PlaceholderRange(offset=o, length=n) for o, n in ranges]
        },
        cache_salt=cache_salt,
    )
