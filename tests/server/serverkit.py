"""Server test helpers: the real server (uvicorn in a thread, ephemeral loopback port)
over a real family on a bundled example model directory, an httpx client, request
builders and metric readers. (A uniquely named module: every test folder has a
``conftest``, so tests import helpers from here, never from ``conftest``.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytest.importorskip("transformers")

from audiogate import Checkpoint, create_host, hookimpl
from audiogate.acquire import AcquisitionPolicy
from audiogate.api import AudioGate, load_tokenizer
from audiogate.budget import ByteBudget
from audiogate.cancel import CancelToken
from audiogate.errors import QueueFullError
from audiogate.metrics import REJECTION_REASONS, AudioMetrics
from audiogate.server import ServerLimits, ServerThread, ServerWorker, create_app
from audiogate.server.run import server_registry
from audiogate.testing.audio import tone, wav_bytes
from audiogate.worker import WorkerLimits

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
PREPARE = "/v1/audio/prepare"


@functools.cache
def tokenizer(model: str) -> Any:
    """Each example tokenizer is loaded once per session (they are read-only)."""
    return load_tokenizer(MODELS / model)


def wav_b64(seconds: float = 1.0, *, rate_hz: int = 16_000, freq_hz: float = 440.0) -> str:
    return base64.b64encode(
        wav_bytes(tone(seconds=seconds, rate_hz=rate_hz, freq_hz=freq_hz), rate_hz=rate_hz)
    ).decode()


def audio_part(data_b64: str, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": data_b64, "format": fmt}}


def chat(*audio: str, text: str = "Transcribe the audio.", **extra: Any) -> dict[str, Any]:
    """An OpenAI chat completions request with one user turn: the clips, then the text."""
    content = [audio_part(a) for a in audio] + [{"type": "text", "text": text}]
    return {"model": "test-model", "messages": [{"role": "user", "content": content}], **extra}


class Blocker:
    """Holds each feature extraction until :meth:`open` (polling the cancel token), then
    lets the family's own hook run; or raises ``fail`` (a plugin bug)."""

    __name__ = "server-test-blocker"

    def __init__(self, *, blocking: bool = True, fail: BaseException | None = None) -> None:
        self.gate = threading.Event()
        if not blocking:
            self.gate.set()
        self.fail = fail
        self.entered = threading.Event()

    def open(self) -> None:
        self.gate.set()

    @hookimpl(tryfirst=True)
    def audiogate_extract_features(self, clip_index: int, cancel: CancelToken) -> None:
        self.entered.set()
        while not self.gate.wait(0.01):
            cancel.check(Checkpoint.FEATURE, clip_index)
        if self.fail is not None:
            raise self.fail


class LoopbackTransport(asyncio.Transport):
    """A transport for a connection guard driven by hand: keeps what is written, and
    counts the pauses and resumes of reading."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False
        self.pauses = 0
        self.resumes = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 80)}.get(name, default)

    def write(self, data: Any) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        self.pauses += 1

    def resume_reading(self) -> None:
        self.resumes += 1

    def can_write_eof(self) -> bool:
        return False


@attrs.define
class GuardServer:
    """What the connection guard reads of the app's server."""

    bodies: ByteBudget = attrs.Factory(lambda: ByteBudget(64 << 20, limit="inflight_body_bytes"))
    max_body_bytes: int = 8 << 20
    body_idle_timeout_s: float = 30.0


#: A plain request that a :class:`RefusingAdmission` refuses from its head.
REFUSED_BODY = b"{" + b"a" * 2000 + b"}"
REFUSED_REQUEST = (
    f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(REFUSED_BODY)}\r\n\r\n"
).encode() + REFUSED_BODY


@attrs.define
class RefusingAdmission:
    """Refuses every request from its head (a full queue)."""

    server: GuardServer = attrs.Factory(GuardServer)

    def refusal(self, method: bytes, target: bytes, headers: Any, peer: str) -> QueueFullError:
        return QueueFullError("the audio queue is full (8 jobs waiting); retry later")

    def admit(self, method: bytes, target: bytes, headers: Any, peer: str) -> Any:
        return None, self.refusal(method, target, headers, peer)

    def release(self, client: str) -> None:
        raise AssertionError("nothing is admitted")


async def never_app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("every request is refused from its head")


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@attrs.define
class Running:
    """A running server and what the tests look at."""

    server: ServerThread
    client: httpx.Client
    gate: AudioGate
    worker: ServerWorker
    metrics: AudioMetrics
    blocker: Blocker | None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def family(self) -> str:
        return self.gate.policy.family

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        response = self.client.get("/metrics")
        assert response.status_code == 200
        return metric_samples(response.text)

    def value(self, name: str, **labels: str) -> float:
        return self.scrape().get((name, tuple(sorted(labels.items()))), 0.0)

    def outcomes(self) -> dict[str, float]:
        """completed, cancelled and each rejection reason of the served family."""
        samples = self.scrape()
        fam = ("family", self.family)
        out = {
            "completed": samples[("audiogate_audio_preprocess_completed_total", (fam,))],
            "cancelled": samples[("audiogate_audio_preprocess_cancelled_total", (fam,))],
        }
        for reason in REJECTION_REASONS:
            key = ("audiogate_audio_preprocess_rejections_total", (fam, ("reason", reason)))
            out[reason] = samples[key]
        return out

    def gauges(self) -> tuple[float, float, float]:
        samples = self.scrape()
        return (
            samples[("audiogate_audio_preprocess_queued_bytes", ())],
            samples[("audiogate_audio_preprocess_inflight_host_bytes", ())],
            samples[("audiogate_server_inflight_body_bytes", ())],
        )

    def acquired(self) -> float:
        """Bytes requests' file and URL reads hold now."""
        return self.scrape()[("audiogate_server_inflight_acquired_bytes", ())]

    def wait_idle(self, timeout_s: float = 20.0) -> None:
        wait_until(lambda: self.gauges() == (0.0, 0.0, 0.0) and self.acquired() == 0, timeout_s)


def raw_error(reply: bytes, status: int) -> dict:
    """The JSON error of a raw HTTP reply, which must have ``status`` and close its
    connection."""
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status}".encode()), reply
    assert b"connection: close" in head.lower()
    return json.loads(payload)["error"]


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in before if after[key] != before[key]}


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


@contextlib.contextmanager
def trickled_upload(port: int, held: int, *, every_s: float = 0.05) -> Iterator[None]:
    """A client that holds ``held`` bytes of the body budget for the block: it sends that
    much of a body it never finishes, then a byte every ``every_s`` seconds (so its body
    never stalls), and disconnects at the end (the server counts it as cancelled)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {held + 100_000}\r\n\r\n".encode())
    sock.sendall(b'{"messages": [' + b" " * (held - 14))
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(every_s):
            sock.sendall(b" ")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sock.close()


@contextlib.contextmanager
def serving(
    model: str = "gemma-3n-e4b-it",
    *,
    blocker: Blocker | None = None,
    worker: WorkerLimits | None = None,
    limits: ServerLimits | None = None,
    acquisition: AcquisitionPolicy | None = None,
    max_prefill_tokens: int | None = None,
    owners: dict[str, str] | None = None,
    **gate_options: Any,
) -> Iterator[Running]:
    """Serve an example model directory on an ephemeral loopback port (``gate_options``
    go to :class:`AudioGate`: ``renderer``, ``max_prompt_text_bytes``)."""
    host = create_host(load_entry_points=True, plugins=[blocker] if blocker else [])
    metrics = AudioMetrics(server_registry(), families=host.families)
    audio_worker = ServerWorker(host, limits=worker or WorkerLimits(), metrics=metrics)
    gate = AudioGate.from_model_dir(
        MODELS / model,
        host=host,
        tokenizer=tokenizer(model),
        worker=audio_worker,
        acquisition=acquisition,
        max_prefill_tokens=max_prefill_tokens,
        **gate_options,
    )
    app = create_app(gate, limits=limits, served_model=model, owners=owners)
    with (
        ServerThread(app) as server,
        httpx.Client(base_url=server.url, timeout=60.0) as client,
    ):
        try:
            yield Running(server, client, gate, audio_worker, metrics, blocker)
        finally:
            if blocker is not None:
                blocker.open()
