"""The SpeechLib log-mel kernel of Phi-4 MM (numpy), blockwise with per-thread scratch.

Source: ``Phi4MMAudioFeatureExtractor._extract_spectrogram`` / ``_extract_features`` of
the remote-code ``processing_phi4mm.py`` (revision ``93f923e1``), and
``Phi4MultimodalFeatureExtractor`` of transformers 5.24 for the native variant;
framing in :mod:`audiogate_phi4mm.geometry`:

* Per frame, SpeechLib pre-emphasis in float32 (``y[0] = x[0] - 0.97·x[0]``,
  ``y[i] = x[i] - 0.97·x[i-1]``), times 32768, times the symmetric float64 Hamming
  window; float64 ``rfft``; cast to complex64; float32 power; float32 projection on
  the bank; ``ln(max(·, 1))``. Output ``[shape=(T, 80)]`` float32. At 8 kHz the bins
  past 127 are zero (``"fillzero"``), so the spectrum looks like 16 kHz audio with an
  empty 4-8 kHz half.

Each step keeps the original's dtype and operation order, so the spectrum is bit-exact
and the log-mel differs only where the float32 mel sums round differently (at most one
float32 ulp of the log). Work is done in blocks of :data:`BLOCK_FRAMES` frames into
preallocated scratch: strided frame views (no per-frame Python), one batched FFT per
block, and a cancellation check before each block, so a 30-minute clip never holds more
than one block of complex spectrum per thread. The float64 FFT is most of the work, so
clips of several blocks are spread over :data:`~audiogate.dsp.blocks.BLOCK_THREADS` threads
(:func:`audiogate.dsp.blocks.run_blocks`): each block gives the same values on any thread.
The block scratch is kept per thread (:func:`audiogate.dsp.scratch.thread_scratch`) and
:func:`working_bytes` counts one set per thread used.

The mel projection uses the bank's band structure: each triangle spans a few bins, so
the bank splits into :data:`MEL_GROUPS` runs of consecutive filters, each multiplied with
only the bins it covers (``[B, K_g] @ [K_g, N_g]``, 11 % of the dense multiply-adds).
Besides being faster, each product is small enough that BLAS runs it on the calling
thread: handing a few tens of microseconds of work per block to BLAS threads costs far
more than it saves when other processes share the cores, and next to the block threads it
is worse still (with 4 groups the largest product crosses OpenBLAS's threading threshold,
and two block threads then run slower than one).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.blocks import run_blocks
from audiogate.dsp.melbank import covered_bins
from audiogate.dsp.scratch import thread_scratch
from audiogate.records import readonly
from audiogate_phi4mm.geometry import Frontend, frame_count
from audiogate_phi4mm.melbank import FFT_BINS, MEL_FILTERS, BankName, float32_bank

__all__ = [
    "BLOCK_FRAMES",
    "INPUT_SCALE",
    "PREEMPHASIS",
    "block_count",
    "log_mel",
    "mel_rows",
    "power_rows",
    "working_bytes",
]

#: SpeechLib's pre-emphasis coefficient, applied in float32 as the original does.
PREEMPHASIS: Final = np.float32(0.97)
#: Waveforms in [-1, 1] are scaled to int16 units.
INPUT_SCALE: Final = 32768.0
#: Frames per block: the spectrum scratch is sized for this, and cancellation is polled
#: once per block. Smaller blocks fit the cache better but pay more Python per frame
#: (128 frames: ~10 % slower on a 30 s clip); 256 keeps a thread's scratch near 3 MiB.
BLOCK_FRAMES: Final = 256
#: Transient allocations inside numpy per block and thread: ufunc iterator buffers (8192
#: elements per operand, up to three complex128 operands, also for the casts of the
#: mixed-dtype window product and the complex64 rounding), matmul output copies for the
#: banded products and pocketfft's per-call scratch.
LIBRARY_SCRATCH_BYTES: Final = 512 * 1024
#: Runs of consecutive filters in the banded mel projection.
MEL_GROUPS: Final = 10
#: ``max(·, 1)`` operand: numpy (2.4) runs ``maximum`` with a scalar operand in a scalar
#: loop, 2-3x slower than with a broadcast row.
_MEL_FLOOR_ROW: Final = readonly(np.ones(MEL_FILTERS, dtype=np.float32))
_F32: Final = 4


def _scratch_layout(frontend: Frontend) -> dict[str, tuple[tuple[int, ...], type[np.generic]]]:
    """Name → (shape, dtype) of one block's buffers; the plan counts these bytes."""
    block = BLOCK_FRAMES
    span = (block - 1) * frontend.hop_samples + frontend.window_samples
    layout: dict[str, tuple[tuple[int, ...], type[np.generic]]] = {
        "emphasis": ((span - 1,), np.float32),
        "first": ((block,), np.float32),
        "scaled": ((block,), np.float32),
        "padded": ((block, frontend.fft_size), np.float64),
        "spectrum": ((block, frontend.fft_bins), np.complex128),
        "power": ((block, FFT_BINS), np.float32),
        "mel": ((block, MEL_FILTERS), np.float32),
    }
    if frontend.kept_bins < FFT_BINS:
        layout["narrow"] = ((block, frontend.kept_bins), np.complex64)
        layout["magnitude64"] = ((block, frontend.kept_bins), np.float64)
    return layout


class _Scratch:
    """One block's buffers for a frontend (kept per thread, see :func:`thread_scratch`)."""

    def __init__(self, frontend: Frontend) -> None:
        # np.zeros: the columns past the window stay zero (the FFT's zero padding) and so
        # do the power bins past kept_bins (the fillzero half); nothing writes there.
        arrays = {
            name: np.zeros(shape, dtype)
            for name, (shape, dtype) in _scratch_layout(frontend).items()
        }
        self.emphasis = arrays["emphasis"]
        # Frame t's samples 1.. are emphasis[t·hop :]; built once, as_strided is slow.
        self.frames = np.lib.stride_tricks.as_strided(
            self.emphasis,
            shape=(BLOCK_FRAMES, frontend.window_samples - 1),
            strides=(frontend.hop_samples * _F32, _F32),
            writeable=False,
        )
        self.first = arrays["first"]
        self.scaled = arrays["scaled"]
        self.padded = arrays["padded"]
        self.spectrum = arrays["spectrum"]
        self.power = arrays["power"]
        self.mel = arrays["mel"]
        self.narrow = arrays.get("narrow")
        self.magnitude64 = arrays.get("magnitude64")


def block_count(frames: int) -> int:
    """Blocks of :data:`BLOCK_FRAMES` frames for ``frames`` frames."""
    return -(-frames // BLOCK_FRAMES)


@cache
def working_bytes(frontend: Frontend, threads: int) -> int:
    """Scratch bytes of :func:`log_mel` on ``threads`` threads, computed without allocating."""
    layout = _scratch_layout(frontend).values()
    held = sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in layout)
    return threads * (held + LIBRARY_SCRATCH_BYTES)


@attrs.frozen
class _Band:
    """Filters ``[first, last)`` of a bank and the FFT bins ``[low, high)`` they cover."""

    first: int
    last: int
    low: int
    high: int
    weights: npt.NDArray[np.float32]  # [shape=(high - low, last - first)]


@cache
def _bank_bands(name: BankName) -> tuple[_Band, ...]:
    """The float32 bank ``[shape=(257, 80)]`` as :data:`MEL_GROUPS` dense bands."""
    bank = float32_bank(name)
    bands = []
    for group in range(MEL_GROUPS):
        first = group * MEL_FILTERS // MEL_GROUPS
        last = (group + 1) * MEL_FILTERS // MEL_GROUPS
        low, high = covered_bins(bank[:, first:last])
        weights = np.ascontiguousarray(bank[low:high, first:last])
        bands.append(_Band(first, last, low, high, readonly(weights)))
    return tuple(bands)


@cache
def _scaled_window(window_samples: int) -> npt.NDArray[np.float64]:
    # np.hamming is the symmetric window of the original; folding in the exact power of
    # two 32768 gives the same products as scaling the float32 frame first.
    return readonly(np.hamming(window_samples) * INPUT_SCALE)


def log_mel(
    waveform: npt.NDArray[np.float32],
    *,
    frontend: Frontend,
    bank: BankName,
    frames: int,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """SpeechLib log-mel of a mono waveform, block by block.

    :param waveform: float32 ``[shape=(n,)]`` with ``frame_count(n) == frames >= 1``.
    :returns: float32 ``[shape=(frames, 80)]`` (writable; the caller marks it read-only).
    """
    wave = np.ascontiguousarray(waveform, dtype=np.float32)
    if frames < 1 or frame_count(wave.shape[0], frontend) != frames:
        raise ValueError(
            f"clip {clip_index + 1}: {wave.shape[0]} samples give "
            f"{frame_count(wave.shape[0], frontend)} frames, not {frames}"
        )
    bands = _bank_bands(bank)
    window = _scaled_window(frontend.window_samples)
    out = np.empty((frames, MEL_FILTERS), dtype=np.float32)

    def block(index: int) -> None:
        start = index * BLOCK_FRAMES
        stop = min(start + BLOCK_FRAMES, frames)
        scratch = thread_scratch(("phi4mm.log_mel", frontend), lambda: _Scratch(frontend))
        origin = start * frontend.hop_samples
        length = (stop - start - 1) * frontend.hop_samples + frontend.window_samples
        _log_mel_block(
            wave[origin : origin + length],
            frontend=frontend,
            bands=bands,
            window=window,
            scratch=scratch,
            out=out[start:stop],
        )

    cancel.check(Checkpoint.FEATURE, clip_index)
    run_blocks(
        block_count(frames),
        block,
        cancel=cancel,
        checkpoint=Checkpoint.FEATURE,
        clip_index=clip_index,
    )
    return out


def _log_mel_block(
    region: npt.NDArray[np.float32],
    *,
    frontend: Frontend,
    bands: tuple[_Band, ...],
    window: npt.NDArray[np.float64],
    scratch: _Scratch,
    out: npt.NDArray[np.float32],
) -> None:
    """Log-mel of the ``len(out)`` frames of ``region`` (their samples) into ``out``."""
    power = scratch.power[: out.shape[0]]
    power_rows(region, frontend=frontend, window=window, scratch=scratch, out=power)
    mel_rows(power, bands=bands, scratch=scratch, out=out)


def power_rows(
    region: npt.NDArray[np.float32],
    *,
    frontend: Frontend,
    window: npt.NDArray[np.float64],
    scratch: _Scratch,
    out: npt.NDArray[np.float32],
) -> None:
    """Power spectra of the ``len(out)`` frames of ``region`` into ``out``
    ``[shape=(count, 257)]`` (at most :data:`BLOCK_FRAMES` rows; the columns past
    ``frontend.kept_bins`` are left as they are: zero). Each row depends only on its
    frame's samples (elementwise steps and one FFT per row), so any split of a block's
    frames gives the same rows."""
    count = out.shape[0]
    win, hop = frontend.window_samples, frontend.hop_samples
    length = region.shape[0]
    # Pre-emphasis once per sample (frames overlap 2.5x): e[j] = x[j+1] - 0.97·x[j].
    emph = scratch.emphasis[: length - 1]
    np.multiply(region[:-1], PREEMPHASIS, out=emph)
    np.subtract(region[1:], emph, out=emph)
    # The float32 values widen exactly inside the float64 product (numpy casts them in
    # its iterator buffer), so this is the original's float64 window product.
    padded = scratch.padded[:count]
    np.multiply(scratch.frames[:count], window[1:], out=padded[:, 1:win])
    # The first sample of each frame is pre-emphasised against itself: x0 - 0.97·x0.
    heads = region[: (count - 1) * hop + 1 : hop]
    first, scaled = scratch.first[:count], scratch.scaled[:count]
    np.multiply(heads, PREEMPHASIS, out=scaled)
    np.subtract(heads, scaled, out=first)
    np.multiply(first, window[0], out=padded[:, 0])
    # numpy's pocketfft, as the original calls it, into the block's buffer.
    spectrum = scratch.spectrum[:count]
    np.fft.rfft(padded, axis=1, out=spectrum)
    power = out
    if scratch.magnitude64 is None or scratch.narrow is None:
        # The original's complex64 cast and float32 |S| ("F->f"): the cast happens in
        # numpy's iterator buffer (the same rounding as a complex64 array), no extra pass.
        np.absolute(spectrum, out=power, signature="F->f", casting="same_kind")
    else:
        # fillzero concatenates float64 zeros to the complex64 bins, so |S| is taken in
        # complex128.
        kept = frontend.kept_bins
        narrow, magnitude64 = scratch.narrow[:count], scratch.magnitude64[:count]
        np.copyto(narrow, spectrum[:, :kept], casting="same_kind")
        np.abs(narrow, out=magnitude64, dtype=np.float64)
        power[:, :kept] = magnitude64
    np.square(power, out=power)


def mel_rows(
    power: npt.NDArray[np.float32],
    *,
    bands: tuple[_Band, ...],
    scratch: _Scratch,
    out: npt.NDArray[np.float32],
) -> None:
    """``ln(max(power @ bank, 1))`` of one block's power spectra ``[shape=(count, 257)]``
    into ``out`` ``[shape=(count, 80)]``. The band products are BLAS ``sgemm`` calls,
    whose sums depend on the product's shape and a row's place in it: a block's rows
    must go through in the whole clip's block (the same ``count``, from its first row)."""
    mel = scratch.mel[: power.shape[0]]
    for band in bands:
        np.matmul(power[:, band.low : band.high], band.weights, out=mel[:, band.first : band.last])
    np.maximum(mel, _MEL_FLOOR_ROW, out=mel)
    np.log(mel, out=out)
