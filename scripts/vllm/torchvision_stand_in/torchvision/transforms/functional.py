"""``torchvision.transforms.functional``: every function raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from torchvision._unused import unavailable
from torchvision.transforms import InterpolationMode

__all__ = ["InterpolationMode", "pil_to_tensor"]

pil_to_tensor = unavailable("transforms.functional.pil_to_tensor")


def __getattr__(name: str) -> Callable[..., NoReturn]:
    return unavailable("transforms.functional." + name)
