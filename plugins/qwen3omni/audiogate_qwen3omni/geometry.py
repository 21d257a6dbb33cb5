"""Qwen3-Omni geometry: samples → Whisper frames → audio encoder rows (prompt tokens).

``Qwen3OmniMoeProcessor`` calls the checkpoint's ``WhisperFeatureExtractor`` (16 kHz, 128
bins, ``n_fft`` 400, ``hop_length`` 160) with ``padding=True, truncation=False``
(``audio_kwargs``): a clip is not padded to a window and not cut; alone in a call it
becomes ``N // 160`` frames (the centred STFT's last frame is dropped), all valid, and its
clamp (``max - 8``) is taken over those frames. Its rows come from the encoder's 100-frame
chunks (``n_window`` 50): 13 per full chunk plus the remainder's three stride-2 convs.
The feature plan, the extractor and the prompt expansion all call :func:`clip_geometry`
/ :func:`audio_tokens`.

The processor accepts any length; this plugin bounds a clip at 300 s (the checkpoint's
``n_samples`` 4,800,000, which the processor itself does not apply), a typed refusal
beyond that, never a cut.
"""

from __future__ import annotations

from typing import Final

import attrs

from audiogate.dsp.whisper_geometry import HOP, N_FFT, SAMPLE_RATE_HZ, WhisperPlan, whisper_plan

__all__ = [
    "CHUNK_FRAMES",
    "HOP",
    "MAX_FRAMES",
    "MAX_ROWS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MIN_SAMPLES",
    "N_FFT",
    "N_MELS",
    "N_WINDOW",
    "SAMPLE_RATE_HZ",
    "ClipGeometry",
    "audio_tokens",
    "clip_geometry",
    "clip_plan",
]

#: The per-clip bound of this plugin, seconds (the checkpoint's ``n_samples`` / 16 kHz).
MAX_SECONDS: Final = 300
MAX_SAMPLES: Final = SAMPLE_RATE_HZ * MAX_SECONDS  # 4,800,000
N_MELS: Final = 128
#: ``audio_config.n_window``: the encoder's chunks are ``2 × n_window`` frames.
N_WINDOW: Final = 50
CHUNK_FRAMES: Final = 2 * N_WINDOW
MAX_FRAMES: Final = MAX_SAMPLES // HOP  # 30,000
#: Rows of 300 s: ``audio_tokens(30000)``.
MAX_ROWS: Final = 3_900
#: torch's reflect padding needs more than ``n_fft // 2`` samples (the reference raises
#: on 200); 201 samples give one frame and one row.
MIN_SAMPLES: Final = N_FFT // 2 + 1


def audio_tokens(frames: int) -> int:
    """Encoder rows (prompt tokens) of ``frames`` valid frames.

    ``_get_feat_extract_output_lengths`` of ``processing_qwen3_omni_moe`` (and the
    encoder's): ``r = L % 100``, ``f = (r - 1) // 2 + 1``,
    ``((f - 1) // 2 + 1 - 1) // 2 + 1 + (L // 100) × 13``. 100 frames → 13, 1 → 1.
    """
    if not 0 <= frames <= MAX_FRAMES:
        raise ValueError(f"frames must be in 0..{MAX_FRAMES}, not {frames}")
    rest = frames % CHUNK_FRAMES
    first = (rest - 1) // 2 + 1
    return ((first - 1) // 2 + 1 - 1) // 2 + 1 + (frames // CHUNK_FRAMES) * 13


@attrs.frozen(kw_only=True)
class ClipGeometry:
    """How one clip of normalized 16 kHz samples becomes frames and rows.

    :param samples: normalized samples ``N`` (at most 4,800,000).
    :param frames: ``N // 160``: the features' frames, all valid.
    :param tokens: encoder rows, :func:`audio_tokens` of the frames.
    """

    samples: int
    frames: int
    tokens: int


def clip_plan(samples: int) -> WhisperPlan:
    """The shared frontend's plan: ``"longest"`` padding of the clip alone."""
    return whisper_plan(samples, n_mels=N_MELS, padding="longest")


def clip_geometry(samples: int) -> ClipGeometry:
    """The geometry of a clip of ``samples`` normalized samples (201..4,800,000)."""
    if not MIN_SAMPLES <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be in {MIN_SAMPLES}..{MAX_SAMPLES}, not {samples}")
    frames = samples // HOP
    return ClipGeometry(samples=samples, frames=frames, tokens=audio_tokens(frames))
