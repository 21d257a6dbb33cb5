"""A 1-D array that grows by appending, with amortised doubling."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["GrowingArray"]


class GrowingArray:
    """Appended chunks in one contiguous buffer (capacity doubles, at least 4,096 items).

    :param dtype: the element type.
    """

    __slots__ = ("_buffer", "_dtype", "_size")

    def __init__(self, dtype: Any) -> None:
        self._dtype = np.dtype(dtype)
        self._buffer: npt.NDArray[Any] = np.empty(0, dtype=self._dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer's capacity."""
        return int(self._buffer.nbytes)

    def capacity_for(self, size: int) -> int:
        """The capacity, in items, that holding ``size`` items takes."""
        capacity = int(self._buffer.shape[0])
        if size <= capacity:
            return capacity
        return max(size, 2 * capacity, 4096)

    def extend(self, values: npt.ArrayLike) -> None:
        """Append ``values`` ``[shape=(k,)]``, converted to the dtype."""
        block = np.asarray(values, dtype=self._dtype)
        if block.ndim != 1:
            raise ValueError(f"expected 1-D samples, not shape {block.shape}")
        stop = self._size + block.shape[0]
        if stop > self._buffer.shape[0]:
            grown = np.empty(self.capacity_for(stop), dtype=self._dtype)
            grown[: self._size] = self._buffer[: self._size]
            self._buffer = grown
        self._buffer[self._size : stop] = block
        self._size = stop

    def view(self) -> npt.NDArray[Any]:
        """The items so far, a read-only view (valid until the next :meth:`extend`)."""
        out = self._buffer[: self._size]
        out.flags.writeable = False
        return out
