"""NumPy's and SciPy's inner routines, called without their Python wrappers.

A stream's ``finish()`` runs after the audio's pause, when every Python step of a
wrapper (argument checks, dispatch) is cold; the kernels therefore call the routine the
wrapper ends in. Both routines are private to their packages, so each is taken only if
it is there and, on a probe at import, gives exactly what the public call gives;
otherwise the public call is used (same values, a little slower).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

__all__ = ["csr_product_into", "rfft_rows"]


def _probe_rfft(routine: Any) -> Any:
    """``routine`` (``rfft_n_even``, the ufunc behind ``np.fft.rfft`` for an even length)
    where it agrees with ``np.fft.rfft`` on a probe, else ``None``."""
    if routine is None:
        return None
    rows = np.random.default_rng(0).standard_normal((3, 16))
    want = np.fft.rfft(rows, axis=-1)
    try:
        got = np.empty_like(want)
        routine(rows, 1, axes=[(1,), (), (1,)], out=got)
    except Exception:  # any change of its signature: the public call
        return None
    return routine if np.array_equal(got, want) else None


def _probe_csr() -> Any:
    """SciPy's ``csr_matvecs`` (what ``csr_matrix @ dense`` runs) where it agrees with
    ``@`` on a probe, else ``None``."""
    try:
        from scipy.sparse._sparsetools import csr_matvecs as routine
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    bank = sparse.csr_matrix(np.where(rng.random((4, 6)) < 0.5, rng.random((4, 6)), 0.0))
    bank = bank.astype(np.float32)
    dense = rng.random((6, 3)).astype(np.float32)
    want = bank @ dense
    try:
        got = np.zeros((4, 3), dtype=np.float32)
        routine(4, 6, 3, bank.indptr, bank.indices, bank.data, dense.reshape(-1), got.reshape(-1))
    except Exception:  # any change of its signature: the public product
        return None
    return routine if np.array_equal(got, want) else None


_RFFT_N_EVEN: Any = _probe_rfft(
    getattr(getattr(np.fft, "_pocketfft_umath", None), "rfft_n_even", None)
)
_CSR_MATVECS: Any = _probe_csr()


def rfft_rows(rows: npt.NDArray[np.float64], out: npt.NDArray[np.complex128]) -> None:
    """``np.fft.rfft(rows, axis=-1, out=out)`` for rows of an even length ``n``
    ``[shape=(count, n)]`` into ``out`` ``[shape=(count, n // 2 + 1)]``."""
    if _RFFT_N_EVEN is None:
        np.fft.rfft(rows, axis=-1, out=out)
    else:
        _RFFT_N_EVEN(rows, 1, axes=[(1,), (), (1,)], out=out)


def csr_product_into(bank: Any, dense: npt.NDArray[Any], out: npt.NDArray[Any]) -> bool:
    """``out[...] = bank @ dense`` for a CSR ``bank`` ``[shape=(rows, k)]`` and a
    C-contiguous ``dense`` ``[shape=(k, count)]``, ``out`` zeroed and C-contiguous
    ``[shape=(rows, count)]`` of the same dtype; ``False`` (nothing written) where the
    direct routine is not available, so the caller uses ``@``."""
    if _CSR_MATVECS is None:
        return False
    rows, k = bank.shape
    _CSR_MATVECS(
        rows,
        k,
        dense.shape[1],
        bank.indptr,
        bank.indices,
        bank.data,
        dense.reshape(-1),
        out.reshape(-1),
    )
    return True
