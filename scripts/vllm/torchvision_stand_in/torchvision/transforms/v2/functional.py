"""``torchvision.transforms.v2.functional``: every function raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from torchvision._unused import unavailable
from torchvision.transforms import InterpolationMode

__all__ = ["InterpolationMode"]


def __getattr__(name: str) -> Callable[..., NoReturn]:
    return unavailable("transforms.v2.functional." + name)
