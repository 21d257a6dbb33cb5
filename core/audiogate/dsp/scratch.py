"""Per-thread scratch, reused from one clip to the next.

The resamplers and feature kernels work in fixed-size blocks, so their scratch has a
fixed size per kernel (a few MiB at most, counted in each plan's ``working_bytes``).
Allocating it afresh per clip costs page faults on every first touch, which for a
one-second clip is most of the work; keeping one set per thread avoids that without
sharing writable memory between threads. The helper threads that take a long clip's
blocks (:func:`audiogate.dsp.blocks.run_blocks`) keep their own set the same way, so a
plan counts one set per thread it uses.

The MLX constants of :mod:`audiogate.dsp.mlx_constants` are kept here too, keyed by
device as well: an ``mx.array`` is bound to the stream of the thread that made it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

__all__ = ["thread_scratch"]

_T = TypeVar("_T")
_LOCAL = threading.local()


def thread_scratch(key: Hashable, build: Callable[[], _T]) -> _T:
    """This thread's scratch object for ``key``, built by ``build()`` on first use.

    :param key: names the scratch across every family and kernel; prefix it with the
        family (``("phi4mm.log_mel", frontend)``), and include whatever sizes it.
    :param build: makes the object; called once per thread and key.
    """
    pool: dict[Hashable, object] | None = getattr(_LOCAL, "pool", None)
    if pool is None:
        pool = {}
        _LOCAL.pool = pool
    found = pool.get(key)
    if found is None:
        found = build()
        pool[key] = found
    return found  # type: ignore[return-value]
