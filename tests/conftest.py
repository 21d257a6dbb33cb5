"""Core fixtures: a fresh plugin host per test with every installed family."""

from __future__ import annotations

import pytest

from audiogate.host import FamilyHost, create_host


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with the installed family plugins (a new PluginManager per test)."""
    return create_host(load_entry_points=True)
