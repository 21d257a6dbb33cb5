"""Qwen2-Audio test helpers: signals, WAV files, the reference processor and its exact twin."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from audiogate_qwen2audio.prompt import CHAT_TEMPLATE

#: Qwen2 chat specials and the Qwen2-Audio audio tokens at their real ids.
SPECIAL_TOKENS = {
    "<|endoftext|>": 151_643,
    "<|im_start|>": 151_644,
    "<|im_end|>": 151_645,
    "<|AUDIO|>": 151_646,
    "<|audio_bos|>": 151_647,
    "<|audio_eos|>": 151_648,
}

#: Broadband signals: their spectra stay well above the float32 FFT noise of the torch
#: reference, so the reference itself is accurate to a few 1e-6 there.
BROADBAND = ("noise", "am", "pink")
#: Narrowband or gapped signals with > 60 dB of in-frame dynamic range: the torch
#: reference's own float32 STFT error reaches 1e-4 on them (see test_qwen2audio_features).
HARD = ("tone", "sweep", "gaps")


def make_signal(
    kind: str, *, samples: int, rate_hz: int = 16_000, channels: int = 1, seed: int = 0
) -> np.ndarray:
    """float32 ``[shape=(n,)]`` or ``[shape=(n, channels)]``, within [-0.9, 0.9]."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate_hz
    columns = []
    for channel in range(channels):
        f0 = rng.uniform(150, 3_000)
        if kind == "noise":
            x = 0.2 * rng.standard_normal(samples)
        elif kind == "am":
            envelope = 1 + 0.5 * np.sin(2 * np.pi * 3 * t + channel)
            x = 0.3 * envelope * np.sin(2 * np.pi * f0 * t) + 0.15 * rng.standard_normal(samples)
        elif kind == "pink":
            white = rng.standard_normal(samples)
            x = 0.05 * np.cumsum(white) / np.sqrt(np.arange(1, samples + 1))
            x += 0.05 * white
        elif kind == "tone":
            x = 0.5 * np.sin(2 * np.pi * f0 * t)
        elif kind == "sweep":
            x = 0.3 * np.sin(2 * np.pi * (100 + 500 * t) * t)
        elif kind == "gaps":
            x = 0.3 * rng.standard_normal(samples) * (np.sin(2 * np.pi * 2 * t) > 0)
        else:
            raise ValueError(kind)
        columns.append(np.clip(x, -0.9, 0.9))
    data = np.stack(columns, axis=1) if channels > 1 else columns[0]
    return data.astype(np.float32)


def wav_bytes(data: np.ndarray, *, rate_hz: int, subtype: str) -> bytes:
    """A WAV written by soundfile (``subtype`` ``"PCM_16"`` or ``"FLOAT"``)."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, data, rate_hz, format="WAV", subtype=subtype)
    return buffer.getvalue()


def transformers_load(data: bytes, tmp_path: Path, name: str) -> np.ndarray:
    """The waveform transformers' ``load_audio`` (soundfile backend = ``librosa.load``) gives."""
    from transformers.audio_utils import load_audio

    path = tmp_path / name
    path.write_bytes(data)
    return np.asarray(load_audio(str(path), sampling_rate=16_000, backend="soundfile"))


def build_processor(tokenizer: Any) -> Any:
    """``Qwen2AudioProcessor`` from components, as the checkpoint configures it (offline)."""
    from transformers import Qwen2AudioProcessor, WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(
        feature_size=128,
        sampling_rate=16_000,
        hop_length=160,
        chunk_length=30,
        n_fft=400,
        padding_value=0.0,
        return_attention_mask=True,
    )
    return Qwen2AudioProcessor(
        feature_extractor=extractor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def reference_features(waveform: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``WhisperFeatureExtractor(feature_size=128)`` (torch path) as the processor calls it."""
    from transformers import WhisperFeatureExtractor

    extractor = _extractor_cache.get("fe")
    if extractor is None:
        extractor = _extractor_cache["fe"] = WhisperFeatureExtractor(feature_size=128)
    out = extractor(
        waveform,
        sampling_rate=16_000,
        return_attention_mask=True,
        padding="max_length",
        return_tensors="np",
    )
    return out["input_features"][0], out["attention_mask"][0]


_extractor_cache: dict[str, Any] = {}

PARITY = 3e-5
EXACT = 5e-7


def assert_parity(
    features: np.ndarray,
    x: np.ndarray,
    *,
    want: np.ndarray | None = None,
    rare: float | None = 1e-5,
) -> None:
    """Within 3e-5 of the reference, except where the reference's own float32 error is
    larger, and within 5e-7 of the reference's exact evaluation everywhere.

    :param want: the reference's features for ``x`` if already computed.
    :param rare: most fraction of values allowed beyond 3e-5 (``None``: no bound).
    """
    if want is None:
        want, _ = reference_features(x)
    exact = exact_reference(x)
    assert np.abs(features - exact).max() <= EXACT
    own = np.abs(want - exact)
    distance = np.abs(features - want)
    assert (distance <= np.maximum(PARITY, own + EXACT)).all()
    if rare is not None:
        assert (distance > PARITY).mean() <= rare


def exact_reference(waveform: np.ndarray) -> np.ndarray:
    """The reference algorithm evaluated exactly from torch's own windowed frames.

    Pad to 480,000, reflect-pad 200, frames of 400 every 160 (the last of 3001 dropped),
    times ``torch.hann_window(400)`` in float32 (as ``torch.stft`` forms them), then the
    power of a float64 rFFT, transformers' float64 Slaney bank, and the log, clamp and
    scale in float64: ``WhisperFeatureExtractor`` without its float32 FFT rounding.
    """
    import torch
    from transformers.audio_utils import mel_filter_bank

    x = np.zeros(480_000, dtype=np.float32)
    x[: waveform.shape[0]] = waveform
    padded = np.pad(x, 200, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, 400)[::160][:3000]
    windowed = (frames * torch.hann_window(400).numpy()).astype(np.float64)
    power = np.abs(np.fft.rfft(windowed, axis=-1)) ** 2
    mel = mel_filter_bank(201, 128, 0, 8000, 16000, norm="slaney", mel_scale="slaney")
    log = np.log10(np.maximum(power @ mel, 1e-10)).T
    return (np.maximum(log, log.max() - 8.0) + 4.0) / 4.0
