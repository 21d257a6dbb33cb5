"""Core fixtures: a fresh plugin host per test with every installed family, and a count
of the pipeline's decodes."""

from __future__ import annotations

import os
from typing import Any

import pytest

from audiogate.host import FamilyHost, create_host
from audiogate.pipeline import process as process_module

# Tests write their media files an instant before reading them: without this, each read
# would wait out the settle time (audiogate.acquire.files.SETTLE_S) first. The tests of
# the settle wait set it back themselves. Set here, it reaches the subprocesses too.
os.environ.setdefault("AUDIOGATE_FILE_SETTLE_S", "0")


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with the installed family plugins (a new PluginManager per test)."""
    return create_host(load_entry_points=True)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every decode the pipeline runs, by clip index."""
    calls: list[int] = []
    real = process_module.decode

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["clip_index"])
        return real(*args, **kwargs)

    monkeypatch.setattr(process_module, "decode", counting)
    return calls
