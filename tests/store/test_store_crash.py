"""Crash proofs: a process SIGKILLed during an upload, between the blob and its journal
row, or during a retirement leaves a store whose reopening serves every acknowledged
source with identical bytes and identical features, never anything half-written, and
whose recovery report counts what it removed. Many processes uploading the same bytes
at once make one blob and one record.

The crash is injected where the store meets its blob backend (:class:`CrashingBlobs`
wraps the directory's blobs in the child process); the production write path has no
test hook."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from storekit import source

from audiogate.api import AudioGate
from audiogate.errors import SourceNotFoundError, SourceRetiredError
from audiogate.store import SourceStore

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent

_CHILD = """
import json, sys
sys.path.insert(0, {here!r})
from storekit import CrashingBlobs, source
from audiogate.store import SourceStore
from audiogate.store.directory import DirectoryBlobs
from audiogate.store.sqlite import SqliteLeases, SqliteRecords
blobs = CrashingBlobs(DirectoryBlobs({root!r}))
records = SqliteRecords(blobs.inner.root / "index.sqlite3")
store = SourceStore(records, blobs, SqliteLeases(blobs.inner.root / "leases.sqlite3"))
acked = store.add(source(seed=1), owner="alice", duration_us=1_000_000).record.sha256
print(json.dumps({{"acked": acked}}), flush=True)
blobs.crash_at = {point!r}
if {point!r} == "retire":
    store.retire(acked, owner="alice")
else:
    store.add(source(seed=2), owner="alice", duration_us=1_000_000)
print("survived", flush=True)
"""


def _render(messages) -> str:
    out = []
    for message in messages:
        content = message["content"]
        out.append(content if isinstance(content, str) else "".join(p["text"] for p in content))
    return "\n".join(out)


def _features(store: SourceStore, part: dict) -> list[np.ndarray]:
    gate = AudioGate.from_family("gemma3n", store=store, renderer=_render)
    messages = [{"role": "user", "content": [part, {"type": "text", "text": "x"}]}]
    return [np.asarray(f) for f in gate.prepare(messages, owner="alice").features]


def _crash(tmp_path: Path, point: str) -> tuple[Path, str]:
    root = tmp_path / "store"
    code = _CHILD.format(here=str(HERE), root=str(root), point=point)
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert "survived" not in child.stdout
    acked = json.loads(child.stdout.splitlines()[0])["acked"]
    return root, acked


@pytest.mark.parametrize(
    ("point", "counted"), [("upload", "unfinished_removed"), ("blob", "quarantined")]
)
def test_a_crash_while_adding_loses_only_the_unacknowledged_source(
    tmp_path: Path, point: str, counted: str
) -> None:
    root, acked = _crash(tmp_path, point)
    store = SourceStore.open(root)
    report = store.recovery
    assert getattr(report, counted) == 1
    assert report.lost == 0
    assert store.read(acked, owner="alice") == source(seed=1)
    unacked = hashlib.sha256(source(seed=2)).hexdigest()
    with pytest.raises(SourceNotFoundError):
        store.lease(unacked, owner="alice")
    assert [r.sha256 for r in store.list("alice", include_retired=True)] == [acked]
    assert list((root / "tmp").iterdir()) == []
    assert sorted(p.name for p in (root / "blobs").rglob("*") if p.is_file()) == [acked]
    inline = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(source(seed=1)).decode(), "format": "wav"},
    }
    by_ref = _features(store, {"type": "audio_ref", "audio_ref": {"sha256": acked}})
    for got, want in zip(by_ref, _features(store, inline), strict=True):
        np.testing.assert_array_equal(got, want)
    # The crash changed nothing a second opening would repair again.
    store.close()
    again = SourceStore.open(root)
    assert again.recovery.unfinished_removed == again.recovery.quarantined == 0
    again.close()


def test_a_crash_during_a_retirement_keeps_the_retirement_and_removes_the_blob(
    tmp_path: Path,
) -> None:
    root, acked = _crash(tmp_path, "retire")
    store = SourceStore.open(root)
    assert store.recovery.orphans_removed == 1
    assert store.recovery.retired_kept == 1
    with pytest.raises(SourceRetiredError):
        store.lease(acked, owner="alice")
    assert [p for p in (root / "blobs").rglob("*") if p.is_file()] == []
    assert [r.status for r in store.list("alice", include_retired=True)] == ["retired"]
    store.close()


_UPLOADER = """
import json, sys, time
sys.path.insert(0, {here!r})
from storekit import source
from audiogate.store import SourceStore
store = SourceStore.open({root!r})
time.sleep(max(0.0, {start!r} - time.time()))
added = store.add(source(seed=3), owner="alice", duration_us=1_000_000)
print(json.dumps(added.created))
"""


def test_many_processes_uploading_the_same_bytes_make_one_blob_and_one_record(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    SourceStore.open(root).close()
    start = time.time() + 3.0
    code = _UPLOADER.format(here=str(HERE), root=str(root), start=start)
    children = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    created = []
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        created.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(created) == [False] * 7 + [True]
    store = SourceStore.open(root)
    assert len(store.list("alice", include_retired=True)) == 1
    assert store.recovery.orphans_removed == 0
    assert len([p for p in (root / "blobs").rglob("*") if p.is_file()]) == 1
    assert store.read(hashlib.sha256(source(seed=3)).hexdigest(), owner="alice") == source(seed=3)
    store.close()
    assert os.listdir(root / "tmp") == []
