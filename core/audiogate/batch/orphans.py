"""Pool processes exit when the driver that started them dies.

A ``spawn`` pool's processes are reparented when the driver is killed (``kill -9``, the
OOM killer): nothing closes their call queue, so each would keep its gate (about 185 MB)
and wait forever. :func:`exit_with_parent` starts a daemon thread that watches the parent
process id and ends the process at once when it changes. Polling, not Linux's
``PR_SET_PDEATHSIG``: that signal follows the *thread* that spawned the process, which in
a library caller need not live as long as the pool, and it exists on Linux only.
"""

from __future__ import annotations

import os
import threading
from typing import Final

__all__ = ["ORPHAN_EXIT_CODE", "POLL_S", "exit_with_parent"]

#: How often the watchdog looks at the parent process id, in seconds.
POLL_S: Final = 0.5
#: The exit status of a process whose driver died (128 + SIGHUP, as a terminal hang-up).
ORPHAN_EXIT_CODE: Final = 129


def _watch(parent_pid: int, poll_s: float) -> None:
    stop = threading.Event()
    while not stop.wait(poll_s):
        if os.getppid() != parent_pid:
            # No cleanup to run: the driver that would read this process's results is gone,
            # and a shard being written stays under its temporary name (a rerun redoes it).
            os._exit(ORPHAN_EXIT_CODE)


def exit_with_parent(parent_pid: int, *, poll_s: float = POLL_S) -> None:
    """End this process when its parent is no longer ``parent_pid`` (checked every
    ``poll_s`` seconds, and once now: a driver that died before this call is caught too)."""
    if os.getppid() != parent_pid:
        os._exit(ORPHAN_EXIT_CODE)
    threading.Thread(
        target=_watch, args=(parent_pid, poll_s), name="audiogate-orphan-watch", daemon=True
    ).start()
