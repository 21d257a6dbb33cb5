"""The shared vocabulary of the acquisition readers: origins, byte caps and refusals.

Readers (inline, files, net) are pure about *where* a clip sits in a request: they get a
:class:`ClipContext` (the clip index, its byte cap, the cancel token) and raise
:class:`SourceRefused` with its detail; :mod:`audiogate.acquire.acquire` turns that into
an :class:`~audiogate.errors.AcquisitionError` naming the clip and its origin.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Final

import attrs

from audiogate.budget import BudgetHold
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import LimitError, MemoryLimitError

__all__ = [
    "CHUNK_BYTES",
    "ORIGIN_BYTES",
    "ORIGIN_DATA_URI",
    "ORIGIN_FILE",
    "ORIGIN_INLINE",
    "ORIGIN_PART",
    "ORIGIN_URL",
    "ByteCap",
    "ClipContext",
    "LinkedToken",
    "RequestBudget",
    "SourceRefused",
]

ORIGIN_INLINE: Final = "inline base64"
ORIGIN_DATA_URI: Final = "data URI"
ORIGIN_URL: Final = "URL"
ORIGIN_FILE: Final = "file"
ORIGIN_BYTES: Final = "bytes"
#: A content part too malformed to say which kind of source it declares.
ORIGIN_PART: Final = "content part"

#: Read size of files and the unit of cancellation checks (mlxcel's 64 KiB,
#: ``read_local_bytes_with_limit_cancel`` in ``src/server/media.rs``).
CHUNK_BYTES: Final = 64 * 1024


class SourceRefused(Exception):
    """A source is refused, ``detail`` saying why (converted to ``AcquisitionError`` by the
    caller, whose ``detail`` it becomes; ``reason`` is the metrics label of an error)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


@attrs.frozen(kw_only=True)
class ByteCap:
    """How many encoded bytes one source may have, and which limit says so.

    :param maximum: bytes this source may have (the smaller of the per-clip cap and what
        is left of the request's).
    :param limit: the binding limit's name (``"encoded bytes per clip"`` / ``"... request"``).
    :param limit_maximum: that limit's configured maximum.
    :param counted: bytes already counted against that limit by earlier clips.
    """

    maximum: int
    limit: str
    limit_maximum: int
    counted: int
    clip_index: int

    @property
    def base64_chars(self) -> int:
        """Most base64 characters that can decode to ``maximum`` bytes: ``ceil(max/3)*4``."""
        return math.ceil(self.maximum / 3) * 4

    def exceeded(self, size: int) -> LimitError:
        """The error for a source of (at least) ``size`` bytes."""
        kind = MemoryLimitError if self.limit == "encoded bytes per request" else LimitError
        return kind(
            self.limit,
            actual=self.counted + size,
            maximum=self.limit_maximum,
            clip_index=self.clip_index,
        )

    def check(self, size: int) -> None:
        """Raise :meth:`exceeded` if ``size`` is over :attr:`maximum`."""
        if size > self.maximum:
            raise self.exceeded(size)


class RequestBudget:
    """Encoded bytes acquired so far by one request, and the cap of the next source.

    The per-request limit is raised as :class:`~audiogate.errors.MemoryLimitError`, the
    class the pipeline's preflight uses for the same limit.
    """

    __slots__ = ("_per_clip", "_per_request", "total")

    def __init__(self, *, max_bytes_per_clip: int, max_bytes_per_request: int) -> None:
        self._per_clip = max_bytes_per_clip
        self._per_request = max_bytes_per_request
        self.total = 0

    def cap(self, clip_index: int) -> ByteCap:
        """The cap of clip ``clip_index``: whichever of the two limits binds first."""
        remaining = self._per_request - self.total
        if self._per_clip <= remaining:
            return ByteCap(
                maximum=self._per_clip,
                limit="encoded bytes per clip",
                limit_maximum=self._per_clip,
                counted=0,
                clip_index=clip_index,
            )
        return ByteCap(
            maximum=max(remaining, 0),
            limit="encoded bytes per request",
            limit_maximum=self._per_request,
            counted=self.total,
            clip_index=clip_index,
        )

    def add(self, size: int) -> None:
        """Count ``size`` acquired bytes."""
        self.total += size


class LinkedToken(CancelToken):
    """A token cancelled by itself or by its parent (for work handed to a thread).

    The awaiting task cancels its own token when it is cancelled, so a worker thread stops
    at its next chunk even though the caller's token was never cancelled.
    """

    __slots__ = ("_parent",)

    def __init__(self, parent: CancelToken) -> None:
        super().__init__()
        self._parent = parent

    @property
    def cancelled(self) -> bool:
        return super().cancelled or self._parent.cancelled

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        self._parent.check(checkpoint, clip_index)
        super().check(checkpoint, clip_index)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        # Once, whichever of the two is cancelled first.
        fired = threading.Lock()

        def once() -> None:
            if fired.acquire(blocking=False):
                callback()

        forget_own = super().on_cancel(once)
        forget_parent = self._parent.on_cancel(once)

        def forget() -> None:
            forget_own()
            forget_parent()

        return forget


@attrs.frozen(kw_only=True)
class ClipContext:
    """Where a reader is: the clip index, its byte cap, the request's cancel token and
    its share of the server's in-flight acquisition bytes (if it has one)."""

    clip_index: int
    cap: ByteCap
    cancel: CancelToken = NEVER
    held: BudgetHold | None = None

    def check_cancel(self) -> None:
        """Raise :class:`~audiogate.errors.PreprocessCancelled` (``Acquisition``) if cancelled."""
        self.cancel.check(Checkpoint.ACQUISITION, self.clip_index)

    def hold(self, nbytes: int) -> None:
        """Count ``nbytes`` more of this source in the shared in-flight budget.

        :raises MemoryLimitError: the shared budget is full (names this clip).
        """
        if self.held is None:
            return
        try:
            self.held.take(nbytes)
        except MemoryLimitError as exc:
            raise MemoryLimitError(
                exc.limit, actual=exc.actual, maximum=exc.maximum, clip_index=self.clip_index
            ) from None
