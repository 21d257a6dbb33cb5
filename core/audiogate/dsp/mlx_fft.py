"""A real FFT in float-float arithmetic, for the MLX frontends.

MLX's FFT is float32 only, and a float32 FFT's rounding error is relative to the whole
frame: about 1e-7 of the frame's spectrum lands in every bin, so a mel band 100 dB below
its frame's strongest is off by far more than 1e-4 in the log. The numpy paths round a
float64 FFT. To agree with them within 1e-4 on every band, the MLX frontends of Phi-4 MM
and Gemma 3n take their spectra from :func:`rfft_float_float`.

Every value is an unevaluated sum ``hi + lo`` of two float32 (about 44 significant bits),
and the arithmetic is the classic error-free one: ``two_sum`` for additions, Dekker's
product with the operands split by masking their low 12 mantissa bits (no multiply in the
split, so fused multiply-add contraction cannot change it). Each step is its own MLX op and
nothing here is compiled, so no backend can fuse or reassociate the compensations away;
only float32 add, subtract, multiply and bit masks are used, which every MLX device has.

The algorithm: real frames ``x`` (zero-padded to ``n``) are packed as the complex
``z[j] = x[2j] + i·x[2j+1]``, transformed by a radix-2 Stockham FFT of ``n/2`` points, and
unpacked into the real spectrum's bins ``X[k] = ½(Z[k] + Z*[n/2-k]) + ½W^k·(-i)(Z[k] -
Z*[n/2-k])`` with ``W = e^{-2πi/n}``, for the requested bins only. The result is accurate
to about ``2^-44`` of the frame's spectrum norm before its final rounding to float32,
which then makes each bin exact to about one float32 ulp of its own magnitude.

Complex float-float arrays are pairs ``(hi, lo)`` of float32 arrays whose axis 0 holds the
real part at 0 and the imaginary part at 1. Importing this module imports MLX.
"""

from __future__ import annotations

from typing import Any, cast

import mlx.core as mx
import numpy as np
import numpy.typing as npt

from audiogate.dsp.mlx_budget import FFT_PASS_ELEMENTS
from audiogate.dsp.mlx_constants import thread_constant

__all__ = [
    "FloatFloat",
    "Pair",
    "float_float_constant",
    "product_float_float",
    "rfft_float_float",
    "two_product",
]

#: Keeps sign, exponent and the top 11 stored mantissa bits: a 12-bit float32.
_HIGH_BITS = 0xFFFFF000

#: ``(hi, lo)`` float32 arrays.
Pair = tuple[Any, Any]
#: A float-float constant and the split of its ``hi``: ``(hi, lo, hi_high, hi_low)``.
FloatFloat = tuple[Any, Any, Any, Any]


def _split(a: Any) -> Pair:
    """``a = high + low`` exactly, each with at most 12 significant bits."""
    mask = thread_constant("fft.mask", lambda: mx.array(_HIGH_BITS, dtype=mx.uint32))
    high = (a.view(mx.uint32) & mask).view(mx.float32)
    return high, a - high


def _fast_two_sum(a: Any, b: Any) -> Pair:
    """``(s, e)`` with ``s + e = a + b`` exactly, for ``|a| >= |b|`` (or ``a`` zero)."""
    s = a + b
    return s, b - (s - a)


def _two_sum(a: Any, b: Any) -> Pair:
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth)."""
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


def two_product(a: Any, b: Any, b_split: Pair | None = None) -> Pair:
    """``(p, e)`` with ``p = fl(a·b)`` and ``p + e = a·b`` exactly (Dekker), float32 arrays.

    :param b_split: ``_split(b)`` when ``b`` is a constant whose split is kept.
    """
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b) if b_split is None else b_split
    return p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl


def _add(a: Pair, b: Pair) -> Pair:
    """Float-float ``a + b``, normalised: the "sloppy" sum, whose error is within about
    ``2^-44·(|a| + |b|)``, not relative to the sum (cancellation is not exact, and needs
    not be: the FFT's bound is relative to the frame)."""
    s, e = _two_sum(a[0], b[0])
    return _fast_two_sum(s, e + (a[1] + b[1]))


def _negate(a: Pair) -> Pair:
    return -a[0], -a[1]


def product_float_float(a: Pair, b: Pair, b_split: Pair | None = None) -> Pair:
    """Float-float ``a·b`` (the ``lo·lo`` term dropped), normalised.

    :param a: ``(hi, lo)``; ``lo`` may be ``None`` for an exact float32 ``a``.
    :param b_split: ``_split(b[0])`` when ``b`` is a constant whose split is kept.
    """
    p, e = two_product(a[0], b[0], b_split)
    cross = a[0] * b[1] if a[1] is None else a[0] * b[1] + a[1] * b[0]
    return _fast_two_sum(p, e + cross)


def float_float_constant(values: npt.NDArray[np.float64]) -> FloatFloat:
    """float64 ``values`` as float-float ``(hi, lo)`` and the split of ``hi`` (the operand
    and ``b_split`` of :func:`product_float_float`), unevaluated ``mx.array``."""
    hi = values.astype(np.float32)
    lo = (values - hi).astype(np.float32)
    hi_mx = mx.array(hi)
    split_high, split_low = _split(hi_mx)
    return hi_mx, mx.array(lo), split_high, split_low


def _rotation(angles: npt.NDArray[np.float64], shape: tuple[int, ...]) -> FloatFloat:
    """``e^{i·angles}`` as the operand of :func:`_rotate`: ``[cos, sin, sin, cos]`` on axis
    0, reshaped to ``(4, *shape)``, as :func:`float_float_constant`."""
    cos, sin = np.cos(angles), np.sin(angles)
    stacked = np.stack([cos, sin, sin, cos]).reshape((4, *shape))
    return float_float_constant(stacked)


def _rotate(value: Pair, rotation: FloatFloat) -> Pair:
    """Complex float-float ``value·w`` for the :func:`_rotation` ``w`` (broadcast)."""
    hi, lo, split_high, split_low = rotation
    # [re·cos, im·sin, re·sin, im·cos] in one product of four stacked operands.
    operands = mx.concatenate([value[0], value[0]]), mx.concatenate([value[1], value[1]])
    ph, pl = product_float_float(operands, (hi, lo), (split_high, split_low))
    signs = thread_constant("fft.signs", lambda: mx.array([-1.0, 1.0]))
    sign = signs.reshape((2,) + (1,) * (ph.ndim - 1))
    # re = re·cos - im·sin, im = re·sin + im·cos.
    return _add((ph[0::2], pl[0::2]), (ph[1::2] * sign, pl[1::2] * sign))


def _stage_rotation(m: int) -> FloatFloat:
    """The twiddles ``e^{-iπj/m}``, ``j < m``, of the Stockham stage with ``m`` groups."""
    return cast(
        FloatFloat,
        thread_constant(("fft.stage", m), lambda: _rotation(-np.pi * np.arange(m) / m, (1, m, 1))),
    )


def _unpack_rotation(n: int, low: int, high: int) -> FloatFloat:
    """``W^k = e^{-2πik/n}`` for the bins ``low <= k < high``."""
    return cast(
        FloatFloat,
        thread_constant(
            ("fft.unpack", n, low, high),
            lambda: _rotation(-2.0 * np.pi * np.arange(low, high) / n, (high - low, 1)),
        ),
    )


def _times_minus_i(value: Pair) -> Pair:
    """``-i·value`` = ``(value.imag, -value.real)``, exact."""
    return (
        mx.stack([value[0][1], -value[0][0]]),
        mx.stack([value[1][1], -value[1][0]]),
    )


def _quarter_turn(value: Pair) -> Pair:
    """Group 0 unchanged and group 1 times ``-i``, of ``[shape=(2, c, 2, rows)]``."""
    turned = _times_minus_i((value[0][:, :, 1:], value[1][:, :, 1:]))
    return (
        mx.concatenate([value[0][:, :, :1], turned[0]], axis=2),
        mx.concatenate([value[1][:, :, :1], turned[1]], axis=2),
    )


def _complex_fft(z: Pair, *, nonzero: int) -> Pair:
    """Stockham radix-2 FFT along axis 1 of complex float-float ``z``.

    Rows are the last axis, so every half taken at a stage is a contiguous block.

    :param z: ``(hi, lo)`` float32 ``[shape=(2, m, rows)]``, ``m`` a power of two, zero
        beyond the first ``nonzero`` entries of axis 1.
    """
    hi, lo = z
    _, size, rows = hi.shape
    # (re/im, offset c, frequency within the sub-transforms, rows).
    hi, lo = hi.reshape(2, size, 1, rows), lo.reshape(2, size, 1, rows)
    groups = 1
    if size > 1 and nonzero <= size // 2:
        # The first stage's odd half is zero: both outputs are the even half.
        half = size // 2
        hi = mx.concatenate([hi[:, :half], hi[:, :half]], axis=2)
        lo = mx.concatenate([lo[:, :half], lo[:, :half]], axis=2)
        groups = 2
    while groups < size:
        half = size // (2 * groups)
        even = hi[:, :half], lo[:, :half]
        odd = hi[:, half:], lo[:, half:]
        if groups == 1:  # the twiddle is 1
            turned = odd
        elif groups == 2:  # the twiddles are 1 and -i: (re, im)·(-i) = (im, -re), exact
            turned = _quarter_turn(odd)
        else:
            turned = _rotate(odd, _stage_rotation(groups))
        # [even + turned, even - turned] along the groups axis, in one addition.
        hi, lo = _add(
            (
                mx.concatenate([even[0], even[0]], axis=2),
                mx.concatenate([even[1], even[1]], axis=2),
            ),
            (
                mx.concatenate([turned[0], -turned[0]], axis=2),
                mx.concatenate([turned[1], -turned[1]], axis=2),
            ),
        )
        groups *= 2
    return hi.reshape(2, size, rows), lo.reshape(2, size, rows)


def rfft_float_float(
    frames: Any, *, n: int, low: int, high: int, window: FloatFloat | None = None
) -> Pair:
    """Bins ``low..high-1`` of the ``n``-point real FFT of each row, in float-float.

    Rows are transformed :data:`~audiogate.dsp.mlx_budget.FFT_PASS_ELEMENTS` ``// n`` at a
    time, each pass evaluated before the next is built, so MLX's temporaries stay within
    :data:`~audiogate.dsp.mlx_budget.FFT_PASS_BYTES` whatever the number of rows; rows are
    independent, so the values do not depend on the passes.

    :param frames: float32 ``[shape=(rows, length)]``, ``length <= n``, zero-padded to
        ``n``.
    :param window: :func:`float_float_constant` of ``[shape=(length,)]``: the FFT is then
        of ``frames × window``, the product taken in float-float (a float64 window keeps
        its precision).
    :param n: a power of two, at least 2.
    :returns: evaluated ``(real, imag)`` float32 ``[shape=(rows, high - low)]``: the exact
        spectrum's bins rounded to float32, within about ``2^-44`` of the row's spectrum
        norm before that rounding.
    """
    if n < 2 or n & (n - 1):
        raise ValueError(f"n must be a power of two >= 2, not {n}")
    if not 0 <= low < high <= n // 2 + 1:
        raise ValueError(f"bins [{low}, {high}) are not within 0..{n // 2}")
    rows, length = frames.shape
    if length > n:
        raise ValueError(f"frames of {length} samples do not fit an FFT of {n}")
    if rows == 0:
        empty = mx.zeros((0, high - low), dtype=mx.float32)
        return empty, empty
    step = max(1, FFT_PASS_ELEMENTS // n)
    parts: list[Pair] = []
    for first in range(0, rows, step):
        part = _rfft_pass(frames[first : first + step], n=n, low=low, high=high, window=window)
        mx.eval(part)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    out = mx.concatenate([p[0] for p in parts]), mx.concatenate([p[1] for p in parts])
    mx.eval(out)
    return out


def _rfft_pass(frames: Any, *, n: int, low: int, high: int, window: FloatFloat | None) -> Pair:
    """:func:`rfft_float_float` of a few rows, unevaluated."""
    half = n // 2
    length = frames.shape[1]
    if window is None:
        hi, lo = frames, mx.zeros_like(frames)
    else:
        hi, lo = product_float_float((frames, None), window[:2], window[2:])
    if length < n:
        hi = mx.pad(hi, [(0, 0), (0, n - length)])
        lo = mx.pad(lo, [(0, 0), (0, n - length)])
    # z[j] = x[2j] + i·x[2j+1] as [shape=(2, n/2, rows)]: axis 0 is (real, imaginary).
    hi, lo = hi.T, lo.T
    packed = mx.stack([hi[0::2], hi[1::2]]), mx.stack([lo[0::2], lo[1::2]])
    spectrum = _complex_fft(packed, nonzero=(length + 1) // 2)
    bins = np.arange(low, high)
    forward = mx.array((bins % half).astype(np.int32))
    mirrored = mx.array(((half - bins) % half).astype(np.int32))
    a = mx.take(spectrum[0], forward, axis=1), mx.take(spectrum[1], forward, axis=1)
    b = mx.take(spectrum[0], mirrored, axis=1), mx.take(spectrum[1], mirrored, axis=1)
    conjugate = thread_constant("fft.conjugate", lambda: mx.array([1.0, -1.0]).reshape(2, 1, 1))
    b = b[0] * conjugate, b[1] * conjugate  # Z*[n/2-k]
    total = _add(a, b)
    difference = _add(a, _negate(b))
    rotated = _rotate(_times_minus_i(difference), _unpack_rotation(n, low, high))
    out_hi, _ = _add(total, rotated)
    out = out_hi * 0.5
    return out[0].T, out[1].T
