"""Format test fixtures (helpers live in :mod:`formatkit`)."""

from __future__ import annotations

import importlib.util

import pytest
from formatkit import FAMILIES, PYAV_CONTAINERS, entries, prepare, read, stand_in


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Each family's first clip (its numerics load lazily) and the decoder pool's first
    processes, before the tests: their time is the setup's, not the first test's."""
    for family in FAMILIES:
        prepare(family, stand_in(rate=48_000, channels=2, frames=48_000))
    pyav = importlib.util.find_spec("av") is not None
    lossy = [e for e in entries(lossless=False) if pyav or e["container"] not in PYAV_CONTAINERS]
    prepare("gemma3n", read(min(lossy, key=lambda e: e["bytes"])))
