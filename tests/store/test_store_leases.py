"""Leases are records every store over the same backends sees (not counters of one
process): a lease taken through one store holds a retirement through another, expires
if its holder never releases it, and a dead process's leases are dropped. No backend
call runs on an event loop: the async methods, acquisition's references and a release
on the loop all reach the backends from the store's executor."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from storekit import source

from audiogate.acquire import AcquisitionPolicy, SourceAccess, acquire_parts
from audiogate.api import AudioGate
from audiogate.errors import SourceBusyError, SourceRetiredError
from audiogate.store import SourceStore
from audiogate.store.sqlite import SqliteLeases


def _add(store: SourceStore, data: bytes, **kw: Any) -> str:
    return store.add(data, owner="alice", duration_us=1_000_000, **kw).record.sha256


def test_a_lease_through_one_store_holds_a_retirement_through_another(backing) -> None:
    serving, admin = backing.open(), backing.open()
    try:
        sha = _add(serving, source(seed=1))
        lease = serving.lease(sha, owner="alice")
        assert admin.leases(sha, owner="alice") == 1
        with pytest.raises(SourceBusyError, match="1 request"):
            admin.retire(sha, owner="alice", timeout_s=0.1)
        assert serving.get(sha, owner="alice").status == "ready"  # the refusal undid it
        retiring = threading.Thread(target=lambda: admin.retire(sha, owner="alice"))
        retiring.start()
        while not serving.leases_backend.retiring(sha, "alice"):
            time.sleep(0.01)
        with pytest.raises(SourceRetiredError):  # refused in the other store at once
            serving.lease(sha, owner="alice")
        assert serving.get(sha, owner="alice").status == "retired"
        lease.release()
        retiring.join(10)
        assert not retiring.is_alive()
        assert admin.get(sha, owner="alice").status == "retired"
        assert backing.blobs() == []
    finally:
        serving.close()
        admin.close()


def test_a_lease_never_released_expires(backing) -> None:
    store = SourceStore(*backing.parts(), lease_ttl_s=0.2)
    try:
        sha = _add(store, source(seed=2))
        store.lease(sha, owner="alice")  # its holder "dies" holding it
        assert store.leases(sha, owner="alice") == 1
        time.sleep(0.3)
        assert store.leases(sha, owner="alice") == 0
        assert store.retire(sha, owner="alice", timeout_s=5).status == "retired"
    finally:
        store.close()


def test_the_leases_of_a_process_that_died_are_dropped_when_a_store_opens(tmp_path) -> None:
    store = SourceStore.open(tmp_path / "store")
    sha = _add(store, source(seed=3))
    store.close()
    leases = SqliteLeases(tmp_path / "store" / "leases.sqlite3")
    dead = f"{os.uname().nodename}:999999999:gone"  # no such process
    elsewhere = "another-host:1:x"  # its own expiry ends it
    leases.take(sha, "alice", dead, 3600.0)
    leases.take(sha, "alice", elsewhere, 3600.0)
    leases.close()
    reopened = SourceStore.open(tmp_path / "store")
    try:
        assert reopened.leases(sha, owner="alice") == 1
    finally:
        reopened.close()


_HOLDER = """
import os, signal, sys
from audiogate.store import SourceStore
store = SourceStore.open({root!r})
lease = store.lease({sha!r}, owner="alice")
print("held", flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIGKILL)  # dies holding it
"""


def test_a_lease_held_by_another_process_holds_a_retirement_until_that_process_dies(
    tmp_path,
) -> None:
    store = SourceStore.open(tmp_path / "store")
    sha = _add(store, source(seed=10))
    code = _HOLDER.format(root=str(tmp_path / "store"), sha=sha)
    try:
        with subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        ) as child:
            assert child.stdout is not None
            assert child.stdin is not None
            assert child.stdout.readline().strip() == "held"
            assert store.leases(sha, owner="alice") == 1
            with pytest.raises(SourceBusyError):
                store.retire(sha, owner="alice", timeout_s=0.2)
            child.stdin.write("go\n")
            child.stdin.flush()
            child.wait(60)
        assert child.returncode == -signal.SIGKILL
        assert store.leases(sha, owner="alice") == 0
        assert store.retire(sha, owner="alice", timeout_s=5).status == "retired"
    finally:
        store.close()


# --- the event loop never waits on a backend ------------------------------------------


class Recording:
    """A backend whose every call records the thread it ran in."""

    def __init__(self, inner: Any, calls: list[tuple[str, int]]) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.append((name, threading.get_ident()))
            return attr(*args, **kwargs)

        return call


def _recording(backing) -> tuple[SourceStore, list[tuple[str, int]]]:
    calls: list[tuple[str, int]] = []
    return SourceStore(*(Recording(p, calls) for p in backing.parts())), calls


def _ref(sha: str) -> dict[str, Any]:
    return {"type": "audio_ref", "audio_ref": {"sha256": sha}}


def test_no_backend_call_runs_on_the_event_loop(backing) -> None:
    store, calls = _recording(backing)
    data = source(seed=4)
    sha = _add(store, data)
    busy = _add(store, source(seed=5), status="processing")

    async def scenario() -> set[int]:
        loop_thread = {threading.get_ident()}
        calls.clear()
        lease = await store.lease_async(sha, owner="alice")
        assert lease.data == data  # read while leasing, in the executor
        lease.release()  # on the loop: handed to the executor
        assert (await store.get_async(sha, owner="alice")).status == "ready"
        assert len(await store.list_async("alice")) == 2
        access = SourceAccess(store, "alice")
        (clip,) = await acquire_parts([_ref(sha)], policy=AcquisitionPolicy(), sources=access)
        assert clip.sha256 == sha
        access.release()
        waiting = asyncio.ensure_future(store.lease_async(busy, owner="alice", wait_s=30))
        await asyncio.sleep(0.1)
        await store.mark_ready_async(busy, owner="alice")
        (await waiting).release()
        store.mark_lost(busy)  # on the loop: handed to the executor
        assert (await store.retire_async(sha, owner="alice")).status == "retired"
        return loop_thread

    try:
        loop_thread = asyncio.run(scenario())
        store.close()  # the writes handed to the executor are done
        during = [call for call in calls if call[0] != "close"]
        names = {name for name, _ in during}
        assert {"current", "take", "release", "read", "retire", "locked", "mark_lost"} <= names
        assert [name for name, thread in during if thread in loop_thread] == []
        assert backing.open().get(busy, owner="alice").status == "lost"
    finally:
        store.close()


def _render(messages: Any) -> str:
    out = []
    for message in messages:
        content = message["content"]
        out.append(content if isinstance(content, str) else "".join(p["text"] for p in content))
    return "\n".join(out)


def test_a_reference_through_the_gate_calls_no_backend_on_the_loop(backing) -> None:
    store, calls = _recording(backing)
    data = source(seed=6)
    sha = _add(store, data)
    gate = AudioGate.from_family(
        "gemma3n",
        store=store,
        feature_cache_bytes=16 << 20,
        feature_store=store,
        renderer=_render,
    )
    messages = [{"role": "user", "content": [_ref(sha), {"type": "text", "text": "x"}]}]

    async def scenario() -> int:
        calls.clear()
        await gate.prepare_async(messages, owner="alice")
        await gate.prepare_async(messages, owner="alice")  # a hit
        return threading.get_ident()

    try:
        loop_thread = asyncio.run(scenario())
        store.close()
        during = [call for call in calls if call[0] != "close"]
        assert [name for name, thread in during if thread == loop_thread] == []
        assert {"take", "release", "publish", "read_features"} <= {name for name, _ in during}
    finally:
        store.close()


def test_a_cancelled_wait_takes_no_lease(backing) -> None:
    store = backing.open()
    busy = _add(store, source(seed=7), status="processing")

    async def scenario() -> None:
        waiting = asyncio.ensure_future(store.lease_async(busy, owner="alice", wait_s=30))
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    try:
        asyncio.run(scenario())
        store.mark_ready(busy, owner="alice")
        assert store.leases(busy, owner="alice") == 0
    finally:
        store.close()


def test_an_async_retirement_waits_for_the_leases_on_the_loop(backing) -> None:
    store = backing.open()
    sha = _add(store, source(seed=8))
    lease = store.lease(sha, owner="alice")

    async def scenario() -> str:
        retiring = asyncio.ensure_future(store.retire_async(sha, owner="alice"))
        await asyncio.sleep(0.2)
        assert not retiring.done()  # the loop runs meanwhile
        with pytest.raises(SourceRetiredError):
            await store.lease_async(sha, owner="alice")
        await asyncio.to_thread(lease.release)
        return (await retiring).status

    try:
        assert asyncio.run(scenario()) == "retired"
        other = _add(store, source(seed=9))
        held = store.lease(other, owner="alice")
        with pytest.raises(SourceBusyError):  # a bounded one still refuses
            asyncio.run(store.retire_async(other, owner="alice", timeout_s=0.1))
        held.release()
        assert store.get(other, owner="alice").status == "ready"
    finally:
        store.close()
