"""Calling the audiogate core from your own server: a chat endpoint with its own model loop.

A small Starlette app (FastAPI is Starlette underneath; audiogate already depends on
Starlette, so this example needs nothing extra). One :class:`~audiogate.api.AudioGate`
per loaded model prepares each request's audio on a bounded worker; the server's own
model loop batches the prepared requests and feeds ``input_ids`` and ``model_inputs``
to a model. Here the model is :class:`EchoAudioModel`, a stand-in that checks its inputs
the way a forward pass would and describes them. Swap in yours.

Run it (no weights needed; any bundled example checkpoint works)::

    python examples/embedding/chat_server.py examples/models/qwen2-audio-7b-instruct

and post an OpenAI-style chat request with ``input_audio`` parts to
``http://127.0.0.1:8000/v1/chat/completions``. See ``docs/embedding.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence

import attrs
import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from audiogate import create_host
from audiogate.api import AudioGate, PreparedRequest
from audiogate.errors import AudioGateError
from audiogate.metrics import AudioMetrics
from audiogate.server.errors import error_payload, status_for
from audiogate.worker import AudioWorker, WorkerLimits

__all__ = ["EchoAudioModel", "Generation", "ModelLoop", "create_app", "main"]


# --- the model side: yours -------------------------------------------------------------


@attrs.frozen
class Generation:
    """What the model produced for one request."""

    text: str
    prompt_tokens: int
    audio_positions: int


class EchoAudioModel:
    """A stand-in model. Like a real forward pass it takes a batch of requests, each with
    ``input_ids`` and the family's named feature arrays, and fails loudly when the prompt's
    audio positions do not match the features; it answers with what it was given.
    """

    def __init__(self) -> None:
        #: Sizes of the batches it was called with (the tests look).
        self.batch_sizes: list[int] = []

    def generate(self, requests: Sequence[PreparedRequest]) -> list[Generation]:
        """One "forward pass" over a batch of prepared requests."""
        self.batch_sizes.append(len(requests))
        return [self._one(request) for request in requests]

    def _one(self, request: PreparedRequest) -> Generation:
        positions = sum(stop - start for start, stop in request.audio_spans)
        clips = len(request.audio_spans)
        if request.batch is not None:
            # The invariant a multimodal model relies on: one audio position per feature
            # token, per clip, and every input batched one row per clip.
            if positions != request.batch.totals.tokens:
                raise RuntimeError(
                    f"{positions} audio positions for {request.batch.totals.tokens} tokens"
                )
            for name, array in request.model_inputs.items():
                if np.asarray(array).shape[0] != clips:
                    raise RuntimeError(f"{name} is not batched one row per clip")
        shapes = ", ".join(
            f"{name} {list(np.asarray(array).shape)}"
            for name, array in sorted(request.model_inputs.items())
        )
        text = (
            f"I heard {clips} clip(s) as {positions} audio positions in a "
            f"{len(request.input_ids)}-token prompt"
            + (f"; features: {shapes}" if shapes else "")
            + "."
        )
        return Generation(
            text=text, prompt_tokens=len(request.input_ids), audio_positions=positions
        )


class ModelLoop:
    """Your server's model loop: one task that batches whatever requests are waiting.

    Audio preparation runs on audiogate's worker threads; the model runs here, one batch
    at a time, off the event loop.

    :param model: anything with ``generate(requests) -> generations``.
    :param max_batch: most requests per forward pass.
    """

    def __init__(self, model: EchoAudioModel, *, max_batch: int = 8) -> None:
        self.model = model
        self.max_batch = max_batch
        self._queue: asyncio.Queue[tuple[PreparedRequest, asyncio.Future[Generation]]] = (
            asyncio.Queue()
        )

    async def generate(self, request: PreparedRequest) -> Generation:
        """Queue a prepared request and wait for its generation."""
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        await self._queue.put((request, future))
        return await future

    async def run(self) -> None:
        """Serve batches until cancelled."""
        while True:
            waiting = [await self._queue.get()]
            while len(waiting) < self.max_batch and not self._queue.empty():
                waiting.append(self._queue.get_nowait())
            live = [(r, f) for r, f in waiting if not f.done()]  # drop abandoned requests
            if not live:
                continue
            try:
                outputs = await asyncio.to_thread(self.model.generate, [r for r, _ in live])
            except Exception as error:
                for _, future in live:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), output in zip(live, outputs, strict=True):
                if not future.done():
                    future.set_result(output)


# --- the server: audiogate in, your model out ---------------------------------------------


def create_app(
    model_dir: str | os.PathLike[str],
    *,
    model: EchoAudioModel | None = None,
    limits: WorkerLimits | None = None,
    max_prefill_tokens: int | None = None,
) -> Starlette:
    """The chat app for the checkpoint in ``model_dir``.

    :param model: the model (default: a new :class:`EchoAudioModel`).
    :param limits: the audio worker's queue, thread and memory caps.
    :param max_prefill_tokens: refuse prompts longer than the model's context.
    """
    registry = CollectorRegistry()
    host = create_host()
    worker = AudioWorker(host, limits=limits, metrics=AudioMetrics(registry))
    # The checkpoint's own config files decide its audio policy; its tokenizer and chat
    # template render the messages. Loading fails loudly on an invalid config.
    gate = AudioGate.from_model_dir(
        model_dir, host=host, worker=worker, max_prefill_tokens=max_prefill_tokens
    )
    loop = ModelLoop(model or EchoAudioModel())

    async def chat_completions(request: Request) -> Response:
        try:
            body = await request.json()
            messages = body["messages"]
        except (ValueError, KeyError, TypeError):
            return JSONResponse(
                {"error": {"type": "BadRequest", "message": "expected JSON with 'messages'"}},
                status_code=400,
            )
        try:
            # Acquire → admit → decode → resample → features → expand, off the event loop.
            # Cancelling this await cancels the preparation at its next checkpoint (the
            # reference server does that when the client disconnects).
            prepared = await gate.prepare_async(messages)
        except AudioGateError as error:
            return JSONResponse(error_payload(error), status_code=status_for(error))
        generation = await loop.generate(prepared)
        return JSONResponse(
            {
                "object": "chat.completion",
                "model": body.get("model") or gate.policy.family,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": generation.text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": generation.prompt_tokens},
                "audio": {
                    "family": prepared.family,
                    "clips": [clip.accounting() for clip in prepared.batch.clips]
                    if prepared.batch
                    else [],
                    "audio_positions": generation.audio_positions,
                },
            }
        )

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(loop.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            worker.close()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.gate = gate
    app.state.model_loop = loop
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """``python examples/embedding/chat_server.py MODEL_DIR [--port 8000]``."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model_dir")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(args.model_dir), host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
