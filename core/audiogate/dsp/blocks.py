"""Run one clip's independent blocks on a few threads, polling cancellation per block.

The resamplers and feature frontends work in fixed blocks (a few hundred frames, a few
thousand samples) that do not depend on each other and write disjoint parts of the
result. NumPy, SciPy and BLAS release the GIL inside each call, so a second thread taking
every other block uses a second core: on the 2-vCPU machines the project targets, a 30 s
clip's log-mel takes about 60 % of its single-threaded time and a 10-minute clip's about
half, and the float64 FFT that parity requires stops being a single-core floor. (On a VM
whose second vCPU has been idle for ~50 ms or more, the guest scheduler may wake the
helper on the caller's vCPU, and a clip of a few ms then gains little.)

:func:`run_blocks` keeps the single-threaded contract of those loops:

* the cancel token is polled exactly once before each block, by whichever thread takes
  the block, one poll at a time and never again once a poll has raised; a token that
  counts its polls (as the tests and the contract suite do) sees the same sequence as a
  plain loop, and a cancelled clip stops after at most one block per thread;
* each block computes the same values whichever thread runs it (the callers keep their
  scratch per thread), so the result is bit for bit the single-threaded one;
* the caller's thread works too, and helpers that have not started when it runs out of
  blocks are withdrawn, so a busy pool never makes a clip wait for another clip's blocks.

The helper threads form one small process-wide pool (:data:`BLOCK_THREADS` threads in
all, counting the caller's), created on first use and again after a ``fork``. Several
audiogate worker threads extracting at once share it: each still makes progress on its
own thread, and the machine is oversubscribed by at most the pool's size, which costs
less than leaving a core idle on one-clip requests. Short clips (one block) never touch
the pool: handing a block to a sleeping thread costs tens of microseconds on a VM.

A process that is itself one of several workers sharing the machine's cores (a batch
process, a Ray actor) gains nothing from a helper thread and loses to the
oversubscription: it calls :func:`set_block_threads` with ``1`` before its first clip, or
is started with ``AUDIOGATE_BLOCK_THREADS=1`` in its environment.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from audiogate.cancel import CancelToken, Checkpoint

__all__ = [
    "BLOCK_THREADS",
    "BLOCK_THREADS_ENV",
    "MAX_BLOCK_THREADS",
    "block_threads",
    "run_blocks",
    "set_block_threads",
    "usable_cpus",
]

#: Two threads halve the float64 FFT floor of the frontends on the 2-vCPU target (the
#: reference extractors use torch's two intra-op threads there). More would multiply the
#: block scratch each plan reserves per thread (a few MiB), for clips that a server
#: usually processes several at a time anyway.
MAX_BLOCK_THREADS: Final = 2


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the CPU count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


#: The environment variable that sets :data:`BLOCK_THREADS` at import (a positive
#: integer, at most :data:`MAX_BLOCK_THREADS`; ``1``: no helper thread).
BLOCK_THREADS_ENV: Final = "AUDIOGATE_BLOCK_THREADS"


def _default_threads() -> int:
    threads = max(1, min(MAX_BLOCK_THREADS, usable_cpus()))
    text = os.environ.get(BLOCK_THREADS_ENV, "").strip()
    if not text:
        return threads
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{BLOCK_THREADS_ENV} must be a positive integer, got {text!r}")
    return min(value, MAX_BLOCK_THREADS)


#: Threads per clip, counting the caller's: the CPUs this process may use, at most
#: :data:`MAX_BLOCK_THREADS`, or what ``AUDIOGATE_BLOCK_THREADS`` says; changed only by
#: :func:`set_block_threads` (tests and benchmarks may patch it).
BLOCK_THREADS = _default_threads()

_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def block_threads(blocks: int) -> int:
    """Threads :func:`run_blocks` uses for ``blocks`` blocks (size the per-thread scratch
    in a plan's ``working_bytes`` with this)."""
    return max(1, min(BLOCK_THREADS, blocks))


def set_block_threads(threads: int) -> None:
    """Use up to ``threads`` threads per clip in this process from now on (``1``: every
    block in the caller's thread; capped at :data:`MAX_BLOCK_THREADS`).

    For a process that is one of several workers on the machine's cores; call it before
    the first clip, as the plans' scratch estimates read the value when they are made.
    """
    global BLOCK_THREADS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"block threads must be a positive integer, got {threads!r}")
    BLOCK_THREADS = min(threads, MAX_BLOCK_THREADS)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(
                max_workers=BLOCK_THREADS - 1, thread_name_prefix="audiogate-blocks"
            )
        return _POOL


def _forget_pool_after_fork() -> None:
    # A forked child inherits the pool object but not its threads (and maybe a held lock).
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


class _Claims:
    """Hands out block indices in order, polling the token once per block under a lock."""

    __slots__ = ("_cancel", "_checkpoint", "_clip_index", "_count", "_lock", "_next", "_stopped")

    def __init__(
        self, count: int, cancel: CancelToken, checkpoint: Checkpoint, clip_index: int | None
    ) -> None:
        self._lock = threading.Lock()
        self._count = count
        self._next = 0
        self._stopped = False
        self._cancel = cancel
        self._checkpoint = checkpoint
        self._clip_index = clip_index

    def take(self) -> int | None:
        """The next block to compute, or ``None`` when there is none or work stopped."""
        with self._lock:
            if self._stopped or self._next >= self._count:
                return None
            try:
                self._cancel.check(self._checkpoint, self._clip_index)
            except BaseException:
                self._stopped = True
                raise
            index = self._next
            self._next += 1
            return index

    def stop(self) -> None:
        with self._lock:
            self._stopped = True


def run_blocks(
    count: int,
    work: Callable[[int], None],
    *,
    cancel: CancelToken,
    checkpoint: Checkpoint,
    clip_index: int | None,
) -> None:
    """Call ``work(i)`` for every block ``i`` in ``range(count)``, on up to
    :func:`block_threads` threads, polling ``cancel`` once before each block.

    ``work`` must write only block ``i``'s part of the result and keep its scratch per
    thread. Blocks are started in order; they may finish in any order.

    :raises PreprocessCancelled: from the poll that found the token cancelled, after the
        blocks already running have finished.
    :raises BaseException: the first error raised by ``work``, likewise.
    """
    claims = _Claims(count, cancel, checkpoint, clip_index)

    def drain() -> None:
        try:
            while (index := claims.take()) is not None:
                work(index)
        except BaseException:
            claims.stop()
            raise

    threads = block_threads(count)
    if threads == 1:
        drain()
        return
    pool = _pool()
    helpers: list[Future[None]] = [pool.submit(drain) for _ in range(threads - 1)]
    error: BaseException | None = None
    try:
        drain()
    except BaseException as exc:
        error = exc
    for helper in helpers:
        helper.cancel()  # not started: its blocks were taken by the running threads
    for helper in helpers:
        if not helper.cancelled():
            failure = helper.exception()
            if error is None:
                error = failure
    if error is not None:
        raise error
