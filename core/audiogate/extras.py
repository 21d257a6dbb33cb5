"""The optional extras, and the one way audiogate imports what they install.

Every lazy import of an optional dependency goes through :func:`require_module` (or
:func:`installed`, which asks without importing): a missing one is a
:class:`~audiogate.errors.MissingExtraError` naming the extra, in the same words
everywhere. ``EXTRAS`` is ``pyproject.toml``'s ``[project.optional-dependencies]``, by
the modules each installs (a test keeps the two in step).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Final

from audiogate.errors import MissingExtraError

__all__ = ["EXTRAS", "extra_of", "installed", "require_module"]

#: Each extra and the top-level modules it installs.
EXTRAS: Final[Mapping[str, tuple[str, ...]]] = {
    "chat": ("transformers", "jinja2"),
    "mlx": ("mlx",),
    "codecs": ("soundfile",),
    "codecs-ffmpeg": ("av",),
    "batch": ("pyarrow",),
    "ray": ("ray", "pyarrow"),
}


def extra_of(module: str) -> str | None:
    """The extra that installs ``module`` (``"pyarrow.parquet"`` -> ``"batch"``), or
    ``None`` where none does (``torch``)."""
    top = module.partition(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def installed(module: str) -> bool:
    """Whether ``module``'s top-level package can be imported, found without importing it
    (a module set to ``None`` in ``sys.modules`` counts as missing, as ``import`` does)."""
    top = module.partition(".")[0]
    if top in sys.modules:
        return sys.modules[top] is not None
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def require_module(
    module: str, *, purpose: str, extra: str | None = None, hint: str = ""
) -> ModuleType:
    """``module``, imported; a :class:`~audiogate.errors.MissingExtraError` naming the
    extra when it (or what it imports) is not installed.

    :param module: the module to import (``"pyarrow.parquet"``, ``"mlx.core"``).
    :param purpose: what needs it, as the message's subject (``"audiogate batch"``).
    :param extra: the extra to name; default :func:`extra_of` ``module``.
    :param hint: a sentence appended to the message (another way out).
    :raises MissingExtraError: the import failed for a missing module.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            purpose,
            module=module,
            extra=extra if extra is not None else extra_of(module),
            hint=hint,
        ) from exc
