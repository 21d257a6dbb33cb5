"""The ``pytest11`` entry point ``audiogate``: fixtures for family plugin authors.

Installing audiogate makes these fixtures available in every pytest session of the
environment (disable with ``-p no:audiogate``). They create nothing at import time and
never touch the network:

``audiogate_host``
    a fresh :class:`~audiogate.host.FamilyHost` with the installed families (a new
    ``PluginManager`` per test, so no test sees another's registrations).
``family_host``
    a factory: ``family_host(plugin, ...)`` registers plugin objects directly, without
    entry points, for a family that is not installed (or a test double).
``encoded_clip``
    :func:`audiogate.testing.audio.encoded_clip`: a deterministic WAV clip.
``cancel_at``
    a factory of :class:`~audiogate.testing.cancel.CancelAt` tokens that cancel on the
    n-th poll of a checkpoint.

The family contract suite is a base class, :class:`audiogate.testing.contract.FamilyContract`;
its tests carry the ``audiogate_contract`` marker, registered here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from audiogate.cancel import Checkpoint
    from audiogate.host import FamilyHost
    from audiogate.testing.cancel import CancelAt

__all__ = [
    "audiogate_host",
    "cancel_at",
    "encoded_clip",
    "family_host",
    "pytest_configure",
]


def pytest_configure(config: pytest.Config) -> None:
    """Register the contract marker (so ``--strict-markers`` sessions accept it)."""
    config.addinivalue_line(
        "markers", "audiogate_contract: the audiogate family contract suite (FamilyContract)"
    )


@pytest.fixture
def audiogate_host() -> FamilyHost:
    """A fresh host with the installed family plugins (entry points loaded)."""
    from audiogate.host import create_host

    return create_host(load_entry_points=True)


@pytest.fixture
def family_host() -> Callable[..., FamilyHost]:
    """``family_host(*plugins, load_entry_points=False)``: a host with these plugins only."""
    from audiogate.host import create_host

    def make(*plugins: object, load_entry_points: bool = False) -> FamilyHost:
        return create_host(plugins=plugins, load_entry_points=load_entry_points)

    return make


@pytest.fixture
def encoded_clip() -> Callable[..., object]:
    """:func:`audiogate.testing.audio.encoded_clip` (``seconds=``, ``rate_hz=``, ...)."""
    from audiogate.testing.audio import encoded_clip as make

    return make


@pytest.fixture
def cancel_at() -> Callable[..., CancelAt]:
    """``cancel_at(Checkpoint.FEATURE, nth=3)``: a token cancelling on that poll."""
    from audiogate.testing.cancel import CancelAt

    def make(checkpoint: Checkpoint | None = None, nth: int = 1) -> CancelAt:
        return CancelAt(checkpoint, nth)

    return make
