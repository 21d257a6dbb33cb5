"""The direct NumPy/SciPy routines: taken only where a probe agrees with the public call,
and the same values either way."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from audiogate.dsp import direct


def _rows() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((5, 400))


def test_the_direct_routines_are_taken_on_this_numpy_and_scipy() -> None:
    assert direct._RFFT_N_EVEN is not None
    assert direct._CSR_MATVECS is not None


@pytest.mark.parametrize("routine", ["direct", "public"])
def test_rfft_rows_is_numpys_rfft_either_way(monkeypatch: pytest.MonkeyPatch, routine: str) -> None:
    if routine == "public":
        monkeypatch.setattr(direct, "_RFFT_N_EVEN", None)
    rows = _rows()
    out = np.empty((5, 201), dtype=np.complex128)
    direct.rfft_rows(rows, out)
    assert np.array_equal(out, np.fft.rfft(rows, axis=-1))


@pytest.mark.parametrize("routine", ["direct", "public"])
def test_csr_product_into_is_scipys_product_or_declines(
    monkeypatch: pytest.MonkeyPatch, routine: str
) -> None:
    if routine == "public":
        monkeypatch.setattr(direct, "_CSR_MATVECS", None)
    rng = np.random.default_rng(2)
    bank = sparse.csr_matrix(np.where(rng.random((8, 201)) < 0.1, rng.random((8, 201)), 0.0))
    bank = bank.astype(np.float32)
    dense = rng.random((201, 7)).astype(np.float32)
    out = np.zeros((8, 7), dtype=np.float32)
    taken = direct.csr_product_into(bank, dense, out)
    assert taken == (routine == "direct")
    if taken:
        assert np.array_equal(out, bank @ dense)
    else:
        assert not out.any()  # nothing written: the caller uses ``@``


def test_a_routine_that_disagrees_or_changed_its_signature_is_not_taken() -> None:
    def wrong(rows, factor, *, axes, out):  # type: ignore[no-untyped-def]
        out[...] = 0

    def other_signature(rows, out):  # type: ignore[no-untyped-def]
        raise AssertionError("not called this way")

    assert direct._probe_rfft(wrong) is None
    assert direct._probe_rfft(other_signature) is None
    assert direct._probe_rfft(None) is None
    assert direct._probe_rfft(direct._RFFT_N_EVEN) is direct._RFFT_N_EVEN
