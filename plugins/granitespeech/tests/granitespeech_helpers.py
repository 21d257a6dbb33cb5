"""Granite Speech test helpers: the reference processor (with a torchaudio stand-in),
signals, and the exact evaluation of the reference algorithm.

``GraniteSpeechFeatureExtractor`` builds ``torchaudio.transforms.MelSpectrogram``, and
no torchaudio wheel exists for torch 2.13 (PyPI's newest is 2.11.1, built against its
own torch). :func:`install_torchaudio_stand_in` registers a ``torchaudio`` module whose
``MelSpectrogram`` is torchaudio 2.x's, transcribed onto torch: ``F.spectrogram``
(``torch.stft`` with ``hann_window(win_length)``, ``center=True``, reflect padding,
``abs().pow(2)``) and ``F.melscale_fbanks`` (float32 linspaces, HTK mel, unnormalised
triangles), then ``matmul`` with the bank. Everything after it (log, clamp, scaling,
frame stacking, token counts, batching, the processor) is transformers' own code.
"""

from __future__ import annotations

import importlib.machinery
import math
import sys
import types
from typing import Any

import numpy as np

from audiogate_granitespeech.geometry import granite_geometry
from audiogate_granitespeech.prompt import CHAT_TEMPLATE

#: Granite 3.3's special tokens and granite-speech-3.3-2b's <|audio|>, at their real ids.
SPECIAL_TOKENS = {
    "<|end_of_text|>": 0,
    "<fim_prefix>": 1,
    "<fim_middle>": 2,
    "<fim_suffix>": 3,
    "<fim_pad>": 4,
    "<filename>": 5,
    "<gh_stars>": 6,
    "<issue_start>": 7,
    "<issue_comment>": 8,
    "<issue_closed>": 9,
    "<jupyter_start>": 10,
    "<jupyter_text>": 11,
    "<jupyter_code>": 12,
    "<jupyter_output>": 13,
    "<empty_output>": 14,
    "<commit_before>": 15,
    "<commit_msg>": 16,
    "<commit_after>": 17,
    "<reponame>": 18,
    "<|start_of_role|>": 49_152,
    "<|end_of_role|>": 49_153,
    "<|tool_call|>": 49_154,
    "<|start_of_cite|>": 49_155,
    "<|end_of_cite|>": 49_156,
    "<|start_of_plugin|>": 49_157,
    "<|end_of_plugin|>": 49_158,
    "<|audio|>": 49_159,
}

#: The model card's system prompt (fixed date, so renders are reproducible).
SYSTEM_PROMPT = (
    "Knowledge Cutoff Date: April 2024.\nToday's Date: April 9, 2025.\n"
    "You are Granite, developed by IBM. You are a helpful AI assistant"
)


# --- the torchaudio stand-in -----------------------------------------------------------


def _hz_to_mel(freq: float) -> float:
    return 2595.0 * math.log10(1.0 + (freq / 700.0))


def melscale_fbanks(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int) -> Any:
    """torchaudio's ``F.melscale_fbanks(..., norm=None, mel_scale="htk")``."""
    import torch

    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_pts = torch.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2)
    f_pts = 700.0 * (10.0 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down, up))


def _mel_spectrogram_class() -> type:
    import torch

    class MelSpectrogram(torch.nn.Module):
        """torchaudio's ``MelSpectrogram`` with its defaults (power 2, HTK, no norm)."""

        def __init__(
            self,
            sample_rate: int = 16_000,
            n_fft: int = 400,
            win_length: int | None = None,
            hop_length: int | None = None,
            n_mels: int = 128,
        ) -> None:
            super().__init__()
            self.n_fft = n_fft
            self.win_length = win_length or n_fft
            self.hop_length = hop_length or self.win_length // 2
            self.register_buffer("window", torch.hann_window(self.win_length))
            fb = melscale_fbanks(n_fft // 2 + 1, 0.0, float(sample_rate // 2), n_mels, sample_rate)
            self.register_buffer("fb", fb)

        def forward(self, waveform: Any) -> Any:
            shape = waveform.size()
            flat = waveform.reshape(-1, shape[-1])
            spec = torch.stft(
                input=flat,
                n_fft=self.n_fft,
                hop_length=self.hop_length,
                win_length=self.win_length,
                window=self.window,
                center=True,
                pad_mode="reflect",
                normalized=False,
                onesided=True,
                return_complex=True,
            )
            spec = spec.reshape(shape[:-1] + spec.shape[-2:]).abs().pow(2.0)
            return torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)

    return MelSpectrogram


def install_torchaudio_stand_in() -> None:
    """Register the stand-in as ``torchaudio`` (once), and hand it to transformers'
    Granite Speech extractor module if that was imported without it."""
    if "torchaudio" not in sys.modules:
        module = types.ModuleType("torchaudio")
        module.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
        module.__version__ = "2.13.0+stand-in"  # type: ignore[attr-defined]
        transforms = types.ModuleType("torchaudio.transforms")
        transforms.MelSpectrogram = _mel_spectrogram_class()  # type: ignore[attr-defined]
        module.transforms = transforms  # type: ignore[attr-defined]
        sys.modules["torchaudio"] = module
        sys.modules["torchaudio.transforms"] = transforms
    from transformers.utils import import_utils

    # transformers caches the answer; one asked before the stand-in existed said no.
    import_utils.is_torchaudio_available.cache_clear()
    extractor_module = sys.modules.get(
        "transformers.models.granite_speech.feature_extraction_granite_speech"
    )
    if extractor_module is not None:
        extractor_module.torchaudio = sys.modules["torchaudio"]  # type: ignore[attr-defined]


def build_extractor() -> Any:
    """``GraniteSpeechFeatureExtractor`` as granite-speech-3.3-2b configures it."""
    install_torchaudio_stand_in()
    from transformers import GraniteSpeechFeatureExtractor

    return GraniteSpeechFeatureExtractor()


def build_processor(tokenizer: Any) -> Any:
    """``GraniteSpeechProcessor`` from components (offline)."""
    from transformers import GraniteSpeechProcessor

    return GraniteSpeechProcessor(
        audio_processor=build_extractor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def reference_features(waveforms: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The extractor's batch output for 16 kHz float32 waveforms (a list, as the
    processor passes several), as numpy arrays."""
    extractor = _cache.get("fe")
    if extractor is None:
        extractor = _cache["fe"] = build_extractor()
    out = extractor([np.asarray(w, dtype=np.float32) for w in waveforms])
    return {
        "input_features": out["input_features"].numpy(),
        "input_features_mask": out["input_features_mask"].numpy(),
        "audio_embed_sizes": np.asarray(out["audio_embed_sizes"]),
    }


_cache: dict[str, Any] = {}


# --- signals -----------------------------------------------------------------------------


def make_signal(
    kind: str, *, samples: int, rate_hz: int = 16_000, channels: int = 1, seed: int = 0
) -> np.ndarray:
    """float32 ``[shape=(n,)]`` or ``[shape=(n, channels)]``."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate_hz
    columns = []
    for channel in range(channels):
        f0 = rng.uniform(150, 3_000)
        if kind == "noise":
            x = 0.2 * rng.standard_normal(samples)
        elif kind == "speechlike":
            envelope = 1 + 0.8 * np.sin(2 * np.pi * 3 * t + channel)
            x = 0.3 * envelope * np.sin(2 * np.pi * f0 * t) + 0.05 * rng.standard_normal(samples)
        elif kind == "tone":
            x = 0.5 * np.sin(2 * np.pi * f0 * t)
        elif kind == "silence":
            x = np.zeros(samples)
        elif kind == "clipped":
            x = np.clip(2.5 * rng.standard_normal(samples), -1.0, 1.0)
        elif kind == "crescendo":
            # Loudest at the very end: the clip's own maximum is in its reflected last
            # frames, which a batch replaces with zeros.
            x = (t / max(t[-1], 1e-9)) ** 8 * np.sin(2 * np.pi * f0 * t)
        else:
            raise ValueError(kind)
        columns.append(x)
    data = np.stack(columns, axis=1) if channels > 1 else columns[0]
    return data.astype(np.float32)


# --- the exact evaluation ----------------------------------------------------------------


def exact_reference(waveform: np.ndarray) -> np.ndarray:
    """The reference algorithm for one clip, evaluated in float64 from torch's own float32
    windowed frames: reflect-pad 256, frames of 512 every 160 with the Hann(400) centred,
    float64 rFFT power, the float64 HTK bank, log10, clamp, scale, stack
    ``[shape=(rows, 160)]``."""
    import torch

    x = np.asarray(waveform, dtype=np.float32)
    padded = np.pad(x, 256, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, 512)[::160]
    window = np.zeros(512, dtype=np.float32)
    window[56:456] = torch.hann_window(400).numpy()
    windowed = (frames * window).astype(np.float64)
    power = np.abs(np.fft.rfft(windowed, axis=-1)) ** 2
    bank = melscale_fbanks(257, 0.0, 8000.0, 80, 16_000).double().numpy()
    logs = np.log10(np.maximum(power @ bank, 1e-10))
    scaled = np.maximum(logs, logs.max() - 8.0) / 4.0 + 1.0
    rows = granite_geometry(x.shape[0]).rows
    return scaled[: 2 * rows].reshape(rows, 160)
