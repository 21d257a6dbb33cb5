"""Traced memory of a stage: what ``tracemalloc`` sees while it runs on a fresh thread."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Callable
from typing import Any

__all__ = ["traced_in_fresh_thread"]


def traced_in_fresh_thread(run: Callable[[], Any]) -> tuple[Any, int]:
    """``(result, peak traced bytes)`` of ``run`` in a new thread.

    A new thread has no per-thread scratch yet, so the peak includes allocating it (what
    a plan's ``working_bytes`` must cover). numpy's buffers are traced; BLAS, pocketfft
    and MLX internals are not. An exception of ``run`` is re-raised here.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        tracemalloc.start()
        try:
            box["result"] = run()
            box["peak"] = tracemalloc.get_traced_memory()[1]
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc
        finally:
            tracemalloc.stop()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"], box["peak"]
