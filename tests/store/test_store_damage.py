"""A damaged index never costs an acknowledged source whose blob survives (issue #35):
the store rebuilds what a damaged or lost index or WAL forgot from the blobs' manifests,
or refuses to open with one line naming the file and the repair command; a blob nothing
accounts for is quarantined, never deleted; re-uploading the same bytes repairs a
damaged blob."""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from storekit import source

from audiogate.cli import EXIT_OK, main
from audiogate.errors import SourceLostError
from audiogate.store import SourceStore, StoreDamagedError
from audiogate.store.directory import DirectoryBlobs
from audiogate.store.repair import repair_store

# (owner, seed, scope): what every damage case must keep.
_SOURCES = (
    ("alice", 1, "private"),
    ("alice", 2, "shared"),
    ("bob", 2, "private"),
    ("bob", 3, "private"),
)


def _sha(seed: int) -> str:
    return hashlib.sha256(source(seed=seed)).hexdigest()


def _killed_store(tmp_path: Path, *, closed: bool = False) -> Path:
    """A store as a killed server leaves it: every source acknowledged, the index's
    recent transactions still in its WAL (a clean close would fold them into the file);
    ``closed``: as a clean close leaves it (no WAL)."""
    live = tmp_path / "live"
    store = SourceStore.open(live)
    store.add(source(seed=9), owner="alice", duration_us=1_000_000)
    store.retire(_sha(9), owner="alice")
    for owner, seed, scope in _SOURCES:
        added = store.add(source(seed=seed), owner=owner, duration_us=1_000_000, scope=scope)
        assert added.created
    if closed:
        store.close()
        assert not (live / "index.sqlite3-wal").exists()
        return live
    copy = tmp_path / "killed"
    shutil.copytree(live, copy)
    store.close()
    assert (copy / "index.sqlite3-wal").stat().st_size > 0
    return copy


def _all_there(store: SourceStore) -> None:
    for owner, seed, scope in _SOURCES:
        record = store.get(_sha(seed), owner=owner)
        assert (record.status, record.scope) == ("ready", scope)
        assert store.read(_sha(seed), owner=owner) == source(seed=seed)


def _truncate(path: Path) -> None:
    path.write_bytes(b"")


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for at in range(0, len(data), 97):
        data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def _garble_pages(path: Path) -> None:
    """Every page but the first (the header intact: only a page check finds it)."""
    data = bytearray(path.read_bytes())
    for at in range(4096, len(data), 61):
        data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def _garble_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[:100] = b"\xa5" * 100
    path.write_bytes(bytes(data))


# (file, damage, after a clean close): with the WAL present, SQLite reads the pages it
# holds from it, so a damaged main file is also tested closed.
DAMAGE: dict[str, tuple[str, Callable[[Path], None], bool]] = {
    "index truncated": ("index.sqlite3", _truncate, False),
    "index truncated, closed": ("index.sqlite3", _truncate, True),
    "index deleted": ("index.sqlite3", Path.unlink, False),
    "index deleted, closed": ("index.sqlite3", Path.unlink, True),
    "index garbled": ("index.sqlite3", _garble, False),
    "index header garbled, closed": ("index.sqlite3", _garble_header, True),
    "index garbled, closed": ("index.sqlite3", _garble, True),
    "index pages garbled, closed": ("index.sqlite3", _garble_pages, True),
    "wal deleted": ("index.sqlite3-wal", Path.unlink, False),
    "wal truncated": ("index.sqlite3-wal", lambda p: p.write_bytes(p.read_bytes()[:5000]), False),
    "wal garbled": ("index.sqlite3-wal", _garble, False),
}


def _damaged_error(root: Path) -> str:
    """The error opening ``root`` gives, or ``""`` where it opens."""
    try:
        SourceStore.open(root).close()
    except StoreDamagedError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_index_or_wal_loses_no_acknowledged_source(tmp_path: Path, case: str) -> None:
    name, damage, closed = DAMAGE[case]
    root = _killed_store(tmp_path, closed=closed)
    damage(root / name)
    if error := _damaged_error(root):
        assert str(root / "index.sqlite3") in error
        assert f"audiogate sources repair --store {root}" in error
        assert "\n" not in error
        repaired = repair_store(root)
        assert repaired.set_aside
        assert repaired.recovery.lost == 0
    store = SourceStore.open(root)
    try:
        _all_there(store)
        assert store.recovery.lost == 0
    finally:
        store.close()
    # Nothing was deleted: the retired source's blob at most, which a retirement removes.
    blobs = sorted(p.name for p in (root / "blobs").rglob("*") if p.is_file())
    assert blobs == sorted({_sha(seed) for _, seed, _ in _SOURCES})


def test_a_damaged_index_is_one_line_naming_the_file_and_the_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _killed_store(tmp_path, closed=True)
    _garble_header(root / "index.sqlite3")
    code = main(["sources", "list", "--store", str(root)], stdout=io.StringIO())
    assert code != EXIT_OK
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert str(root / "index.sqlite3") in err
    assert "audiogate sources repair --store" in err
    out = io.StringIO()
    assert main(["sources", "repair", "--store", str(root)], stdout=out) == EXIT_OK
    assert '"rebuilt": 4' in out.getvalue()
    store = SourceStore.open(root)
    _all_there(store)
    store.close()


def test_a_blob_nothing_accounts_for_is_quarantined_never_deleted(tmp_path: Path) -> None:
    root = _killed_store(tmp_path)
    stray = DirectoryBlobs(root).blob_path("e" * 64)
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"someone's bytes")
    (root / "index.sqlite3").unlink()
    (root / "index.sqlite3-wal").unlink()
    store = SourceStore.open(root)
    assert (store.recovery.rebuilt, store.recovery.quarantined) == (4, 1)
    _all_there(store)
    store.close()
    (kept,) = (root / "quarantine").glob("e" * 64 + ".*")
    assert kept.read_bytes() == b"someone's bytes"


@pytest.mark.parametrize("verify", [False, True])
def test_a_flipped_blob_is_lost_until_the_same_bytes_come_again(
    tmp_path: Path, verify: bool
) -> None:
    root = _killed_store(tmp_path)
    blob = DirectoryBlobs(root).blob_path(_sha(1))
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only the digest tells
    blob.write_bytes(bytes(data))
    store = SourceStore.open(root, verify=verify)
    try:
        assert store.recovery.lost == int(verify)
        with pytest.raises(SourceLostError):
            store.read(_sha(1), owner="alice")
        assert store.get(_sha(1), owner="alice").status == "lost"
        store.add(source(seed=1), owner="alice", duration_us=1_000_000)
        _all_there(store)
    finally:
        store.close()


def test_re_uploading_repairs_a_damaged_blob_not_yet_found(tmp_path: Path) -> None:
    root = _killed_store(tmp_path)
    store = SourceStore.open(root)
    try:
        blob = DirectoryBlobs(root).blob_path(_sha(3))
        blob.write_bytes(b"\0" * blob.stat().st_size)  # still "ready": nobody read it
        added = store.add(source(seed=3), owner="bob", duration_us=1_000_000)
        assert not added.created
        _all_there(store)
    finally:
        store.close()


def test_a_missing_blob_loses_only_its_source(tmp_path: Path) -> None:
    root = _killed_store(tmp_path)
    DirectoryBlobs(root).blob_path(_sha(3)).unlink()
    store = SourceStore.open(root)
    try:
        assert store.recovery.lost == 1
        assert store.get(_sha(3), owner="bob").status == "lost"
        for owner, seed, _ in _SOURCES[:3]:
            assert store.read(_sha(seed), owner=owner) == source(seed=seed)
    finally:
        store.close()


def test_a_retirement_is_not_undone_by_a_rebuild(tmp_path: Path) -> None:
    root = _killed_store(tmp_path)
    store = SourceStore.open(root)
    store.retire(_sha(2), owner="bob")  # alice still holds the bytes
    store.close()
    (root / "index.sqlite3").unlink()
    store = SourceStore.open(root)
    try:
        assert store.recovery.rebuilt == 3
        assert store.get(_sha(2), owner="alice").status == "ready"
        assert [r.sha256 for r in store.list("bob")] == [_sha(3)]
    finally:
        store.close()


def test_the_recovery_report_reaches_the_log_of_a_process_that_configured_none(
    tmp_path: Path,
) -> None:
    root = _killed_store(tmp_path)
    (root / "index.sqlite3-wal").unlink()
    code = "import sys; from audiogate.store import SourceStore; SourceStore.open(sys.argv[1])"
    child = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True
    )
    (line,) = [x for x in child.stderr.splitlines() if "source store recovered" in x]
    assert "rebuilt=" in line
    assert "quarantined=0" in line
