"""``audiogate.dsp.melbank``: one triangle helper reproduces every family's bank bit for bit.

The oracles below are verbatim copies of the bank builders the families had before they
moved to :func:`~audiogate.dsp.melbank.triangular_filters` (Phi-4 MM's SpeechLib and
transformers-native banks, Gemma 3n's HTK bank, Qwen2-Audio's Slaney bank). Each family's
current builder, and the helper fed with the oracle's own edges, must equal them byte for
byte (``tobytes``: signed zeros count too).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from audiogate.dsp.melbank import (
    covered_bins,
    sparse_projection,
    triangular_filters,
)

# --- oracles: the former builders, kept verbatim ---------------------------------------


def _kaldi_mel(frequency_hz):
    return np.asarray(1127.0 * np.log(1.0 + np.asarray(frequency_hz, dtype=np.float64) / 700.0))


def oracle_speechlib() -> np.ndarray:
    """``audiogate_phi4mm.melbank.speechlib_mel_bank`` before the toolkit: float32 (80, 257)."""

    def f2bin(frequency: float) -> int:
        return int((frequency * 512 / 16_000) + 0.5)

    klo = f2bin(0.0) + 1
    khi = max(f2bin(7690.0), klo)
    mlo = float(_kaldi_mel(0.0))
    mhi = float(_kaldi_mel(7690.0))
    centers = np.linspace(mlo, mhi, 80 + 2)
    step = (mhi - mlo) / (80 + 1)
    bins = np.arange(klo, khi)
    bin_mels = 1127.0 * np.log(1.0 + bins * 16_000 / (512 * 700.0))
    bank = np.zeros((80, 257), dtype=np.float32)
    for m in range(80):
        left, center, right = centers[m], centers[m + 1], centers[m + 2]
        inside = (left < bin_mels) & (bin_mels < right)
        bank[m, bins[inside]] = 1.0 - np.abs(center - bin_mels[inside]) / step
    return bank


def oracle_native() -> np.ndarray:
    """``audiogate_phi4mm.melbank.native_mel_bank`` before the toolkit: float64 (257, 80)."""
    filter_mels = np.linspace(_kaldi_mel(0.0), _kaldi_mel(7690.0), 80 + 2)
    fft_mels = _kaldi_mel(16_000 / ((257 - 1) * 2) * np.arange(257))
    filter_diff = np.diff(filter_mels)
    slopes = np.expand_dims(filter_mels, 0) - np.expand_dims(fft_mels, 1)
    down_slopes = -slopes[:, :-2] / filter_diff[:-1]
    up_slopes = slopes[:, 2:] / filter_diff[1:]
    bank = np.maximum(np.zeros(1), np.minimum(down_slopes, up_slopes))
    return np.ascontiguousarray(bank, dtype=np.float64)


def oracle_htk() -> np.ndarray:
    """``audiogate_gemma3n.melbank.htk_mel_filter_bank()`` before the toolkit: (513, 128)."""
    bin_hz = np.arange(513, dtype=np.float32) * (16_000 / 1024)
    mel_min = 2595.0 * math.log10(1.0 + 125.0 / 700.0)
    mel_max = 2595.0 * math.log10(1.0 + 7600.0 / 700.0)
    edges_hz = 700.0 * (10 ** (np.linspace(mel_min, mel_max, 128 + 2) / 2595.0) - 1.0)
    widths = edges_hz[1:] - edges_hz[:-1]
    slopes = edges_hz[None, :] - bin_hz[:, None]
    down = (-1.0 * slopes[:, :-2]) / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    return np.maximum(0.0, np.minimum(down, up))


_MELS_PER_LOG = 27.0 / np.log(6.4)
_LOGS_PER_MEL = np.log(6.4) / 27.0


def _hz_to_mel_slaney(hz):
    hz = np.asarray(hz, dtype=np.float64)
    log = 15.0 + np.log(np.maximum(hz, 1000.0) / 1000.0) * _MELS_PER_LOG
    return np.where(hz >= 1000.0, log, 3.0 * hz / 200.0)


def _mel_to_hz_slaney(mel):
    mel = np.asarray(mel, dtype=np.float64)
    log = 1000.0 * np.exp(_LOGS_PER_MEL * (np.maximum(mel, 15.0) - 15.0))
    return np.where(mel >= 15.0, log, 200.0 * mel / 3.0)


def oracle_slaney() -> np.ndarray:
    """``audiogate_qwen2audio.melbank.slaney_mel_filters`` (Whisper's) before the toolkit."""
    n_fft, n_mels, rate_hz = 400, 128, 16_000
    edges_mel = np.linspace(
        _hz_to_mel_slaney(np.array(0.0)), _hz_to_mel_slaney(np.array(8000.0)), n_mels + 2
    )
    edges_hz = _mel_to_hz_slaney(edges_mel)
    bins_hz = np.linspace(0, rate_hz // 2, n_fft // 2 + 1)
    widths = np.diff(edges_hz)
    slopes = edges_hz[np.newaxis, :] - bins_hz[:, np.newaxis]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= 2.0 / (edges_hz[2 : n_mels + 2] - edges_hz[:n_mels])
    return filters


def _same_bytes(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


# --- the helper fed with the oracles' own edges ---------------------------------------


def test_distance_formula_is_speechlib() -> None:
    mlo, mhi = float(_kaldi_mel(0.0)), float(_kaldi_mel(7690.0))
    bins = np.arange(1, 246)
    positions = 1127.0 * np.log(1.0 + bins * 16_000 / (512 * 700.0))
    bank = np.zeros((257, 80))
    bank[1:246] = triangular_filters(np.linspace(mlo, mhi, 82), positions, width=(mhi - mlo) / 81)
    _same_bytes(np.ascontiguousarray(bank.T, dtype=np.float32), oracle_speechlib())


def test_slopes_in_mel_space_are_transformers_kaldi() -> None:
    edges = np.linspace(_kaldi_mel(0.0), _kaldi_mel(7690.0), 82)
    positions = _kaldi_mel(16_000 / 512 * np.arange(257))
    _same_bytes(triangular_filters(edges, positions), oracle_native())


def test_slopes_in_hz_on_float32_bins_are_gemma3n_htk() -> None:
    mel_min = 2595.0 * math.log10(1.0 + 125.0 / 700.0)
    mel_max = 2595.0 * math.log10(1.0 + 7600.0 / 700.0)
    edges = 700.0 * (10 ** (np.linspace(mel_min, mel_max, 130) / 2595.0) - 1.0)
    positions = np.arange(513, dtype=np.float32) * (16_000 / 1024)
    _same_bytes(triangular_filters(edges, positions), oracle_htk())


def test_slaney_norm_is_whisper() -> None:
    edges = _mel_to_hz_slaney(
        np.linspace(_hz_to_mel_slaney(np.array(0.0)), _hz_to_mel_slaney(np.array(8000.0)), 130)
    )
    positions = np.linspace(0, 8000, 201)
    _same_bytes(triangular_filters(edges, positions, norm="slaney"), oracle_slaney())


# --- each family's builder ---------------------------------------------------------------


def test_phi4mm_banks_are_unchanged() -> None:
    melbank = pytest.importorskip("audiogate_phi4mm.melbank")
    _same_bytes(np.asarray(melbank.speechlib_mel_bank()), oracle_speechlib())
    _same_bytes(np.asarray(melbank.native_mel_bank()), oracle_native())


def test_gemma3n_bank_is_unchanged() -> None:
    melbank = pytest.importorskip("audiogate_gemma3n.melbank")
    _same_bytes(np.asarray(melbank.htk_mel_filter_bank()), oracle_htk())
    matrix, start, stop = melbank.mel_projection()
    assert (start, stop) == (9, 487)
    # Sparse storage drops the zeros (and their signs): equal values, not bytes.
    want = np.ascontiguousarray(oracle_htk()[start:stop].T, dtype=np.float32)
    assert np.array_equal(matrix.toarray(), want)


def test_qwen2audio_bank_is_unchanged() -> None:
    melbank = pytest.importorskip("audiogate_qwen2audio.melbank")
    got = melbank.slaney_mel_filters(
        n_fft=400, n_mels=128, f_min_hz=0.0, f_max_hz=8000.0, rate_hz=16_000
    )
    _same_bytes(got, oracle_slaney())
    want = np.ascontiguousarray(oracle_slaney().T, dtype=np.float32)
    assert np.array_equal(melbank.whisper_mel_matrix().toarray(), want)


# --- the other helpers -------------------------------------------------------------------


def test_sparse_projection_trims_to_the_covered_bins_and_is_read_only() -> None:
    bank = oracle_htk()
    assert covered_bins(bank) == (9, 487)
    projection = sparse_projection(bank)
    assert (projection.start, projection.stop) == (9, 487)
    assert projection.matrix.shape == (128, 478)
    assert not projection.matrix.data.flags.writeable
    whole = sparse_projection(bank, trim=False)
    assert (whole.start, whole.stop) == (0, 513)
    frames = np.random.default_rng(0).random((513, 7), dtype=np.float32)
    _same_bytes(projection.matrix @ frames[9:487], whole.matrix @ frames)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 3 edges"):
        triangular_filters([0.0, 1.0], [0.5])
    with pytest.raises(ValueError, match="slopes formula"):
        triangular_filters([0.0, 1.0, 2.0], [0.5], width=1.0, norm="slaney")
    with pytest.raises(ValueError, match="no non-zero weight"):
        covered_bins(np.zeros((4, 2)))
