"""The allocator tuning of ``audiogate serve`` (server.malloc, issue #31): megabyte
buffers allocated and freed in turn, as requests do, reuse the heap's pages instead of
faulting fresh ones in each time."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import resource, sys
from audiogate.server.malloc import keep_freed_memory
tuned = keep_freed_memory() if sys.argv[1] == "tuned" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):  # warm up (the threshold of untuned glibc adapts on the first frees)
    held = [b"x" * 1_300_000 for _ in range(4)]
    del held
before = faults()
for _ in range(50):
    held = [b"x" * 1_300_000 for _ in range(4)]  # four requests' buffers in flight
    del held
print(tuned, faults() - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], check=True, capture_output=True, text=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_megabyte_buffers_are_reused_without_page_faults() -> None:
    tuned, faults = _faults("tuned")
    assert tuned == "True"
    # 200 buffers of 318 pages each: faulted in anew, that is some 60,000 faults.
    assert faults < 2_000
    _, untuned = _faults("default")
    assert untuned > faults
