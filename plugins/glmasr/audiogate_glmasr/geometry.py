"""GLM-ASR geometry: samples → 30 s windows → Whisper frames → merged rows (prompt tokens).

``GlmAsrProcessor._process_audio`` (transformers 5.24.0) cuts each 16 kHz clip of ``N``
samples into ``max(1, ceil(N / 480,000))`` windows of at most 480,000 samples (at most
``int(max_audio_len // chunk_length)`` = int(655 // 30) = 21 of them), runs
``WhisperFeatureExtractor(feature_size=128)`` on each window as its own item (padded to
30 s, clamped on its own), and counts the clip's ``<|pad|>`` tokens from the sum of its
windows' masks through the encoder's two convolutions and the projector's merge of 4
frames. The feature plan, the extractor and the prompt expansion all call
:func:`glmasr_geometry` / :func:`audio_tokens`; nothing else computes a token count or a
feature shape.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = [
    "HOP",
    "MAX_FRAMES",
    "MAX_ROWS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MAX_WINDOWS",
    "MERGE_FACTOR",
    "N_FFT",
    "N_MELS",
    "SAMPLE_RATE_HZ",
    "WINDOW_FRAMES",
    "WINDOW_SAMPLES",
    "WINDOW_SECONDS",
    "GlmAsrGeometry",
    "audio_tokens",
    "glmasr_geometry",
]

SAMPLE_RATE_HZ: Final = 16_000
#: ``chunk_length``: the Whisper window, in seconds and samples (``n_samples``).
WINDOW_SECONDS: Final = 30
WINDOW_SAMPLES: Final = SAMPLE_RATE_HZ * WINDOW_SECONDS  # 480,000
N_FFT: Final = 400
HOP: Final = 160
N_MELS: Final = 128
#: ``nb_max_frames``: frames of one window (2 × the encoder's 1500 positions).
WINDOW_FRAMES: Final = WINDOW_SAMPLES // HOP  # 3000
#: ``GlmAsrProcessor(max_audio_len=655)``: ``int(655 // 30)`` = 21 windows, 630 s.
MAX_AUDIO_LEN_SECONDS: Final = 655
MAX_WINDOWS: Final = MAX_AUDIO_LEN_SECONDS // WINDOW_SECONDS
MAX_SECONDS: Final = MAX_WINDOWS * WINDOW_SECONDS  # 630
MAX_SAMPLES: Final = MAX_WINDOWS * WINDOW_SAMPLES  # 10,080,000
MAX_FRAMES: Final = MAX_WINDOWS * WINDOW_FRAMES  # 63,000
#: Encoder frames the projector merges into one row (``merge_factor``).
MERGE_FACTOR: Final = 4
#: Rows of 21 full windows: ``audio_tokens(63,000)``.
MAX_ROWS: Final = 7_875


def audio_tokens(valid_frames: int) -> int:
    """``<|pad|>`` tokens of a clip whose windows' masks hold ``valid_frames`` ones in all.

    The encoder's convolutions (padding 1, kernel 3, strides 1 and 2) give
    ``a = (L - 1) // 2 + 1``; the projector merges 4 of them: ``n = (a - 4) // 4 + 1``, on
    the clip's total ``L`` as ``GlmAsrProcessor._get_audio_token_length`` counts it:
    7 frames → 1, 3000 → 375, 4501 → 562. A full window gives 375 rows (1500 is a
    multiple of 4), so the total equals the model's per-window count summed.
    """
    if not 0 <= valid_frames <= MAX_FRAMES:
        raise ValueError(f"valid_frames must be in 0..{MAX_FRAMES}, not {valid_frames}")
    after_conv = (valid_frames - 1) // 2 + 1
    return max(0, (after_conv - MERGE_FACTOR) // MERGE_FACTOR + 1)


@attrs.frozen(kw_only=True)
class GlmAsrGeometry:
    """How one clip of normalized 16 kHz samples maps onto the processor's windows.

    :param samples: normalized samples ``N`` (at most 10,080,000).
    :param windows: 30 s windows, ``max(1, ceil(N / 480,000))``.
    :param valid_frames: ``L = ceil(N / 160)``: the ones of all windows' masks.
    :param tokens: merged rows, :func:`audio_tokens` of ``L``.
    """

    samples: int
    windows: int
    valid_frames: int
    tokens: int

    @property
    def feature_shape(self) -> tuple[int, int, int]:
        """``(windows, 128, 3000)``: one Whisper window per row."""
        return (self.windows, N_MELS, WINDOW_FRAMES)


def glmasr_geometry(samples: int) -> GlmAsrGeometry:
    """The geometry of a clip of ``samples`` normalized samples (0..10,080,000)."""
    if not 0 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be in 0..{MAX_SAMPLES}, not {samples}")
    windows = max(1, -(-samples // WINDOW_SAMPLES))
    # Windows hold 480,000 samples = 3000 whole hops, so the windows' ceil(n / 160) sum to
    # the clip's.
    valid = -(-samples // HOP)
    return GlmAsrGeometry(
        samples=samples, windows=windows, valid_frames=valid, tokens=audio_tokens(valid)
    )
