"""Cooperative cancellation: one token per request, polled at named checkpoints.

Long loops (chunk walks, decode blocks, resampler and feature blocks) call
:meth:`CancelToken.check` every few thousand samples or a few hundred frames, so a
cancelled request stops promptly rather than between stages only.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Callable
from typing import Final

from audiogate.errors import PreprocessCancelled

__all__ = ["NEVER", "CancelToken", "Checkpoint", "cancellable"]


class Checkpoint(enum.StrEnum):
    """Where a cancellation can be noticed; named in ``PreprocessCancelled`` and its message."""

    QUEUE = "Queue"
    ACQUISITION = "Acquisition"
    DECODE = "Decode"
    RESAMPLE = "Resample"
    FEATURE = "Feature"


class CancelToken:
    """A thread-safe cancellation flag shared by every stage of one request."""

    # Name-mangled: subclasses (tests' counting tokens, ...) often have a ``_lock`` of
    # their own and cancel while holding it.
    __slots__ = ("__callbacks", "__guard", "_event")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.__guard = threading.Lock()
        self.__callbacks: list[Callable[[], None]] = []

    def cancel(self) -> None:
        """Ask every stage of the request to stop at its next checkpoint, and run the
        :meth:`on_cancel` callbacks (once, on the calling thread)."""
        with self.__guard:
            self._event.set()
            callbacks, self.__callbacks = self.__callbacks, []
        # Every callback runs even if one raises (the worker's withdrawal must not depend
        # on a caller's cleanup); the first error is raised afterwards.
        first: BaseException | None = None
        for callback in callbacks:
            try:
                callback()
            except BaseException as error:
                first = first or error
        if first is not None:
            raise first

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` once when the token is cancelled (now, if it already is).

        For what cannot wait for a checkpoint: the worker withdraws a queued job at once.
        The callback runs on the cancelling thread, with no lock of the token held.

        :returns: a function that unregisters ``callback`` (a no-op once it has run).
        """
        with self.__guard:
            if not self._event.is_set():
                self.__callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return _nothing

    def _forget(self, callback: Callable[[], None]) -> None:
        with self.__guard, contextlib.suppress(ValueError):
            self.__callbacks.remove(callback)

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` has been called."""
        return self._event.is_set()

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        """Raise :class:`~audiogate.errors.PreprocessCancelled` if cancelled.

        :param checkpoint: the stage polling the token.
        :param clip_index: zero-based clip being processed, or ``None`` for the request.
        """
        if self._event.is_set():
            raise PreprocessCancelled(checkpoint=checkpoint.value, clip_index=clip_index)


def _nothing() -> None:
    pass


class _NeverCancel(CancelToken):
    """A token that cannot be cancelled (for one-shot callers and tests)."""

    __slots__ = ()

    def cancel(self) -> None:
        raise TypeError("the NEVER token cannot be cancelled; create a CancelToken()")

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        # Shared by every caller: keeps nothing (its callbacks could never run).
        return _nothing


#: A shared token that is never cancelled.
NEVER: Final[CancelToken] = _NeverCancel()


def cancellable(cancel: CancelToken | None) -> CancelToken:
    """The token a request runs on: the caller's, or a fresh one where the caller gave
    none or :data:`NEVER` (which refuses ``cancel()``; a timeout or a cancelled awaiting
    task must still cancel the request, and nobody else could)."""
    return CancelToken() if cancel is None or cancel is NEVER else cancel
