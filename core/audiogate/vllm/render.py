"""vLLM's render answer: a ``GenerateRequest`` built from a prepared request.

``POST /v1/chat/completions/render`` takes a ``ChatCompletionRequest`` and answers what
vLLM's token-in service (``POST /inference/v1/generate``) consumes: the expanded token
ids, the resolved ``sampling_params`` and, for audio, ``features`` (per-clip
``mm_hashes``, ``mm_placeholders`` and base64 msgpack ``kwargs_data``).

The request fields that shape sampling are resolved as vLLM resolves them (the request's
value, else the OpenAI default; ``max_tokens`` defaults to the context length minus the
prompt). Fields audiogate does not resolve (tools, structured outputs, beam search, logit
bias, a custom template, ...) are refused, never dropped: a consumer would otherwise
sample differently from what the client asked for.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import math
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

from audiogate.errors import RequestError
from audiogate.host import FamilyHost
from audiogate.request import PreparedRequest
from audiogate.vllm.adapter import VllmFamily
from audiogate.vllm.hashes import mm_hash
from audiogate.vllm.msgpack import packb
from audiogate.vllm.tensors import FloatDtype, encode_tensor

__all__ = [
    "ItemCache",
    "ItemNotCached",
    "MMPayload",
    "RenderCall",
    "RenderError",
    "RenderKind",
    "answer_fragments",
    "build_generate_request",
    "check_disjoint",
    "encode_item",
    "feature_items",
    "parse_render_call",
    "resolve_sampling_params",
    "vllm_messages",
]

MMPayload = Literal["tensors", "none"]
RenderKind = Literal["chat", "completion"]

#: The OpenAI defaults vLLM applies when neither the request nor the model sets a value.
_DEFAULTS: Final[Mapping[str, float | int]] = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}
#: vLLM's floor for a positive temperature, and below what it samples greedily.
_MIN_TEMPERATURE: Final = 0.01
_GREEDY: Final = 1e-5
_FLOATS: Final = frozenset(
    {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"}
)
_INTS: Final = frozenset(
    {"top_k", "seed", "min_tokens", "n", "max_tokens", "max_completion_tokens"}
)
_BOOLS: Final = frozenset(
    {
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "stream",
        "add_generation_prompt",
        "echo",
    }
)
#: Accepted and without effect on the render (OpenAI bookkeeping).
_INERT: Final = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls"})
#: What vLLM would resolve into the prompt or the sampling and audiogate does not.
_REFUSED: Final = frozenset(
    {
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "response_format",
        "structured_outputs",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "logit_bias",
        "use_beam_search",
        "length_penalty",
        "bad_words",
        "allowed_token_ids",
        "chat_template",
        "chat_template_kwargs",
        "continue_final_message",
        "documents",
        "prompt_logprobs",
        "logprob_token_ids",
        "vllm_xargs",
        "kv_transfer_params",
        "ec_transfer_params",
        "truncate_prompt_tokens",
        "return_token_offsets",
        "thinking_token_budget",
        "repetition_detection",
        "mm_processor_kwargs",
        "media_io_kwargs",
        "suffix",
        "prompt_embeds",
        "reasoning_effort",
        "include_reasoning",
        "watermarking",
        "stream_interval",
        "routed_experts_prompt_start",
        "best_of",
    }
)
_COMMON: Final = frozenset(
    _FLOATS
    | _INTS
    | _BOOLS
    | {"model", "stop", "stop_token_ids", "logprobs", "top_logprobs", "stream_options"}
    | {"mm_payload"}
    | {"cache_salt", "priority", "request_id"}
)
_CHAT_ONLY: Final = frozenset({"messages"})
_COMPLETION_ONLY: Final = frozenset({"prompt"})


class RenderError(RequestError):
    """A render request vLLM's protocol would refuse, or one audiogate does not resolve.

    :param param: the request field at fault (vLLM's ``param``), or ``None``.
    """

    code = "invalid_request"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@attrs.frozen(kw_only=True)
class RenderCall:
    """One render request: what to prepare and how the answer is resolved."""

    kind: RenderKind
    model: str | None
    messages: list[Any] | None
    prompt: str | None
    fields: Mapping[str, Any]
    mm_payload: MMPayload
    stream: bool
    stream_options: Mapping[str, Any] | None
    cache_salt: str | None
    priority: int
    request_id: str | None


def _check_type(name: str, value: Any) -> None:
    if value is None:
        return
    if name in _FLOATS:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
        kind = "a finite number"
    elif name in _INTS:
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif name in _BOOLS:
        ok, kind = isinstance(value, bool), "true or false"
    else:
        return
    if not ok:
        raise RenderError(f"'{name}' must be {kind}, got {value!r}", param=name)


def _check_ranges(fields: Mapping[str, Any]) -> None:
    rules: dict[str, tuple[Any, str]] = {
        "temperature": (lambda v: v >= 0, "at least 0"),
        "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
        "min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
        "presence_penalty": (lambda v: -2 <= v <= 2, "in [-2, 2]"),
        "frequency_penalty": (lambda v: -2 <= v <= 2, "in [-2, 2]"),
        "repetition_penalty": (lambda v: v > 0, "greater than 0"),
        "top_k": (lambda v: v >= -1, "at least -1 (or 0: all tokens)"),
        "n": (lambda v: v >= 1, "at least 1"),
        "max_tokens": (lambda v: v >= 1, "at least 1"),
        "max_completion_tokens": (lambda v: v >= 1, "at least 1"),
        "min_tokens": (lambda v: v >= 0, "at least 0"),
        "top_logprobs": (lambda v: v >= 0, "at least 0"),
        "seed": (lambda v: -(2**63) <= v < 2**64, "a 64-bit integer"),
    }
    for name, (ok, text) in rules.items():
        value = fields.get(name)
        if value is not None and not ok(value):
            raise RenderError(f"'{name}' must be {text}, got {value!r}", param=name)


def _stop(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise RenderError("'stop' must be a string or a list of strings", param="stop")


def parse_render_call(document: Any, kind: RenderKind) -> RenderCall:
    """The render request in ``document`` (a parsed JSON body).

    :raises RenderError: not an object, a field of the wrong type or range, a field
        audiogate does not resolve, or (completions) a prompt that is not one string.
    """
    if not isinstance(document, dict):
        raise RenderError(f"the request body must be a JSON object, got {type(document).__name__}")
    allowed = _COMMON | (_CHAT_ONLY if kind == "chat" else _COMPLETION_ONLY)
    for name, value in document.items():
        if name in _REFUSED and value not in (None, False, [], {}):
            raise RenderError(
                f"'{name}' is not supported by audiogate's render endpoint; send this "
                "request to vLLM's own renderer",
                param=name,
            )
        if name not in allowed and name not in _INERT and name not in _REFUSED:
            raise RenderError(f"unknown request field '{name}'", param=name)
        _check_type(name, value)
    _check_ranges(document)
    logprobs = document.get("logprobs")
    # Chat asks for logprobs with a flag (and ``top_logprobs``), completions with a count.
    if kind == "chat" and logprobs is not None and not isinstance(logprobs, bool):
        raise RenderError(f"'logprobs' must be true or false, got {logprobs!r}", param="logprobs")
    if (
        kind == "completion"
        and logprobs is not None
        and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0)
    ):
        raise RenderError(f"'logprobs' must be a count, got {logprobs!r}", param="logprobs")
    if document.get("add_generation_prompt") is False:
        raise RenderError(
            "'add_generation_prompt': false is not supported by audiogate's render endpoint",
            param="add_generation_prompt",
        )
    if document.get("echo"):
        raise RenderError("'echo' is not supported by audiogate's render endpoint", param="echo")
    model = document.get("model")
    if model is not None and not isinstance(model, str):
        raise RenderError(f"'model' must be a string, got {type(model).__name__}", param="model")
    messages = prompt = None
    if kind == "chat":
        messages = document.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RenderError("'messages' must be a non-empty list", param="messages")
    else:
        prompt = document.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise RenderError(
                "'prompt' must be one non-empty string (token-id and batched prompts are "
                "not supported by audiogate's render endpoint)",
                param="prompt",
            )
    mm_payload = document.get("mm_payload", "tensors")
    if mm_payload not in ("tensors", "none"):
        raise RenderError(
            f"'mm_payload' must be 'tensors' or 'none', got {mm_payload!r}", param="mm_payload"
        )
    stream_options = document.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise RenderError("'stream_options' must be an object", param="stream_options")
    cache_salt = document.get("cache_salt")
    if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt):
        raise RenderError("'cache_salt' must be a non-empty string", param="cache_salt")
    priority = document.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise RenderError(f"'priority' must be an integer, got {priority!r}", param="priority")
    request_id = document.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise RenderError("'request_id' must be a string", param="request_id")
    stop_token_ids = document.get("stop_token_ids")
    if stop_token_ids is not None and not (
        isinstance(stop_token_ids, list)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in stop_token_ids)
    ):
        raise RenderError("'stop_token_ids' must be a list of token ids", param="stop_token_ids")
    top_logprobs = document.get("top_logprobs")
    if top_logprobs is not None and (
        isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int)
    ):
        raise RenderError("'top_logprobs' must be an integer", param="top_logprobs")
    _stop(document.get("stop"))
    return RenderCall(
        kind=kind,
        model=model,
        messages=messages,
        prompt=prompt,
        fields={k: v for k, v in document.items() if k not in ("messages", "prompt")},
        mm_payload=mm_payload,
        stream=bool(document.get("stream")),
        stream_options=stream_options,
        cache_salt=cache_salt,
        priority=priority,
        request_id=request_id,
    )


def resolve_sampling_params(
    call: RenderCall, *, prompt_tokens: int, max_model_len: int
) -> dict[str, Any]:
    """``SamplingParams`` as vLLM's render serializes them for ``call``.

    :raises RenderError: the prompt alone is longer than ``max_model_len``.
    """
    fields = call.fields
    if prompt_tokens > max_model_len:
        raise RenderError(
            f"Input length ({prompt_tokens}) exceeds model's maximum context length "
            f"({max_model_len}).",
        )
    requested = fields.get("max_completion_tokens")
    if requested is None:
        # A completions request's max_tokens defaults to 16 (OpenAI's), a chat's to the room.
        requested = fields.get("max_tokens", 16 if call.kind == "completion" else None)
    room = max_model_len - prompt_tokens
    max_tokens = room if requested is None else min(room, requested)
    resolved: dict[str, Any] = {
        name: fields[name] if fields.get(name) is not None else default
        for name, default in _DEFAULTS.items()
    }
    temperature = float(resolved["temperature"])
    if 0 < temperature < _MIN_TEMPERATURE:
        temperature = _MIN_TEMPERATURE  # vLLM raises tiny temperatures to this
    if temperature < _GREEDY:
        # Greedy: vLLM resets the filters.
        resolved.update(top_p=1.0, top_k=0, min_p=0.0)
    if call.kind == "chat":
        logprobs = fields.get("top_logprobs") if fields.get("logprobs") else None
    else:
        logprobs = fields.get("logprobs")
    stop = list(dict.fromkeys(_stop(fields.get("stop")) or []))
    include_stop = bool(fields.get("include_stop_str_in_output", False))
    # vLLM serializes SamplingParams with msgspec's omit_defaults, which drops a value
    # that *is* its default object: small integers, booleans and None disappear, floats
    # (fresh objects) never do. Reproduced field by field, in the struct's order.
    params: dict[str, Any] = {}
    if (fields.get("n") or 1) != 1:
        params["n"] = fields["n"]
    params["presence_penalty"] = float(resolved["presence_penalty"])
    params["frequency_penalty"] = float(resolved["frequency_penalty"])
    params["repetition_penalty"] = float(resolved["repetition_penalty"])
    params["temperature"] = temperature
    params["top_p"] = float(resolved["top_p"])
    if int(resolved["top_k"]) != 0:
        params["top_k"] = int(resolved["top_k"])
    params["min_p"] = float(resolved["min_p"])
    seed = fields.get("seed")
    if seed is not None and seed != -1:
        params["seed"] = seed
    params["stop"] = stop
    params["stop_token_ids"] = list(dict.fromkeys(fields.get("stop_token_ids") or []))
    if fields.get("ignore_eos"):
        params["ignore_eos"] = True
    if max_tokens != 16:
        params["max_tokens"] = max_tokens
    if fields.get("min_tokens"):
        params["min_tokens"] = int(fields["min_tokens"])
    if logprobs is not None:
        params["logprobs"] = logprobs
    if fields.get("skip_special_tokens") is False:
        params["skip_special_tokens"] = False
    if fields.get("spaces_between_special_tokens") is False:
        params["spaces_between_special_tokens"] = False
    if include_stop:
        params["include_stop_str_in_output"] = True
    params["output_kind"] = 1 if call.stream else 2  # DELTA when streaming, else FINAL_ONLY
    params["skip_clone"] = True
    if stop and not include_stop and max(len(s) for s in stop) > 1:
        params["output_text_buffer_length"] = max(len(s) for s in stop) - 1
    params["bad_words"] = []
    params["skip_reading_prefix_cache"] = False
    return params


def feature_items(prepared: PreparedRequest, adapter: VllmFamily) -> list[dict[str, Any]]:
    """Per clip, its tensors under vLLM's keys (numpy arrays)."""
    return [dict(adapter.items(prepared, index)) for index in range(len(prepared.audio_spans))]


_BATCHED: Final[list[Any]] = ["batched", {"keep_on_cpu": False}]


def encode_item(
    tensors: Mapping[str, Any], dtype: FloatDtype, adapter: VllmFamily | None = None
) -> bytes:
    """One ``MultiModalKwargsItem`` as vLLM's msgpack: ``{key: {"data": tensor,
    "field": layout}}``, the layout the ``adapter``'s (batched, not kept on the CPU,
    without one)."""
    item: dict[str, Any] = {}
    # vLLM's items come out with their keys sorted.
    for key, array in sorted(tensors.items()):
        field = adapter.field(key, array) if adapter is not None else _BATCHED
        # vLLM casts the features to the model dtype, not what it keeps on the CPU
        # (masks and sizes: Qwen3-Omni's float32 frame mask stays float32).
        cast: FloatDtype = "float32" if field[1].get("keep_on_cpu") else dtype
        item[key] = {"data": encode_tensor(array, cast), "field": field}
    return packb(item)


def vllm_messages(messages: list[Any], adapter: VllmFamily) -> list[Any]:
    """``messages`` as vLLM hands them to ``adapter``'s chat template.

    For a template that reads a string (``content_format="string"``), vLLM rewrites a
    message's parts: every clip first, each followed by a newline, then the text parts
    joined by newlines. The clips stay parts, for the family to place.
    """
    if adapter.content_format == "openai":
        return messages
    rewritten: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            rewritten.append(message)
            continue
        texts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        media = [p for p in content if not (isinstance(p, dict) and p.get("type") == "text")]
        parts: list[Any] = []
        for index, part in enumerate(media):
            if index:
                parts.append({"type": "text", "text": "\n"})
            parts.append(part)
        if texts:
            parts.append({"type": "text", "text": ("\n" if media else "") + "\n".join(texts)})
        rewritten.append({**message, "content": parts})
    return rewritten


class _Base64(bytes):
    """An item's base64 text, kept as bytes until the answer is written (a str for
    :func:`build_generate_request`'s callers that read the dict)."""


def _base64(data: bytes, raw: bool) -> Any:
    return _text(base64.b64encode(data), raw)


def _text(encoded: bytes, raw: bool) -> Any:
    return _Base64(encoded) if raw else encoded.decode("ascii")


def _encode_clip(
    prepared: PreparedRequest, index: int, adapter: VllmFamily, dtype: FloatDtype
) -> tuple[bytes, bytes | None]:
    """Clip ``index``'s item and its metadata item (or ``None``), as base64."""
    tensors = dict(adapter.items(prepared, index))
    # Tensors vLLM keeps on the CPU (sizes, counts) travel twice: in the item and in its
    # metadata item, which the generate side reads without the features.
    on_cpu = {k: v for k, v in tensors.items() if _keep_on_cpu(adapter, k, v)}
    item = base64.b64encode(encode_item(tensors, dtype, adapter))
    meta = base64.b64encode(encode_item(on_cpu, dtype, adapter)) if on_cpu else None
    return item, meta


class ItemNotCached(LookupError):
    """An item that :func:`build_generate_request` was asked not to encode is not in its
    cache."""


def _not_cached() -> tuple[bytes, bytes | None]:
    raise ItemNotCached


class ItemCache:
    """Encoded items (base64 of their msgpack, and of their metadata item) by
    ``mm_hash``, the least recently used dropped first past ``max_bytes``.

    A hash covers the clip's source bytes and everything that shapes its item (family,
    versions, policy, dtype, layout: :func:`audiogate.vllm.mm_hash`), so a hit is the
    same item byte for byte. A conversation resends its clips every turn: each is
    encoded once.
    """

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[bytes, bytes | None]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(
        self, key: str, encode: Callable[[], tuple[bytes, bytes | None]]
    ) -> tuple[bytes, bytes | None]:
        """The entry under ``key``, encoded by ``encode`` (and kept) when absent."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        value = encode()
        size = len(value[0]) + len(value[1] or b"")
        if size > self.max_bytes:
            return value
        with self._lock:
            if key not in self._items:
                self._items[key] = value
                self._bytes += size
                while self._bytes > self.max_bytes:
                    _, (item, meta) = self._items.popitem(last=False)
                    self._bytes -= len(item) + len(meta or b"")
        return value

    @property
    def nbytes(self) -> int:
        """The bytes held."""
        return self._bytes


def answer_fragments(answer: dict[str, Any]) -> list[bytes]:
    """``answer`` (from :func:`build_generate_request` with ``raw_items``) as the bytes
    of its JSON, in pieces: the items' base64 text goes out as it is, never copied into
    or escaped by the JSON encoder (it is most of an answer's bytes)."""
    marker = f"audiogate-item-{uuid.uuid4().hex}"
    pieces: list[bytes] = []

    def swap(value: Any) -> Any:
        if isinstance(value, _Base64):
            pieces.append(bytes(value))
            return marker
        return value

    features = answer.get("features")
    if features is not None:
        features = dict(features)
        for name in ("kwargs_data", "mm_metadata"):
            group = features.get(name)
            if group is not None:
                features[name] = {m: [swap(v) for v in items] for m, items in group.items()}
    text = json.dumps({**answer, "features": features}, separators=(",", ":")).encode()
    # The marker is random per answer: no client-chosen text (a stop string, a request
    # id) can spell it.
    parts = text.split(b'"' + marker.encode() + b'"')
    fragments = [parts[0]]
    for raw, after in zip(pieces, parts[1:], strict=True):
        fragments += [b'"', raw, b'"', after]
    return fragments


def _keep_on_cpu(adapter: VllmFamily, key: str, array: Any) -> bool:
    _, options = adapter.field(key, array)
    return bool(options.get("keep_on_cpu"))


def check_disjoint(ranges: list[tuple[int, int]], family: str) -> None:
    """Refuse placeholder ranges that overlap.

    :raises RenderError: two ranges share a position.
    """
    # vLLM's generate side refuses overlapping ranges, and a range cannot be shortened:
    # every position of it is an embedding position there. Gemma 3n's ranges include the
    # newline tokens around a block, so two clips with nothing between them share one.
    spans = sorted((offset, offset + length) for offset, length in ranges)
    for (_, end), (start, _) in itertools.pairwise(spans):
        if start < end:
            raise RenderError(
                f"two {family} audio clips are adjacent: vLLM's placeholder ranges of "
                "this family include the newline tokens around each clip, and those of "
                "adjacent clips overlap (vLLM refuses them too); put text between the clips",
                param="messages",
            )


def build_generate_request(
    prepared: PreparedRequest,
    call: RenderCall,
    *,
    adapter: VllmFamily | None,
    host: FamilyHost,
    dtype: FloatDtype,
    max_model_len: int,
    served_model: str,
    raw_items: bool = False,
    item_cache: ItemCache | None = None,
    encode_missing: bool = True,
) -> dict[str, Any]:
    """The ``GenerateRequest`` JSON (a dict) for ``prepared``; with ``raw_items`` the
    items' base64 text stays bytes, for :func:`answer_fragments`; with ``item_cache``
    an item already encoded under its ``mm_hash`` is not encoded again.

    :param encode_missing: ``False``: an item not in ``item_cache`` raises
        :class:`ItemNotCached` instead of being encoded (the answer is cheap, or that).
    :raises RenderError: the prompt is empty or longer than the context.
    """
    token_ids = list(prepared.input_ids)
    if not token_ids:
        raise RenderError("No token_ids rendered")
    sampling = resolve_sampling_params(
        call, prompt_tokens=len(token_ids), max_model_len=max_model_len
    )
    features: dict[str, Any] | None = None
    if prepared.audio_spans:
        if adapter is None:
            raise RenderError(f"vLLM does not serve audio for family {prepared.family!r}")
        clips = prepared.batch.clips if prepared.batch is not None else ()
        if adapter.max_clips is not None and len(prepared.audio_spans) > adapter.max_clips:
            # vLLM's model for the family takes no more (its processor refuses them too).
            raise RenderError(
                f"At most {adapter.max_clips} audio(s) may be provided in one prompt.",
                param="audio",
            )
        hashes = [mm_hash(host, prepared.policy, clip, adapter, dtype) for clip in clips]
        ranges = [adapter.placeholder(prepared, index) for index in range(len(hashes))]
        check_disjoint(ranges, prepared.family)
        kwargs: list[Any] | None = None
        metadata: list[Any] = []
        if call.mm_payload == "tensors":
            encoded = [
                item_cache.get(
                    hashes[index],
                    functools.partial(_encode_clip, prepared, index, adapter, dtype)
                    if encode_missing
                    else _not_cached,
                )
                if item_cache is not None
                else _encode_clip(prepared, index, adapter, dtype)
                for index in range(len(hashes))
            ]
            kwargs = [_text(item, raw_items) for item, _ in encoded]
            metadata = [None if meta is None else _text(meta, raw_items) for _, meta in encoded]
        modality = adapter.modality
        features = {
            "mm_hashes": {modality: hashes},
            "mm_placeholders": {
                modality: [{"offset": offset, "length": length} for offset, length in ranges]
            },
            "kwargs_data": None if kwargs is None else {modality: kwargs},
            "mm_metadata": {modality: metadata} if any(metadata) else None,
        }
    prefix = "chatcmpl" if call.kind == "chat" else "cmpl"
    # 16 hex digits, as vLLM's own ids: the answer is no longer than vLLM's.
    request_id = f"{prefix}-{call.request_id or uuid.uuid4().hex[:16]}"
    return {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": None,
        "features": features,
        "content_parts": None,
        "sampling_params": sampling,
        "model": call.model if call.model is not None else served_model,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "return_token_ids": None,
        "output_mode": "tokens",
        "stream": call.stream,
        "stream_options": dict(call.stream_options)
        if call.stream and call.stream_options
        else None,
        "cache_salt": call.cache_salt,
        "priority": call.priority,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
    }
