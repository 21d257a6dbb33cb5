"""The original Phi-4 MM audio frontend, restated as the test oracle.

Restated step by step from the Phi-4 MM remote code (the
``processing_phi4mm.py`` of microsoft/Phi-4-multimodal-instruct, revision
``93f923e1a7727d1c4f446756212d9d3e8fcc5d81``: ``speechlib_mel``,
``Phi4MMAudioFeatureExtractor._extract_spectrogram`` / ``_extract_features`` /
``_compute_audio_embed_size``). It is deliberately written the way the original is
(a Python list of frame slices, ``np.roll``, ``np.fft.rfft`` in float64, a complex64
cast, float32 power and matmul), so that it is an independent oracle for the
vectorised, blockwise implementation in :mod:`audiogate_phi4mm.logmel`. Nothing
here is imported by the plugin.
"""

from __future__ import annotations

import numpy as np
import scipy.signal

__all__ = [
    "compute_audio_embed_size",
    "original_features",
    "original_resample",
    "original_spectrogram",
    "speechlib_mel",
]


def speechlib_mel(sample_rate, n_fft, n_mels, fmin=None, fmax=None):
    """SpeechLib FbankFC mel bank ``[shape=(n_mels, 1 + n_fft // 2)]`` float32."""
    bank_width = int(n_fft // 2 + 1)
    if fmax is None:
        fmax = sample_rate / 2
    if fmin is None:
        fmin = 0
    assert fmin >= 0
    assert fmin < fmax <= sample_rate / 2

    def mel(f):
        return 1127.0 * np.log(1.0 + f / 700.0)

    def bin2mel(fft_bin):
        return 1127.0 * np.log(1.0 + fft_bin * sample_rate / (n_fft * 700.0))

    def f2bin(f):
        return int((f * n_fft / sample_rate) + 0.5)

    klo = f2bin(fmin) + 1
    khi = f2bin(fmax)
    khi = max(khi, klo)
    mlo = mel(fmin)
    mhi = mel(fmax)
    m_centers = np.linspace(mlo, mhi, n_mels + 2)
    ms = (mhi - mlo) / (n_mels + 1)
    matrix = np.zeros((n_mels, bank_width), dtype=np.float32)
    for m in range(0, n_mels):
        left = m_centers[m]
        center = m_centers[m + 1]
        right = m_centers[m + 2]
        for fft_bin in range(klo, khi):
            mbin = bin2mel(fft_bin)
            if left < mbin < right:
                matrix[m, fft_bin] = 1.0 - abs(center - mbin) / ms
    return matrix


_MEL_T = speechlib_mel(16000, 512, 80, fmin=None, fmax=7690).T
_HAMMING400 = np.hamming(400)
_HAMMING200 = np.hamming(200)


def original_resample(wav, fs):
    """The integer-ratio rule: ``(waveform, effective rate)`` (float64 out when resampled)."""
    if fs > 16000:
        return scipy.signal.resample_poly(wav, 1, fs // 16000), 16000
    if 8000 < fs < 16000:
        return scipy.signal.resample_poly(wav, 1, fs // 8000), 8000
    if fs < 8000:
        raise RuntimeError(f"Unsupported sample rate {fs}")
    return wav, fs


def original_spectrogram(wav, fs):
    """``_extract_spectrogram``: magnitude ``[shape=(T, 257)]`` float32."""
    if wav.ndim > 1:
        wav = np.squeeze(wav)
    if len(wav.shape) == 2:
        wav = wav.mean(1)
    wav, fs = original_resample(wav, fs)
    preemphasis = 0.97
    if fs == 8000:
        n_fft, win_length, hop_length, fft_window = 256, 200, 80, _HAMMING200
    else:
        n_fft, win_length, hop_length, fft_window = 512, 400, 160, _HAMMING400
    n_batch = (wav.shape[0] - win_length) // hop_length + 1
    y_frames = np.array(
        [wav[s : s + win_length] for s in range(0, hop_length * n_batch, hop_length)],
        dtype=np.float32,
    )
    y_frames_prev = np.roll(y_frames, 1, axis=1)
    y_frames_prev[:, 0] = y_frames_prev[:, 1]
    y_frames = (y_frames - preemphasis * y_frames_prev) * 32768
    S = np.fft.rfft(fft_window * y_frames, n=n_fft, axis=1).astype(np.complex64)
    if fs == 8000:
        frames, bins = S.shape
        padarray = np.zeros((frames, bins))
        S = np.concatenate((S[:, 0:-1], padarray), axis=1)
    return np.abs(S).astype(np.float32)


def original_features(wav, fs, *, mel_t=_MEL_T):
    """``_extract_features``: log-mel ``[shape=(T, 80)]`` float32.

    ``mel_t`` ``[shape=(257, 80)]`` swaps in another bank (the native one) for tests.
    """
    spec = original_spectrogram(wav, fs)
    spec_power = spec**2
    fbank_power = np.clip(spec_power.dot(mel_t), 1.0, None)
    return np.log(fbank_power).astype(np.float32)


def compute_audio_embed_size(audio_frames, compression_rate=8, qformer_compression_rate=1):
    """``_compute_audio_embed_size``: prompt tokens for ``audio_frames`` frames."""
    integer = audio_frames // compression_rate
    remainder = audio_frames % compression_rate
    result = integer if remainder == 0 else integer + 1
    integer = result // qformer_compression_rate
    remainder = result % qformer_compression_rate
    return integer if remainder == 0 else integer + 1
