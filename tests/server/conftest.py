"""Server test fixtures (helpers live in :mod:`serverkit`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from serverkit import Running, serving

LOADTEST_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "loadtest_server.py"


@pytest.fixture(scope="module")
def gemma() -> Iterator[Running]:
    """A Gemma 3n server shared by a module's tests (default limits)."""
    with serving("gemma-3n-e4b-it") as running:
        yield running


@pytest.fixture
def loadtest() -> ModuleType:
    """``benchmarks/loadtest_server.py`` loaded afresh (its sweep's pure parts under test)."""
    spec = importlib.util.spec_from_file_location("loadtest_server_under_test", LOADTEST_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
