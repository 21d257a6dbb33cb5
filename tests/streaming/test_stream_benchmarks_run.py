"""The streaming benchmarks (issue #34) run end to end on a short clip with every option
the docs quote (``--floor``, ``--tail-parts``, ``--realtime``; the wake benchmark's
floor), so that a change to the library or to one of their parts cannot leave them
broken until the next measurement. Their figures are not checked: a test never asserts
on time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [("--floor", "--tail-parts"), ("--realtime", "--chunk-ms", "100")],
    ids=["floor-tail-parts", "realtime"],
)
def test_bench_streaming_runs(options: tuple[str, ...]) -> None:
    out = _run(
        "bench_streaming.py", "--seconds", "1", "--runs", "1", "--families", "qwen2audio", *options
    )
    assert "\nqwen2audio " in out
    assert "Targets (issue #34)" in out
    if "--tail-parts" in options:
        assert "(no-op) tail, cold" in out
        assert "qwen2audio tail, cold" in out


@pytest.mark.slow
def test_bench_stream_wake_runs() -> None:
    out = _run(
        "bench_stream_wake.py",
        "--seconds",
        "1",
        "--interval-ms",
        "5",
        "--nap-ms",
        "5",
        "--families",
        "qwen2audio",
    )
    assert "\nqwen2audio " in out
    assert "floor: 'over' where c >" in out
