"""Old import paths kept as forwarding modules for one minor version.

A module that moved leaves a two-line shim at its old path::

    from audiogate.deprecation import forward_module

    __getattr__ = forward_module(__name__, "audiogate.dsp.blocks", since="0.2.0")

A name renamed inside a module that stays keeps its old name the same way::

    __getattr__ = forward_names(
        __name__, {"policy_fingerprint": "audiogate.cache.key:policy_result_fields"},
        since="0.2.0",
    )

Each attribute read through the old path (``from audiogate.blocks import run_blocks``)
returns the new module's object and warns with :class:`AudioGateDeprecationWarning`,
pointing at the caller's line. The suite's own ``filterwarnings`` ignores this category
(``pyproject.toml``), so old paths stay importable under ``-W error`` there; a plugin
author's suite sees the warning and the new path.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["AudioGateDeprecationWarning", "forward_module", "forward_names"]

#: The first minor version without the old paths (see ``CHANGELOG.md``).
REMOVAL_VERSION = "0.3.0"


class AudioGateDeprecationWarning(DeprecationWarning):
    """An audiogate import path or name that moved; the message names the new one."""


def forward_module(old: str, new: str, *, since: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` forwarding every public name of ``old`` to ``new``.

    :param old: the shim's own ``__name__``.
    :param new: the module that now holds the code.
    :param since: the version that moved it.
    """

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = importlib.import_module(new)
        try:
            value = getattr(target, name)
        except AttributeError:
            raise AttributeError(f"module {old!r} has no attribute {name!r}") from None
        warnings.warn(
            f"{old}.{name} moved to {new}.{name} in audiogate {since}; the old path is "
            f"removed in {REMOVAL_VERSION}",
            AudioGateDeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__


def forward_names(old: str, names: dict[str, str], *, since: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` forwarding each renamed or moved name of ``old``.

    :param old: the module's own ``__name__``.
    :param names: old name -> ``"new.module:new_name"``.
    :param since: the version that renamed them.
    """

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        module, _, new_name = target.partition(":")
        value = getattr(importlib.import_module(module), new_name)
        warnings.warn(
            f"{old}.{name} is {module}.{new_name} since audiogate {since}; the old name is "
            f"removed in {REMOVAL_VERSION}",
            AudioGateDeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__
