"""SIGINT and SIGTERM before a server handles them itself: an interrupt that is never lost.

Python raises a signal handler's ``KeyboardInterrupt`` wherever the main thread is; one
raised in a finaliser or an import's module-lock callback is printed as "Exception
ignored" and dropped. :func:`interrupt_on_stop_signals` remembers that a signal came, so
the caller can act on it when the interrupt itself was dropped.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from time import sleep
from types import FrameType

import attrs

__all__ = ["StopSignals", "interrupt_on_stop_signals", "wait_for_a_stop_signal"]


@attrs.define
class StopSignals:
    """Whether a stop signal came inside :func:`interrupt_on_stop_signals`."""

    came: bool = False


@contextlib.contextmanager
def interrupt_on_stop_signals() -> Iterator[StopSignals]:
    """SIGTERM, and SIGINT where Python handles it, raise ``KeyboardInterrupt`` meanwhile,
    and neither is lost: one that came is raised again once the body is done.

    While a model loads, before uvicorn handles signals, SIGTERM would otherwise kill the
    process outright. An ignored SIGINT (``nohup``, ``&``) stays ignored. Outside the main
    thread (which alone receives signals) nothing is installed.
    """
    stop = StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        stop.came = True
        raise KeyboardInterrupt

    stops = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        stops.append(signal.SIGINT)
    previous = {sig: signal.signal(sig, interrupt) for sig in stops}
    try:
        yield stop
        if stop.came:
            raise KeyboardInterrupt
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def wait_for_a_stop_signal(poll_s: float = 1.0) -> None:
    """Block the main thread until SIGINT or SIGTERM; return once one came, even one whose
    interrupt Python dropped (noticed within ``poll_s`` seconds)."""
    with contextlib.suppress(KeyboardInterrupt), interrupt_on_stop_signals() as stop:
        while not stop.came:
            sleep(poll_s)
