"""How many audiogate modules one request enters, and how often it crosses between them
(issue #29): a measure of how far a reader must follow one request.

One chat request with one inline 1 s WAV (``input_audio``, base64) is prepared on the
example Qwen2-Audio checkpoint (its stand-in tokenizer and real chat template), once
to warm every cache and import, then once under a profiler (``sys.setprofile`` and
``threading.setprofile``, so a worker's threads count too). Counted:

* **modules**: distinct ``audiogate.*`` modules (plugins included) whose Python code runs;
* **hops**: calls into an ``audiogate`` function from an ``audiogate`` function of
  another module (the nearest audiogate caller on the stack, library frames skipped).

Modes: ``blocking`` (``prepare()`` without a worker: the inline request of the issue),
``worker`` (``prepare()`` on an ``AudioWorker``) and ``async-worker``
(``prepare_async()`` on one, as the server runs it).

    .venv/bin/python benchmarks/trace_request.py [--mode MODE ...] [--modules]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import threading
import types
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "examples" / "models" / "qwen2-audio-7b-instruct"
MODES = ("blocking", "worker", "async-worker")

__all__ = ["main", "trace"]


def _module(frame: types.FrameType) -> str | None:
    name = frame.f_globals.get("__name__")
    if isinstance(name, str) and (name == "audiogate" or name.startswith("audiogate")):
        return name
    return None


class _Tracer:
    """Counts modules and cross-module calls while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.modules: set[str] = set()
        self.hops: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if not self.active or event != "call":
            return
        callee = _module(frame)
        if callee is None:
            return
        caller_frame = frame.f_back
        caller = None
        while caller_frame is not None:
            caller = _module(caller_frame)
            if caller is not None:
                break
            caller_frame = caller_frame.f_back
        with self._lock:
            self.modules.add(callee)
            if caller is not None and caller != callee:
                self.hops[(caller, callee)] += 1


def _request() -> list[dict[str, Any]]:
    from audiogate.testing.audio import tone, wav_bytes

    data = base64.b64encode(wav_bytes(tone(seconds=1.0, rate_hz=16_000), rate_hz=16_000)).decode()
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
            ],
        }
    ]


def trace(mode: str) -> _Tracer:
    """Prepare one request in ``mode`` under the profiler; returns the counts."""
    from audiogate.api import AudioGate
    from audiogate.worker import AudioWorker

    tracer = _Tracer()
    sys.setprofile(tracer)
    threading.setprofile(tracer)  # the worker's threads, started below
    try:
        worker = None
        options: dict[str, Any] = {}
        if mode != "blocking":
            from audiogate import create_host

            worker = AudioWorker(create_host())
            options["worker"] = worker
            options["host"] = worker.host
        gate = AudioGate.from_model_dir(MODEL_DIR, **options)
        messages = _request()
        run: Callable[[], Any]
        if mode == "async-worker":

            def run() -> Any:
                return asyncio.run(gate.prepare_async(messages))

        else:

            def run() -> Any:
                return gate.prepare(messages)

        run()  # warm: imports, compiled templates, lazy stage modules
        tracer.active = True
        result = run()
        tracer.active = False
        assert result.batch is not None
        assert result.input_ids
        if worker is not None:
            worker.close()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return tracer


def main(argv: Sequence[str] | None = None) -> int:
    """Print modules and hops per mode; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument("--modules", action="store_true", help="list the modules entered")
    parser.add_argument("--hops", action="store_true", help="list the caller -> callee pairs")
    args = parser.parse_args(argv)
    for mode in args.mode or MODES:
        tracer = trace(mode)
        print(f"{mode:>13}: {len(tracer.modules)} modules, {sum(tracer.hops.values())} hops")
        if args.modules:
            for name in sorted(tracer.modules):
                print(f"    {name}")
        if args.hops:
            for (caller, callee), count in sorted(tracer.hops.items()):
                print(f"    {count:4d}  {caller} -> {callee}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
