"""A killed ``audiogate batch`` driver leaves no pool process behind (kill -9 included)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batchkit import GEMMA

from audiogate.batch.orphans import ORPHAN_EXIT_CODE
from audiogate.testing.audio import encoded_clip

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def _children(pid: int) -> set[int]:
    """The pool processes (multiprocessing's spawned workers) whose parent is ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == pid and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its reaper has not collected it


def _wait(condition, seconds: float) -> bool:
    # A deadline on a wait (the test would otherwise hang), not a measurement.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_pool_processes_exit_when_the_driver_is_killed(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    (media / "clip.wav").write_bytes(encoded_clip(seconds=20.0, seed=1).data)
    manifest = tmp_path / "manifest.jsonl"
    # Enough rows that the pool is still busy when the driver is killed.
    rows = [json.dumps({"id": f"r{i}", "audio": "clip.wav"}) for i in range(4000)]
    manifest.write_text("\n".join(rows) + "\n")
    command = [
        sys.executable, "-m", "audiogate", "batch", "--model", str(GEMMA),
        "--manifest", str(manifest), "--out", str(tmp_path / "out"),
        "--media-path", str(media), "--workers", "2", "--shard-rows", "50",
    ]  # fmt: skip
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as errors:
        driver = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True
        )
    try:
        assert _wait(lambda: len(_children(driver.pid)) == 2, 120), stderr.read_text()
        workers = _children(driver.pid)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
        assert _wait(lambda: not any(_alive(pid) for pid in workers), 60), [
            pid for pid in workers if _alive(pid)
        ]
    finally:
        if driver.poll() is None:
            driver.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # whatever the test failed to end


def test_a_process_whose_parent_already_died_exits_at_once() -> None:
    code = (
        "import os, sys; from audiogate.batch.orphans import exit_with_parent; "
        "exit_with_parent(os.getppid() + 1_000_000); sys.exit(0)"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, check=False)
    assert done.returncode == ORPHAN_EXIT_CODE
