"""``torchvision.transforms``: ``InterpolationMode`` and the functional modules."""

from __future__ import annotations

import enum

__all__ = ["InterpolationMode", "functional", "v2"]


class InterpolationMode(enum.Enum):
    """The modes transformers maps PIL's resampling filters to."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


from torchvision.transforms import functional, v2  # noqa: E402  (they import the enum)
