"""The functions of the stand-in: each raises when called."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["unavailable"]


def unavailable(name: str) -> Callable[..., NoReturn]:
    """A function that raises, named ``name`` in its message."""

    def call(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"torchvision stand-in: {name} is not available")

    return call
