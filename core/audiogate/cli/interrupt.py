"""Ctrl-C during a command's work: the first stops it at its next checkpoint.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread is. One
raised inside a weakref callback or a ``__del__`` (an import's module-lock callback, a
finaliser) is printed as "Exception ignored" and dropped: the Ctrl-C is lost, and the
work goes on. Here the first SIGINT cancels the work's :class:`~audiogate.cancel.CancelToken`
instead, which every block of decode, resample and features polls; a second raises
``KeyboardInterrupt`` at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Final

from audiogate.cancel import CancelToken
from audiogate.errors import PreprocessCancelled

__all__ = ["interrupt_cancels"]

_CANCEL: Final = b"c"


@contextlib.contextmanager
def interrupt_cancels() -> Iterator[CancelToken]:
    """A token that the first SIGINT meanwhile cancels.

    The work it stops leaves as ``KeyboardInterrupt`` (``PreprocessCancelled`` raised by
    the token is turned into it), as does work that finished after its last checkpoint:
    a Ctrl-C is never lost. Only where SIGINT has Python's own handler, in the main
    thread; elsewhere (ignored, someone else's handler) the token is yielded as it is.

    The handler writes one byte to a pipe and a watcher thread cancels the token:
    cancelling takes the token's lock, which the interrupted thread may hold. Closing the
    pipe's write end lets a watcher that got nothing go.
    """
    token = CancelToken()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield token
        return
    read_end, write_end = os.pipe()
    signals = 0

    def interrupted(signum: int, frame: FrameType | None) -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            raise KeyboardInterrupt
        os.write(write_end, _CANCEL)

    def watch() -> None:
        if os.read(read_end, 1) == _CANCEL:  # b"": the pipe was closed
            token.cancel()

    watcher = threading.Thread(target=watch, name="audiogate-interrupt", daemon=True)
    watcher.start()
    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        try:
            yield token
        except PreprocessCancelled:
            if signals:
                raise KeyboardInterrupt from None
            raise
        if signals:
            raise KeyboardInterrupt
    finally:
        signal.signal(signal.SIGINT, previous)
        os.close(write_end)
        watcher.join()
        os.close(read_end)
