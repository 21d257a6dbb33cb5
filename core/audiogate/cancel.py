"""Cooperative cancellation: one token per request, polled at named checkpoints.

Long loops (chunk walks, decode blocks, resampler and feature blocks) call
:meth:`CancelToken.check` every few thousand samples or a few hundred frames, so a
cancelled request stops promptly rather than between stages only.
"""

from __future__ import annotations

import enum
import threading
from typing import Final

from audiogate.errors import PreprocessCancelled

__all__ = ["NEVER", "CancelToken", "Checkpoint"]


class Checkpoint(enum.StrEnum):
    """Where a cancellation can be noticed (the seed's ``AudioPreprocessCheckpoint``)."""

    QUEUE = "Queue"
    ACQUISITION = "Acquisition"
    DECODE = "Decode"
    RESAMPLE = "Resample"
    FEATURE = "Feature"


class CancelToken:
    """A thread-safe cancellation flag shared by every stage of one request."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask every stage of the request to stop at its next checkpoint."""
        self._event.set()

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


class _NeverCancel(CancelToken):
    """A token that cannot be cancelled (for one-shot callers and tests)."""

    __slots__ = ()

    def cancel(self) -> None:
        raise TypeError("the NEVER token cannot be cancelled; create a CancelToken()")


#: A shared token that is never cancelled.
NEVER: Final[CancelToken] = _NeverCancel()
