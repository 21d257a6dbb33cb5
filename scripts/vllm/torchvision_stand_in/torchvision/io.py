"""``torchvision.io``'s names that transformers imports."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import NoReturn

from torchvision._unused import unavailable

__all__ = ["ImageReadMode", "decode_image"]


class ImageReadMode(enum.Enum):
    """The members transformers names."""

    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


decode_image = unavailable("io.decode_image")


def __getattr__(name: str) -> Callable[..., NoReturn]:
    return unavailable("io." + name)
