"""Per-thread, per-device MLX constants for the families' MLX kernels.

A mel bank or window is converted to an ``mx.array`` once per thread and device and then
reused: MLX arrays are bound to the stream of the thread that made them, so a constant
built on one worker thread cannot be used on another. The per-thread storage is
:func:`audiogate.dsp.scratch.thread_scratch`'s. Imported only by MLX code paths;
importing this module does not import MLX.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from audiogate.dsp.scratch import thread_scratch

__all__ = ["thread_constant"]


def thread_constant(key: Hashable, build: Callable[[], Any]) -> Any:
    """The evaluated ``mx.array`` that ``build()`` returns, cached per thread and device.

    :param key: identifies the constant across families (``("phi4mm.bank", name, bins)``).
    """
    import mlx.core as mx

    def evaluated() -> Any:
        value = build()
        mx.eval(value)
        return value

    return thread_scratch(("mlx", key, str(mx.default_device())), evaluated)
