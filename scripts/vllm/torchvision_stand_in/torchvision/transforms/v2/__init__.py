"""``torchvision.transforms.v2``."""

from __future__ import annotations

from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional

__all__ = ["InterpolationMode", "functional"]
