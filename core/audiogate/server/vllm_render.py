"""vLLM's render API on ``audiogate serve``: ``POST /v1/chat/completions/render`` and
``POST /v1/completions/render`` (a text prompt) answer vLLM's ``GenerateRequest``
(:mod:`audiogate.vllm.render`), for a family vLLM serves (:mod:`audiogate.vllm.adapter`).

The body is read under the same budgets as ``/v1/audio/prepare``, the request runs on
the same worker and is counted once; errors take vLLM's shape,
``{"error": {"message", "type", "param", "code"}}``, with audiogate's status codes (a
refused clip is a 400, an overloaded worker a 429, a client that left gets nothing).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Final

import attrs
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from audiogate.cancel import CancelToken
from audiogate.chat.prompt_text import check_prompt_text
from audiogate.errors import (
    AudioGateError,
    PreprocessCancelled,
    WorkerUnavailableError,
    clear_frames,
)
from audiogate.request import PreparedRequest
from audiogate.server.auth import owner_of
from audiogate.server.errors import STATUS_CLIENT_CLOSED, status_for
from audiogate.server.requests import parse_body
from audiogate.server.responses import FragmentsResponse
from audiogate.server.routes import AudioServer, ClientGone, RequestTicket
from audiogate.vllm.adapter import VllmFamily, vllm_families, vllm_family
from audiogate.vllm.render import (
    ItemCache,
    ItemNotCached,
    RenderCall,
    RenderError,
    RenderKind,
    answer_fragments,
    build_generate_request,
    parse_render_call,
    vllm_messages,
)
from audiogate.vllm.tensors import FLOAT_DTYPES, FloatDtype

__all__ = [
    "CHAT_RENDER_PATH",
    "COMPLETION_RENDER_PATH",
    "VllmRenderConfig",
    "VllmRenderRoutes",
    "render_config",
]

CHAT_RENDER_PATH: Final = "/v1/chat/completions/render"
COMPLETION_RENDER_PATH: Final = "/v1/completions/render"
#: transformers' default context of both text decoders when a config does not say.
DEFAULT_MAX_MODEL_LEN: Final = 32_768
_TYPES: Final = {400: "BadRequestError", 401: "UnauthorizedError", 404: "NotFoundError",
                 408: "RequestTimeout", 409: "ConflictError", 410: "GoneError",
                 413: "RequestEntityTooLarge", 429: "TooManyRequests",
                 500: "InternalServerError", 501: "NotImplementedError",
                 503: "ServiceUnavailable"}  # fmt: skip


@attrs.frozen(kw_only=True)
class VllmRenderConfig:
    """What vLLM would take from the checkpoint to resolve a render.

    :param max_model_len: the context length ``max_tokens`` defaults against.
    :param dtype: the floating dtype features travel in.
    """

    max_model_len: int = attrs.field(
        default=DEFAULT_MAX_MODEL_LEN, validator=attrs.validators.ge(1)
    )
    dtype: FloatDtype = attrs.field(
        default="bfloat16", validator=attrs.validators.in_(FLOAT_DTYPES)
    )


def _config_value(config: dict[str, Any], *names: str) -> Any:
    for section in (config.get("text_config"), config):
        if isinstance(section, dict):
            for name in names:
                if section.get(name) is not None:
                    return section[name]
    return None


def render_config(
    model_dir: str | os.PathLike[str] | None,
    *,
    max_model_len: int | None = None,
    dtype: FloatDtype | None = None,
) -> VllmRenderConfig:
    """The render settings of a checkpoint: ``max_position_embeddings`` (text config
    first, else the default of the family its architecture names) and ``torch_dtype`` /
    ``dtype`` from its ``config.json`` (float32 becomes bfloat16, as vLLM's ``auto`` does
    on CPU builds), else the defaults; explicit arguments win."""
    config: dict[str, Any] = {}
    if model_dir is not None and Path(model_dir, "config.json").is_file():
        loaded = json.loads(Path(model_dir, "config.json").read_text(encoding="utf-8"))
        config = loaded if isinstance(loaded, dict) else {}
    length = max_model_len or _config_value(config, "max_position_embeddings")
    if length is None:
        architectures = set(config.get("architectures") or ())
        for adapter in vllm_families().values():
            if architectures & set(adapter.architectures):
                length = adapter.context_length
                break
    declared = _config_value(config, "torch_dtype", "dtype")
    chosen = dtype or (declared if declared in ("bfloat16", "float16") else "bfloat16")
    return VllmRenderConfig(max_model_len=int(length or DEFAULT_MAX_MODEL_LEN), dtype=chosen)


#: Bodies up to this size with few JSON values (:func:`_parses_fast`) are parsed on the
#: event loop; others on the server's helper thread.
_INLINE_PARSE_BYTES: Final = 4 << 20
_INLINE_PARSE_SEPARATORS: Final = 1024
_SMALL_BODY_BYTES: Final = 256 * 1024


def _parses_fast(body: bytes) -> bool:
    """Whether ``body`` parses in well under a millisecond: small, or up to
    :data:`_INLINE_PARSE_BYTES` with fewer than :data:`_INLINE_PARSE_SEPARATORS` commas,
    colons and backslashes each (a render request is a few messages around base64 clips,
    whose long strings :func:`~audiogate.server.requests.parse_body` cuts out at memchr
    speed; many small values or escapes parse at 20 to 45 ms per MiB). Counted with
    ``bytes.find`` (memchr), stopping at the limit: 0.07 ms for a 1.28 MB clip's body."""
    if len(body) <= _SMALL_BODY_BYTES:
        return True
    if len(body) > _INLINE_PARSE_BYTES:
        return False
    for separator in (b",", b":", b"\\"):
        position = 0
        for _ in range(_INLINE_PARSE_SEPARATORS):
            position = body.find(separator, position) + 1
            if not position:
                break
        else:
            return False
    return True


def _error(status: int, message: str, *, param: str | None = None) -> Response:
    payload = {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "BadRequestError"),
            "param": param,
            "code": status,
        }
    }
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Response(body, status_code=status, media_type="application/json")


class VllmRenderRoutes:
    """The render handlers of one app, on its :class:`~audiogate.server.routes.AudioServer`."""

    def __init__(self, server: AudioServer, adapter: VllmFamily, config: VllmRenderConfig) -> None:
        self.server = server
        self.adapter = adapter
        self.config = config
        # Each clip's encoded item once per deployment: a conversation resends its clips
        # every turn, and an item is bf16 conversion, msgpack and base64 of ~1 MB.
        self.items = ItemCache()

    @classmethod
    def of(cls, server: AudioServer, config: VllmRenderConfig) -> VllmRenderRoutes | None:
        """The routes for ``server``'s family, or ``None`` where vLLM does not serve it."""
        adapter = vllm_family(server.family)
        return None if adapter is None else cls(server, adapter, config)

    async def chat(self, request: Request) -> Response:
        return await self._render(request, "chat")

    async def completion(self, request: Request) -> Response:
        return await self._render(request, "completion")

    async def _render(self, request: Request, kind: RenderKind) -> Response:
        server = self.server
        ticket = RequestTicket()
        hold = server.bodies.hold()
        response: Response
        try:
            response = await self._answer(request, kind, hold, ticket)
            server.close_ticket(ticket, None)
        except (ClientGone, ClientDisconnect, PreprocessCancelled) as gone:
            server.close_ticket(ticket, gone, cancelled=True)
            response = Response(status_code=STATUS_CLIENT_CLOSED)
            clear_frames(gone)
        except RenderError as error:
            server.close_ticket(ticket, error)
            status = 404 if error.param == "model" and "does not exist" in str(error) else 400
            response = _error(status, error.detail, param=error.param)
        except Exception as error:
            server.close_ticket(ticket, error)
            status = status_for(error)
            # Only audiogate's own errors say what went wrong; anything else is a bug
            # whose details belong in the log, not the answer.
            message = (
                str(error)
                if isinstance(error, AudioGateError)
                else "internal error preparing the request"
            )
            response = _error(status, message, param=getattr(error, "field", None))
            clear_frames(error)
        except asyncio.CancelledError:
            server.close_ticket(ticket, WorkerUnavailableError("the server is shutting down"))
            hold.release()
            raise
        except BaseException:
            server.close_ticket(ticket, None, cancelled=True)
            hold.release()
            raise
        if not isinstance(response, FragmentsResponse):
            hold.release()
        server.count_response(response.status_code)
        return response

    async def _answer(
        self, request: Request, kind: RenderKind, hold: Any, ticket: RequestTicket
    ) -> Response:
        server = self.server
        owner = owner_of(request, server.owners)
        body = await server.admit_body(request, hold, ticket)
        document = (
            parse_body(body) if _parses_fast(body) else await server.off_loop(parse_body, body)
        )
        del body
        call = parse_render_call(document, kind)
        del document
        if call.model is not None and call.model != server.served_model:
            raise RenderError(f"The model `{call.model}` does not exist.", param="model")
        if call.kind == "chat":
            token = CancelToken()
            messages = vllm_messages(call.messages or [], self.adapter)
            opened = ticket.request = server.gate.request(messages, cancel=token, owner=owner)
            prepared = await server.until_disconnect(request, opened.run_async(), token)
        else:
            prepared = await server.off_loop(self._tokenize, call.prompt)
        try:
            # Every item already encoded: the answer is a JSON head around them (about
            # 0.15 ms), written here rather than on the helper thread (two thread
            # wake-ups per request, which cost more at concurrency 4).
            fragments = self._encode(prepared, call, encode_missing=False)
        except ItemNotCached:
            fragments = await server.off_loop(self._encode, prepared, call)
        nbytes = sum(len(f) for f in fragments)
        await server.room_for_answer(request, hold, nbytes)
        return FragmentsResponse(
            fragments, on_sent=hold.release, stall_timeout_s=server.body_idle_timeout_s
        )

    def _tokenize(self, prompt: str) -> PreparedRequest:
        # A completions prompt is text only (the OpenAI completions API has no audio
        # parts): tokenized as vLLM does, with the tokenizer's special tokens added. A
        # prompt that spells an audio placeholder would need audio it cannot carry.
        gate = self.server.gate
        if gate.tokenizer is None:
            raise RenderError("the served model has no tokenizer", param="prompt")
        check_prompt_text(prompt, gate.max_prompt_text_bytes)
        ids = tuple(int(i) for i in gate.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        audio_ids = {
            int(value)
            for name, value in gate.policy.options.items()
            if name in ("audio_token_id", "audio_token_index") and isinstance(value, int)
        }
        if audio_ids.intersection(ids):
            raise RenderError(
                "the prompt contains an audio placeholder; send audio through "
                "/v1/chat/completions/render",
                param="prompt",
            )
        return PreparedRequest(
            family=gate.policy.family,
            policy=gate.policy,
            input_ids=ids,
            text=prompt,
            audio_spans=(),
            batch=None,
            features=(),
            masks=(),
            model_inputs={},
        )

    def _encode(
        self, prepared: PreparedRequest, call: RenderCall, *, encode_missing: bool = True
    ) -> list[bytes]:
        answer = build_generate_request(
            prepared,
            call,
            adapter=self.adapter,
            host=self.server.gate.host,
            dtype=self.config.dtype,
            max_model_len=self.config.max_model_len,
            served_model=self.server.served_model,
            raw_items=True,
            item_cache=self.items,
            encode_missing=encode_missing,
        )
        return answer_fragments(answer)
