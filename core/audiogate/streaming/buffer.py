"""A 1-D array that grows by appending, with amortised doubling, grown a batch ahead."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "FIRST_AHEAD_ITEMS",
    "GrowingArray",
    "capacity_bound",
    "planned_capacity",
]

#: Items of a first growth that still grows a batch ahead (more is a whole clip at once,
#: whose room for another would double its bytes).
FIRST_AHEAD_ITEMS = 1 << 15


def planned_capacity(
    *,
    capacity: int,
    size: int,
    stop: int,
    margin: int,
    minimum: int,
    first_ahead: int = FIRST_AHEAD_ITEMS,
) -> tuple[int, int]:
    """The capacity (items) that growing from ``size`` to ``stop`` items takes, and the
    margin (the largest growth so far, items) kept after it.

    A buffer filled in batches grows a batch ahead: a full batch (the largest so far, to
    within 1/1024: a resampler's batches may differ by a sample) leaves room for one
    more, growing now if it must, so a stream's last (shorter) batch and ``finish()``
    never grow and copy the clip; any other growth happens only when it does not fit
    (as does a first one over ``first_ahead``). A growth at least doubles.

    :param capacity: items the buffer holds room for now.
    :param size: items held now.
    :param stop: items held after the growth (``>= size``).
    :param margin: the margin so far (0 at first).
    :param minimum: the smallest capacity allocated.
    :param first_ahead: the largest first growth that grows ahead (items).
    """
    step = stop - size
    margin = max(margin, step)
    need = stop
    if 0 < step <= max(size, first_ahead) and step >= margin - margin // 1024:
        need = stop + margin
    if need <= capacity:
        return capacity, margin
    return max(need, 2 * capacity, minimum), margin


def capacity_bound(
    *, capacity: int, size: int, stop: int, margin: int, minimum: int, first_ahead: int
) -> int:
    """A bound on the capacity (items) after growing from ``size`` to at most ``stop``
    items in one append: :func:`planned_capacity` of any shorter append, whose batch
    may grow ahead where the whole step would not."""
    exact = planned_capacity(
        capacity=capacity,
        size=size,
        stop=stop,
        margin=margin,
        minimum=minimum,
        first_ahead=first_ahead,
    )[0]
    step = min(stop - size, max(size, first_ahead))
    if step <= 0:
        return exact
    need = stop + max(margin, step)
    return max(exact, capacity if need <= capacity else max(need, 2 * capacity, minimum))


class GrowingArray:
    """Appended chunks in one contiguous buffer (capacity doubles, at least 4,096 items;
    see :func:`planned_capacity` for the batch it grows ahead).

    :param dtype: the element type.
    """

    __slots__ = ("_buffer", "_dtype", "_margin", "_size")

    def __init__(self, dtype: Any) -> None:
        self._dtype = np.dtype(dtype)
        self._buffer: npt.NDArray[Any] = np.empty(0, dtype=self._dtype)
        self._size = 0
        self._margin = 0  # the largest append so far (items)

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer's capacity."""
        return int(self._buffer.nbytes)

    def capacity_for(self, size: int) -> int:
        """The capacity, in items, that holding ``size`` items takes (a bound, for one
        append or a shorter one)."""
        capacity = int(self._buffer.shape[0])
        if size <= self._size:
            return capacity
        return capacity_bound(
            capacity=capacity,
            size=self._size,
            stop=size,
            margin=self._margin,
            minimum=4096,
            first_ahead=FIRST_AHEAD_ITEMS,
        )

    def extend(self, values: npt.ArrayLike) -> None:
        """Append ``values`` ``[shape=(k,)]``, converted to the dtype."""
        block = np.asarray(values, dtype=self._dtype)
        if block.ndim != 1:
            raise ValueError(f"expected 1-D samples, not shape {block.shape}")
        size = self._size
        stop = size + block.shape[0]
        capacity, self._margin = planned_capacity(
            capacity=self._buffer.shape[0], size=size, stop=stop, margin=self._margin, minimum=4096
        )
        if capacity > self._buffer.shape[0]:
            grown = np.empty(capacity, dtype=self._dtype)
            grown[:size] = self._buffer[:size]
            self._buffer = grown
        self._buffer[size:stop] = block
        self._size = stop

    def view(self) -> npt.NDArray[Any]:
        """The items so far, a read-only view (valid until the next :meth:`extend`)."""
        out = self._buffer[: self._size]
        out.flags.writeable = False
        return out
