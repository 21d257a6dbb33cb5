"""Triangular mel banks and their sparse projection, for the families' feature kernels.

A family keeps its own mel scale, band edges, bin positions and dtype path (those are
what its reference pins); this module only turns them into triangles, in one of the two
ways the reference extractors do:

* **slopes** (``width=None``): transformers' ``_create_triangular_filter_bank`` and
  librosa's ``filters.mel``: filter ``m`` is ``max(0, min(down, up))`` with ``down =
  (e[m] - x) / -(e[m+1] - e[m])`` rising from its left edge and ``up = (e[m+2] - x) /
  (e[m+2] - e[m+1])`` falling to its right edge, in float64, expression for expression.
  Build it on mel positions for triangles in mel space (Phi-4 MM native) or on Hz
  positions for triangles in Hz (Gemma 3n, Qwen2-Audio); ``norm="slaney"`` then scales
  filter ``m`` by ``2 / (e[m+2] - e[m])`` (Slaney's equal area, Qwen2-Audio).
* **distance** (``width=Δ``): SpeechLib's ``speechlib_mel`` (Phi-4 MM remote code):
  ``1 - |e[m+1] - x| / Δ`` strictly inside ``(e[m], e[m+2])``, zero elsewhere, with one
  fixed width ``Δ`` for every filter.

Both reproduce the families' former bank builders bit for bit
(``tests/core/test_dsp_melbank.py`` keeps those as its oracle).

A bank ``[shape=(bins, mels)]`` covers few of its bins per filter, so the kernels project
on it sparsely (:func:`sparse_projection`) or on the bins it covers
(:func:`covered_bins`).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from audiogate.records import readonly

__all__ = ["SparseProjection", "covered_bins", "sparse_projection", "triangular_filters"]


def triangular_filters(
    edges: npt.ArrayLike,
    positions: npt.ArrayLike,
    *,
    width: float | None = None,
    norm: Literal["slaney"] | None = None,
) -> npt.NDArray[np.float64]:
    """Triangular filters over FFT bins, float64 ``[shape=(len(positions), len(edges) - 2)]``.

    :param edges: the ``mels + 2`` band edges, ascending, on the axis the triangles are
        built in (mel or Hz): filter ``m`` rises from ``edges[m]``, peaks at
        ``edges[m + 1]`` and falls to ``edges[m + 2]``.
    :param positions: each FFT bin's position on the same axis ``[shape=(bins,)]``
        (float32 positions are widened exactly, as numpy does in the reference).
    :param width: ``None`` for the slopes formula; a number for SpeechLib's distance
        formula with this triangle half-width (see the module docstring).
    :param norm: ``"slaney"`` to scale each filter to equal area (slopes formula only).
    :raises ValueError: fewer than three edges, no bins, or ``norm`` with ``width``.
    """
    e = np.asarray(edges, dtype=np.float64)
    x = np.asarray(positions, dtype=np.float64)
    if e.ndim != 1 or e.shape[0] < 3 or x.ndim != 1 or x.shape[0] < 1:
        raise ValueError(
            f"need at least 3 edges and 1 bin position, 1-D; got edges {list(e.shape)}, "
            f"positions {list(x.shape)}"
        )
    if width is not None:
        if norm is not None:
            raise ValueError(f"norm={norm!r} applies to the slopes formula, not width={width}")
        left, center, right = e[None, :-2], e[None, 1:-1], e[None, 2:]
        column = x[:, None]
        inside = (left < column) & (column < right)
        return np.where(inside, 1.0 - np.abs(center - column) / width, 0.0)
    gaps = np.diff(e)
    slopes = e[None, :] - x[:, None]
    down = -slopes[:, :-2] / gaps[:-1]
    up = slopes[:, 2:] / gaps[1:]
    bank: npt.NDArray[np.float64] = np.maximum(0.0, np.minimum(down, up))
    if norm == "slaney":
        bank *= 2.0 / (e[2:] - e[:-2])
    elif norm is not None:
        raise ValueError(f"norm must be None or 'slaney', got {norm!r}")
    return bank


def covered_bins(bank: npt.NDArray[Any]) -> tuple[int, int]:
    """The bins ``[low, high)`` from the first to the last that has a non-zero weight.

    :param bank: ``[shape=(bins, filters)]`` (bins by filters).
    :raises ValueError: the bank is all zero.
    """
    covered = np.flatnonzero(np.asarray(bank).any(axis=1))
    if covered.size == 0:
        raise ValueError(f"the bank {list(np.shape(bank))} has no non-zero weight")
    return int(covered[0]), int(covered[-1]) + 1


class SparseProjection(NamedTuple):
    """A bank as a float32 SciPy CSR array, and the bins it is applied to.

    ``matrix @ magnitudes[start:stop]`` (``[shape=(stop - start, frames)]``, bins by
    frames) gives the mel energies ``[shape=(filters, frames)]``. SciPy sums each row's
    stored weights in column order, so a frame's values do not depend on the frames
    beside it, nor on ``start``.
    """

    matrix: Any  #: read-only ``scipy.sparse.csr_array`` ``[shape=(filters, stop - start)]``
    start: int
    stop: int


def sparse_projection(
    bank: npt.NDArray[np.floating[Any]], *, trim: bool = True
) -> SparseProjection:
    """``bank`` ``[shape=(bins, filters)]`` cast to float32 (as the references cast it for
    their matmul) and stored sparse, read-only.

    :param trim: keep only :func:`covered_bins` (``start``, ``stop``); ``False`` keeps
        every bin (``start = 0``, ``stop = bins``).
    """
    import scipy.sparse

    start, stop = covered_bins(bank) if trim else (0, int(bank.shape[0]))
    matrix = scipy.sparse.csr_array(np.ascontiguousarray(bank[start:stop].T, dtype=np.float32))
    for part in (matrix.data, matrix.indices, matrix.indptr):
        readonly(part)
    return SparseProjection(matrix, start, stop)
