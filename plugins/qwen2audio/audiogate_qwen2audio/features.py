"""Whisper log-mel features (128 bins, 30 s window), computing only the frames that hold audio.

The reference (``WhisperFeatureExtractor(feature_size=128)``, torch path, as
``Qwen2AudioProcessor`` calls it) zero-pads every clip to 480,000 samples, reflect-pads
200 samples at both ends, runs a centred STFT (periodic Hann(400), hop 160), drops the
last of 3001 frames, takes the power spectrum, applies the Slaney mel bank, then
``log10(max(x, 1e-10))``, ``max(x, x.max() - 8)`` over the whole window and
``(x + 4) / 4``.

A frame whose window lies entirely in the zero padding has an exactly zero spectrum, so
its log-mel column is ``log10(1e-10) = -10`` before the clamp: a constant. Only the
first ``min(3000, ceil((N + 200) / 160))`` frames are computed (all of them near 30 s,
where the last frames also see the reflected end of the padded window); the constant
columns still take part in the window maximum.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import scipy.fft

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.records import readonly
from audiogate_qwen2audio.melbank import whisper_mel_matrix
from audiogate_qwen2audio.policy import HOP, MAX_FRAMES, MAX_SAMPLES, N_FFT, N_MELS
from audiogate_qwen2audio.tokens import WhisperGeometry

__all__ = [
    "BLOCK_FRAMES",
    "FEATURE_SHAPE",
    "LOG_FLOOR",
    "hann_window_torch",
    "whisper_log_mel",
    "working_bytes",
]

#: Frames per vectorised block (strided view → batched rFFT → one sparse mel product);
#: the cancellation token is polled between blocks.
BLOCK_FRAMES: Final = 256
FEATURE_SHAPE: Final = (N_MELS, MAX_FRAMES)
_PAD: Final = N_FFT // 2
_BINS: Final = N_FFT // 2 + 1
#: ``log10`` of the reference's float32 clamp floor, correctly rounded: -10.0, the log-mel
#: value of a silent frame (numpy's float32 ``log10`` is one ulp off here; torch is not).
LOG_FLOOR: Final = np.float32(np.log10(np.float64(np.float32(1e-10))))

# ``torch.hann_window(400)`` (float32) is ``0.5 - 0.5 * cos(float32(2π/400) * n)`` with
# torch's vectorised float32 cosine (SLEEF on x86); at these 12 indices that cosine is
# not correctly rounded, so the reference window differs by an ulp from the formula.
# Kept for parity: the window's ulps alone move near-floor log-mel values by ~4e-6.
_TORCH_HANN_FIXES: Final = {
    18: 0x3CA2A310,
    26: 0x3D287040,
    36: 0x3D9F6884,
    55: 0x3E337B8E,
    88: 0x3ED007C8,
    160: 0x3F678DDE,
    195: 0x3F7F9AFC,
    239: 0x3F68B920,
    341: 0x3E4C95B0,
    381: 0x3CB51230,
    385: 0x3C625860,
    398: 0x39815C00,
}


def hann_window_torch() -> npt.NDArray[np.float32]:
    """``torch.hann_window(400)`` bit for bit, without torch ``[shape=(400,)]``."""
    phase = np.arange(N_FFT, dtype=np.float32) * np.float32(2.0 * np.pi / N_FFT)
    cosine = np.cos(phase.astype(np.float64)).astype(np.float32)
    window = np.float32(0.5) + np.float32(-0.5) * cosine
    bits = window.view(np.uint32)
    for index, value in _TORCH_HANN_FIXES.items():
        bits[index] = value
    return window


_WINDOW: Final = readonly(hann_window_torch())


def working_bytes(geometry: WhisperGeometry) -> int:
    """Peak scratch of :func:`whisper_log_mel` besides its result: the padded buffer and
    one block (windowed frames in float32 and float64, the complex128 spectrum, float32
    power, and the mel energies in float32 and their float64 and float32 logs)."""
    frames = geometry.computed_frames
    buffer = (2 * _PAD + HOP * max(frames - 1, 0)) * 4
    block = min(frames, BLOCK_FRAMES)
    return buffer + block * (N_FFT * (4 + 8) + _BINS * (16 + 4) + N_MELS * (4 + 8 + 4))


def _padded_buffer(
    waveform: npt.NDArray[np.float32], computed_frames: int
) -> npt.NDArray[np.float32]:
    """The reference's reflect-padded 30 s window, up to the last computed frame's end.

    Index ``i + 200`` holds padded sample ``i``: the clip, then zeros up to 480,000, with
    the reflection of samples 1..200 in front and of samples 479,998.. behind 480,000.
    """
    samples = waveform.shape[0]
    end = HOP * (computed_frames - 1) + _PAD  # exclusive, in padded-sample coordinates
    buffer = np.zeros(_PAD + end, dtype=np.float32)
    buffer[_PAD : _PAD + samples] = waveform
    buffer[:_PAD] = buffer[2 * _PAD : _PAD : -1]
    if end > MAX_SAMPLES:
        tail = np.arange(MAX_SAMPLES, end)
        buffer[_PAD + tail] = buffer[_PAD + 2 * (MAX_SAMPLES - 1) - tail]
    return buffer


def whisper_log_mel(
    waveform: npt.NDArray[np.float32],
    geometry: WhisperGeometry,
    *,
    clip_index: int,
    cancel: CancelToken,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Log-mel features and frame mask of one clip, equal to the reference's.

    :param waveform: mono float32 at 16 kHz ``[shape=(geometry.samples,)]``.
    :param geometry: from :func:`~audiogate_qwen2audio.tokens.whisper_geometry`.
    :param clip_index: zero-based clip index (cancellation).
    :param cancel: polled every :data:`BLOCK_FRAMES` frames.
    :returns: read-only features float32 ``[shape=(128, 3000)]`` and read-only mask bool
        ``[shape=(3000,)]`` with ``geometry.valid_frames`` leading ones.
    """
    if waveform.shape != (geometry.samples,):
        raise ValueError(
            f"clip {clip_index}: waveform shape {waveform.shape} does not match the planned "
            f"{geometry.samples} samples"
        )
    cancel.check(Checkpoint.FEATURE, clip_index)
    computed = geometry.computed_frames
    features = np.empty(FEATURE_SHAPE, dtype=np.float32)
    # (x + 4) / 4 is applied per block as x * 0.25 + 1: scaling by a power of two is exact,
    # so both round identically; the clamp is applied afterwards in the scaled domain.
    peak = LOG_FLOOR if computed < MAX_FRAMES else np.float32(-np.inf)
    if computed:
        buffer = _padded_buffer(waveform, computed)
        frames = np.lib.stride_tricks.as_strided(
            buffer,
            shape=(computed, N_FFT),
            strides=(HOP * buffer.itemsize, buffer.itemsize),
            writeable=False,
        )
        mel = whisper_mel_matrix()
        power = np.empty((BLOCK_FRAMES, _BINS), dtype=np.float32)
        for start in range(0, computed, BLOCK_FRAMES):
            stop = min(computed, start + BLOCK_FRAMES)
            count = stop - start
            # The window product in float32, as torch.stft forms it; the FFT in float64, so
            # what remains is the reference's own float32 FFT error (see the module doc).
            windowed = (frames[start:stop] * _WINDOW).astype(np.float64)
            spectrum = scipy.fft.rfft(windowed, n=N_FFT, axis=-1, overwrite_x=True)
            parts = spectrum.view(np.float64)
            np.square(parts, out=parts)
            np.add(parts[:, 0::2], parts[:, 1::2], out=power[:count], casting="same_kind")
            energies = mel @ power[:count].T
            np.maximum(energies, np.float32(1e-10), out=energies)
            # Correctly rounded float32 log10, as torch's is in all but ~2e-4 of cases
            # (numpy's float32 log10 is an ulp off in half of them).
            logs = np.log10(energies, dtype=np.float64).astype(np.float32)
            peak = max(peak, logs.max())
            block = features[:, start:stop]
            np.multiply(logs, np.float32(0.25), out=block)
            block += np.float32(1.0)
            cancel.check(Checkpoint.FEATURE, clip_index)
    floor = (np.float32(peak - np.float32(8.0)) + np.float32(4.0)) * np.float32(0.25)
    head = features[:, :computed]
    np.maximum(head, floor, out=head)
    features[:, computed:] = max((LOG_FLOOR + np.float32(4.0)) * np.float32(0.25), floor)
    mask = np.zeros(MAX_FRAMES, dtype=np.bool_)
    mask[: geometry.valid_frames] = True
    return readonly(features), readonly(mask)
