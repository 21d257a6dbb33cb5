"""The float-float real FFT of the MLX frontends against numpy's float64 FFT."""

from __future__ import annotations

import numpy as np
import pytest
from mlx_helpers import MLX_REASON

mx = pytest.importorskip("mlx.core", reason=MLX_REASON)

from audiogate.dsp.mlx_fft import (  # noqa: E402 (after the importorskip)
    float_float_constant,
    product_float_float,
    rfft_float_float,
    two_product,
)

#: Each returned bin is the exact bin rounded to float32 (each part within half an ulp,
#: so within 2^-24·sqrt(2) of the bin's magnitude), plus the float-float error, bounded
#: here by 1e-13 of the row's strongest bin. A float32 FFT misses the second bound by
#: five orders of magnitude on a windowed tone.
ROUNDING = 2.0**-24 * np.sqrt(2.0)
FLOAT_FLOAT = 1e-13


def _frames(kind: str, rows: int, length: int, *, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(rows * 97 + length) / 16_000
    if kind == "noise":
        x = rng.uniform(-1.0, 1.0, t.shape[0])
    elif kind == "tone":  # one strong bin, the rest leakage far below it
        x = 0.5 * np.sin(2 * np.pi * 440 * t)
    elif kind == "impulse":
        x = np.zeros(t.shape[0])
        x[::53] = 1.0
    else:
        raise ValueError(kind)
    frames = np.lib.stride_tricks.sliding_window_view(x, length)[::97][:rows]
    return (frames * np.hanning(length + 2)[1:-1]).astype(np.float32)


def _excess(got: tuple[mx.array, mx.array], exact: np.ndarray) -> float:
    """Largest error beyond each bin's float32 rounding, relative to the row's peak."""
    values = np.asarray(got[0], dtype=np.float64) + 1j * np.asarray(got[1], dtype=np.float64)
    error = np.abs(values - exact) - ROUNDING * np.abs(exact)
    peak = np.maximum(np.abs(exact).max(axis=1, keepdims=True), 1e-300)
    return float((error / peak).max())


def test_two_product_is_exact() -> None:
    rng = np.random.default_rng(7)
    scale = np.float32(2.0) ** rng.integers(-40, 40, 200_000).astype(np.float32)
    a = (rng.standard_normal(200_000) * scale).astype(np.float32)
    b = rng.standard_normal(200_000).astype(np.float32)
    a[:5] = [0.0, -0.0, 1.0, np.float32(1) + np.float32(2**-23), np.float32(-3.999999)]
    p, e = two_product(mx.array(a), mx.array(b))
    exact = a.astype(np.float64) * b.astype(np.float64)
    np.testing.assert_array_equal(np.asarray(p), (a * b))
    np.testing.assert_array_equal(
        np.asarray(p).astype(np.float64) + np.asarray(e).astype(np.float64), exact
    )


def test_product_with_a_float64_constant_keeps_its_precision() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(-1.0, 1.0, 4096).astype(np.float32)
    window = np.hamming(4096) * 32768.0
    hi, lo, split_high, split_low = float_float_constant(window)
    ph, pl = product_float_float((mx.array(a), None), (hi, lo), (split_high, split_low))
    got = np.asarray(ph).astype(np.float64) + np.asarray(pl).astype(np.float64)
    exact = a.astype(np.float64) * window
    assert np.abs(got - exact).max() <= 2.0**-44 * np.abs(exact).max()
    # float32 alone is 2^20 times coarser.
    rounded = (a * window.astype(np.float32)).astype(np.float64)
    assert np.abs(rounded - exact).max() > 2.0**-30 * np.abs(exact).max()


@pytest.mark.parametrize("kind", ["noise", "tone", "impulse"])
@pytest.mark.parametrize(
    ("n", "length"),
    [
        (2, 1),
        (2, 2),
        (4, 3),
        (256, 200),  # Phi-4 MM at 8 kHz
        (512, 400),  # Phi-4 MM at 16 kHz
        (1024, 512),  # Gemma 3n: the first stage's odd half is zero
        (1024, 513),
        (1024, 1024),
    ],
)
def test_matches_the_float64_fft(kind: str, n: int, length: int) -> None:
    frames = _frames(kind, 37, length)
    exact = np.fft.rfft(frames.astype(np.float64), n=n, axis=1)
    got = rfft_float_float(mx.array(frames), n=n, low=0, high=n // 2 + 1)
    assert all(part.dtype == mx.float32 for part in got)
    assert all(tuple(part.shape) == exact.shape for part in got)
    assert _excess(got, exact) <= FLOAT_FLOAT


def test_a_float32_fft_fails_the_same_bound() -> None:
    """The bound above is one a float32 FFT cannot meet: the test discriminates."""
    frames = _frames("tone", 37, 512)
    exact = np.fft.rfft(frames.astype(np.float64), n=1024, axis=1)
    single = mx.fft.rfft(mx.array(frames), n=1024, axis=-1)
    assert _excess((mx.real(single), mx.imag(single)), exact) > 1e4 * FLOAT_FLOAT


@pytest.mark.parametrize(("low", "high"), [(0, 1), (9, 487), (256, 257), (300, 513)])
def test_a_band_of_bins_equals_those_bins_of_the_whole(low: int, high: int) -> None:
    frames = mx.array(_frames("noise", 11, 512, seed=2))
    whole = rfft_float_float(frames, n=1024, low=0, high=513)
    band = rfft_float_float(frames, n=1024, low=low, high=high)
    for part_whole, part_band in zip(whole, band, strict=True):
        np.testing.assert_array_equal(np.asarray(part_band), np.asarray(part_whole)[:, low:high])


def test_rows_are_independent() -> None:
    """One row alone gives the same bits as inside a block (blocks may be any size)."""
    frames = mx.array(_frames("tone", 9, 400, seed=4))
    block = rfft_float_float(frames, n=512, low=0, high=257)
    for row in (0, 4, 8):
        alone = rfft_float_float(frames[row : row + 1], n=512, low=0, high=257)
        for part_block, part_alone in zip(block, alone, strict=True):
            np.testing.assert_array_equal(np.asarray(part_alone)[0], np.asarray(part_block)[row])


def test_a_float64_window_keeps_its_precision() -> None:
    """``window=``: the FFT of ``frames × window`` with the float64 window's product, as
    Phi-4 MM's original takes it, not of the product rounded to float32."""
    frames = _frames("tone", 23, 400, seed=5) * np.float32(4.0)
    window = np.hamming(400) * 32768.0
    exact = np.fft.rfft(frames.astype(np.float64) * window, n=512, axis=1)
    got = rfft_float_float(
        mx.array(frames), n=512, low=0, high=257, window=float_float_constant(window)
    )
    assert _excess(got, exact) <= FLOAT_FLOAT
    rounded = mx.array(frames * window.astype(np.float32))
    assert _excess(rfft_float_float(rounded, n=512, low=0, high=257), exact) > 1e3 * FLOAT_FLOAT


@pytest.mark.parametrize(
    ("n", "low", "high", "length", "message"),
    [
        (400, 0, 201, 400, "power of two"),
        (1, 0, 1, 1, "power of two"),
        (512, 0, 258, 400, "not within 0..256"),
        (512, 5, 5, 400, "not within"),
        (512, 0, 257, 513, "do not fit"),
    ],
)
def test_bad_arguments_are_refused(n, low, high, length, message) -> None:
    frames = mx.zeros((2, length), dtype=mx.float32)
    with pytest.raises(ValueError, match=message):
        rfft_float_float(frames, n=n, low=low, high=high)


def test_no_rows_give_no_bins() -> None:
    real, imag = rfft_float_float(mx.zeros((0, 400), dtype=mx.float32), n=512, low=3, high=9)
    assert tuple(real.shape) == tuple(imag.shape) == (0, 6)
    assert real.dtype == imag.dtype == mx.float32


def test_many_passes_equal_one_row_at_a_time() -> None:
    """More rows than one pass holds: the passes join without a seam."""
    from audiogate.dsp.mlx_budget import FFT_PASS_ELEMENTS

    rows = 2 * (FFT_PASS_ELEMENTS // 256) + 3
    frames = mx.array(_frames("noise", rows, 200, seed=6))
    whole = rfft_float_float(frames, n=256, low=0, high=129)
    for row in (0, FFT_PASS_ELEMENTS // 256, rows - 1):
        alone = rfft_float_float(frames[row : row + 1], n=256, low=0, high=129)
        for part_whole, part_alone in zip(whole, alone, strict=True):
            np.testing.assert_array_equal(np.asarray(part_alone)[0], np.asarray(part_whole)[row])
