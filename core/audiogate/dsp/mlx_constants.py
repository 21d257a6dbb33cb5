"""Per-thread, per-device MLX constants for the families' MLX frontends.

A mel bank or window is converted to an ``mx.array`` once per thread and device and then
reused: MLX arrays are bound to the stream of the thread that made them, so a constant
built on one worker thread cannot be used on another. Imported only by MLX code paths;
importing this module does not import MLX.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["thread_constant"]

_LOCAL = threading.local()


def thread_constant(key: Hashable, build: Callable[[], Any]) -> Any:
    """The evaluated ``mx.array`` that ``build()`` returns, cached per thread and device.

    :param key: identifies the constant across families (``("phi4mm.bank", name, bins)``).
    """
    import mlx.core as mx

    cache: dict[tuple[Hashable, str], Any] | None = getattr(_LOCAL, "cache", None)
    if cache is None:
        cache = {}
        _LOCAL.cache = cache
    full = (key, str(mx.default_device()))
    found = cache.get(full)
    if found is None:
        found = build()
        mx.eval(found)
        cache[full] = found
    return found
