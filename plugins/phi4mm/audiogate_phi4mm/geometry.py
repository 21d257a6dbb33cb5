"""Phi-4 MM geometry: samples → feature frames → prompt tokens, from one function.

Framing (``Phi4MMAudioFeatureExtractor._extract_spectrogram`` of the remote-code
``processing_phi4mm.py``, and ``Phi4MultimodalFeatureExtractor`` for the native variant):
16 kHz takes window 400, hop 160, FFT 512; 8 kHz (remote code only) window 200, hop 80,
FFT 256, bins 0..127 kept and zeros appended to 257 (the hard-coded ``"fillzero"``
method). ``T = (n - window) // hop + 1`` frames, no centring, the tail dropped.

Prompt positions of one clip: ``ceil(ceil(T / compression) / downsample)``
(``Phi4MMAudioFeatureExtractor._compute_audio_embed_size``, and the identical
``Phi4MultimodalFeatureExtractor._compute_audio_embed_size``): the encoder's time
reduction (``audio_compression_rate`` 8), then the qformer step (``audio_downsample_rate``
1, a no-op). :func:`clip_geometry` is the only place frames, tokens and the feature shape
are computed; the feature plan calls it and the extractor checks its output against the
plan.
"""

from __future__ import annotations

from typing import Final

import attrs

from audiogate.errors import FeatureError
from audiogate.policy import AudioPolicy
from audiogate_phi4mm.melbank import FFT_BINS, MEL_FILTERS

__all__ = [
    "NARROWBAND",
    "WIDEBAND",
    "ClipGeometry",
    "Frontend",
    "audio_embed_size",
    "clip_geometry",
    "frame_count",
    "frontend_for",
    "policy_embed_size",
]


@attrs.frozen(kw_only=True)
class Frontend:
    """Framing of one effective rate.

    :param rate_hz: the effective rate the waveform is treated as.
    :param window_samples: analysis window (symmetric Hamming).
    :param hop_samples: frame hop.
    :param fft_size: FFT length (the window is zero-padded to it).
    :param kept_bins: spectrum bins kept before padding to the bank's 257 bins.
    """

    rate_hz: int
    window_samples: int
    hop_samples: int
    fft_size: int
    kept_bins: int

    @property
    def fft_bins(self) -> int:
        """Bins of this frontend's real FFT."""
        return self.fft_size // 2 + 1


WIDEBAND: Final = Frontend(
    rate_hz=16_000, window_samples=400, hop_samples=160, fft_size=512, kept_bins=FFT_BINS
)
#: The 8 kHz "fillzero" frontend: bins 0..127 (Nyquist dropped), then zeros.
NARROWBAND: Final = Frontend(
    rate_hz=8_000, window_samples=200, hop_samples=80, fft_size=256, kept_bins=128
)


def frontend_for(policy: AudioPolicy, rate_hz: int, *, clip_index: int) -> Frontend:
    """The framing for an effective rate under the policy's variant.

    :raises FeatureError: a rate the variant's frontend does not take.
    """
    native = policy.variant == "native"
    if rate_hz == WIDEBAND.rate_hz:
        return WIDEBAND
    if rate_hz == NARROWBAND.rate_hz and not native:
        return NARROWBAND
    allowed = "16000 Hz" if native else "16000 or 8000 Hz"
    raise FeatureError(
        f"the Phi-4 MM {policy.variant} frontend takes waveforms at {allowed}, got {rate_hz} Hz",
        clip_index=clip_index,
    )


def frame_count(samples: int, frontend: Frontend) -> int:
    """``(n - window) // hop + 1``, or 0 when ``n`` is shorter than one window."""
    if samples < frontend.window_samples:
        return 0
    return (samples - frontend.window_samples) // frontend.hop_samples + 1


def audio_embed_size(frames: int, *, compression_rate: int, downsample_rate: int) -> int:
    """Prompt tokens for ``frames`` feature frames (``audio_feat_stride`` is 1)."""
    if frames < 0 or compression_rate < 1 or downsample_rate < 1:
        raise ValueError(
            f"frames must be >= 0 and rates >= 1; got {frames}, {compression_rate}, "
            f"{downsample_rate}"
        )
    compressed = -(-frames // compression_rate)
    return -(-compressed // downsample_rate)


def policy_embed_size(policy: AudioPolicy, frames: int) -> int:
    """:func:`audio_embed_size` with the rates in ``policy.options``."""
    return audio_embed_size(
        frames,
        compression_rate=int(policy.options["audio_compression_rate"]),
        downsample_rate=int(policy.options["audio_downsample_rate"]),
    )


@attrs.frozen(kw_only=True)
class ClipGeometry:
    """One clip's framing, frames, prompt tokens and feature shape ``(frames, 80)``."""

    frontend: Frontend
    frames: int
    tokens: int

    @property
    def feature_shape(self) -> tuple[int, int]:
        """``[shape=(frames, 80)]`` float32."""
        return (self.frames, MEL_FILTERS)


def clip_geometry(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> ClipGeometry:
    """Frames, tokens and the feature shape of ``samples`` samples at ``rate_hz``.

    A clip needs at least one full analysis frame: 400 samples at 16 kHz, 200 at 8 kHz.
    (mlxcel requires two frames, ``src/audio/phi4mm/feature_extractor.rs``; Phi-4 MM remote
    code and transformers' ``Phi4MultimodalFeatureExtractor`` produce one frame for exactly
    one window of audio, and so does audiogate.)

    :raises FeatureError: fewer samples than one frame, or a rate the frontend refuses.
    """
    frontend = frontend_for(policy, rate_hz, clip_index=clip_index)
    frames = frame_count(samples, frontend)
    if frames < 1:
        raise FeatureError(
            f"{samples} samples at {rate_hz} Hz is too short for one analysis frame; the "
            f"Phi-4 MM frontend needs at least {frontend.window_samples} samples",
            clip_index=clip_index,
        )
    return ClipGeometry(frontend=frontend, frames=frames, tokens=policy_embed_size(policy, frames))
