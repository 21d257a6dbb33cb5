"""Who holds a lease: one store instance, named so a lease backend can tell whether its
process is gone."""

from __future__ import annotations

import os
import uuid

__all__ = ["holder_alive", "new_holder"]


def new_holder() -> str:
    """A holder name for one store instance: ``host:pid:random``."""
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def holder_alive(holder: str) -> bool:
    """Whether ``holder``'s process may still run: another machine's, or a process of
    this machine that exists."""
    host, _, rest = holder.partition(":")
    if host != os.uname().nodename:
        return True  # its marks expire
    try:
        pid = int(rest.split(":")[0])
    except ValueError:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
