"""Server test fixtures (helpers live in :mod:`serverkit`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serverkit import Running, serving


@pytest.fixture(scope="module")
def gemma() -> Iterator[Running]:
    """A Gemma 3n server shared by a module's tests (default limits)."""
    with serving("gemma-3n-e4b-it") as running:
        yield running
