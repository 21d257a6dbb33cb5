"""Encoded bytes held by acquisitions in flight, across the requests of a server.

The per-request ceilings bound one request; a server reading many requests' files and
URLs at once also needs a bound on all of them together, or N concurrent requests hold
N times the request ceiling before any admission budget sees them. An
:class:`AcquiredBytes` budget (set as ``AcquisitionPolicy.shared_bytes``) is that bound:
each request takes its bytes from it as they are known (a file's size before it is read,
a URL's ``Content-Length`` or its chunks as they arrive) and gives them all back when its
acquisition returns, after which the worker's admission budget counts the clips. A
request that does not fit is refused with ``MemoryLimitError`` (``"in-flight acquired
bytes"``), a transient refusal like the other shared budgets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from audiogate.budget import BudgetHold, ByteBudget

__all__ = ["ACQUIRED_BYTES_LIMIT", "AcquiredBytes", "RequestHold"]

#: The limit name of a refusal by :class:`AcquiredBytes`.
ACQUIRED_BYTES_LIMIT: Final = "in-flight acquired bytes"

#: One request's share of an :class:`AcquiredBytes` (the name it had before
#: :mod:`audiogate.budget`).
RequestHold = BudgetHold


class AcquiredBytes(ByteBudget):
    """The :class:`~audiogate.budget.ByteBudget` all in-flight acquisitions share, refusing
    under :data:`ACQUIRED_BYTES_LIMIT`.

    :param maximum: the bound, in bytes.
    :param on_change: called with the new total after every change (a gauge's ``set``).
    :raises ValueError: ``maximum`` is below 1.
    """

    def __init__(self, maximum: int, *, on_change: Callable[[int], None] | None = None) -> None:
        super().__init__(maximum, limit=ACQUIRED_BYTES_LIMIT, on_change=on_change)
