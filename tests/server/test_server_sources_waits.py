"""Waiting never holds a shared thread (issue #35): DELETEs waiting for a source's
leases sleep on the event loop, so another owner's requests are answered meanwhile; a
failed disk write during an upload answers a typed JSON 507 and leaves no file."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import threading
from pathlib import Path

import httpx
import pytest
from serverkit import serving, wait_until
from test_server_sources import ALICE, BOB, TOKENS, _ready, _wav

from audiogate.server.budgets import ServerLimits
from audiogate.store import SourceStore

pytest.importorskip("transformers")

WAITING = 100


def _retiring(root: Path) -> int:
    """Retirement marks in the store's lease file (one per DELETE waiting)."""
    with sqlite3.connect(root / "leases.sqlite3") as db:
        (count,) = db.execute("SELECT COUNT(*) FROM leases WHERE retiring = 1").fetchone()
    return int(count)


def test_another_owner_is_answered_while_100_deletes_wait_on_leases(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = SourceStore.open(root)
    limits = ServerLimits(retire_timeout_s=120.0)
    with serving("qwen2-audio-7b-instruct", store=store, owners=TOKENS, limits=limits) as running:
        client = running.client
        headers = {**ALICE, "Content-Type": "audio/wav"}
        sha = client.post("/v1/audio/sources", content=_wav(3), headers=headers).json()["sha256"]
        _ready(client, sha, ALICE)
        bob_sha = client.post(
            "/v1/audio/sources", content=_wav(4), headers={**BOB, "Content-Type": "audio/wav"}
        ).json()["sha256"]
        lease = store.lease(sha, owner="alice")  # a request holding it: every DELETE waits
        answers: list[int] = []

        async def deletes() -> None:
            limits = httpx.Limits(max_connections=WAITING + 10)
            async with httpx.AsyncClient(base_url=running.url, timeout=300, limits=limits) as c:
                replies = await asyncio.gather(
                    *(c.delete(f"/v1/audio/sources/{sha}", headers=ALICE) for _ in range(WAITING))
                )
            answers.extend(reply.status_code for reply in replies)

        thread = threading.Thread(target=asyncio.run, args=(deletes(),))
        thread.start()
        try:
            wait_until(lambda: _retiring(root) == WAITING, timeout_s=120.0)
            listing = client.get("/v1/audio/sources", headers=BOB)
            shown = client.get(f"/v1/audio/sources/{bob_sha}", headers=BOB)
            # Answered while every DELETE still waits.
            assert _retiring(root) == WAITING
            assert answers == []
        finally:
            lease.release()
            thread.join(timeout=300)
        assert listing.status_code == shown.status_code == 200
        assert [r["sha256"] for r in listing.json()["data"]] == [bob_sha]
        assert answers == [200] * WAITING
        assert client.get(f"/v1/audio/sources/{sha}", headers=ALICE).json()["status"] == "retired"


def test_a_full_disk_during_an_upload_is_a_typed_507_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from audiogate.store import directory

    root = tmp_path / "store"
    store = SourceStore.open(root)
    with serving("qwen2-audio-7b-instruct", store=store, owners=TOKENS) as running:
        client = running.client
        real_fsync = os.fsync

        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(directory.os, "fsync", full)
        headers = {**ALICE, "Content-Type": "audio/wav"}
        for _ in range(3):
            reply = client.post("/v1/audio/sources", content=_wav(5), headers=headers)
            assert reply.status_code == 507, reply.text
            error = reply.json()["error"]
            assert error["code"] == "store_write"
            assert "disk is full" in error["message"]
            assert "Traceback" not in reply.text
        assert os.listdir(root / "tmp") == []
        assert client.get("/v1/audio/sources", headers=ALICE).json()["data"] == []
        monkeypatch.setattr(directory.os, "fsync", real_fsync)
        assert client.post("/v1/audio/sources", content=_wav(5), headers=headers).status_code == 201


def test_metrics_need_a_token_when_owners_are_configured(tmp_path: Path) -> None:
    store = SourceStore.open(tmp_path / "store")
    with serving("qwen2-audio-7b-instruct", store=store, owners=TOKENS) as running:
        client = running.client
        refused = client.get("/metrics")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        scraped = client.get("/metrics", headers=BOB)
        assert scraped.status_code == 200
        assert "audiogate_" in scraped.text
