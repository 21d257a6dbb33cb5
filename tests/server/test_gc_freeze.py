"""``audiogate serve`` freezes what start-up left alive (server.run.freeze_start_up_objects,
issue #33): the garbage collector's full collections then walk only what requests
allocate, not the model's tokenizer and modules (80-120 ms each with them)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from audiogate.server import run

_SCRIPT = """
import gc, weakref
from audiogate.server.run import freeze_start_up_objects

class Node:
    pass

kept = [Node() for _ in range(1000)]  # start-up's objects: alive for good
cycle = Node()
cycle.me = cycle  # start-up's garbage: collected, not frozen
gone = weakref.ref(cycle)
del cycle
before = len(gc.get_objects())
frozen = freeze_start_up_objects()
assert gone() is None, "the garbage was frozen, not collected"
assert frozen >= len(kept), frozen
assert gc.get_freeze_count() == frozen
tracked = set(map(id, gc.get_objects()))
assert not any(id(node) in tracked for node in kept), "a frozen object is still walked"
assert len(tracked) < before - len(kept)
later = Node()
later.me = later  # what requests leave is still collected
later_gone = weakref.ref(later)
del later
gc.collect()
assert later_gone() is None
print("ok")
"""


def test_start_up_objects_are_frozen_and_its_garbage_collected() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], check=True, capture_output=True, text=True
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_serve_freezes_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class FakeServer:
        started = True

        def __init__(self, config: Any) -> None:
            pass

        def run(self) -> None:
            calls.append("run")

        def handle_exit(self, sig: int, frame: object) -> None:
            pass

    monkeypatch.setattr(run, "build_app", lambda options, host=None: object())
    monkeypatch.setattr(run, "_config", lambda app, options: None)
    monkeypatch.setattr(run.uvicorn, "Server", FakeServer)
    monkeypatch.setattr(run, "keep_freed_memory", lambda: None)
    monkeypatch.setattr(run, "freeze_start_up_objects", lambda: calls.append("freeze") or 0)
    monkeypatch.setattr(run.sys, "setswitchinterval", lambda interval: None)
    assert run.serve(object()) == 0  # type: ignore[arg-type]
    assert calls == ["freeze", "run"]
