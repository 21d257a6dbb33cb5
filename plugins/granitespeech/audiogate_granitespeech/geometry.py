"""Granite Speech geometry: samples → mel frames → stacked rows → projector tokens.

The constants are ``GraniteSpeechFeatureExtractor``'s (transformers 5.24.0) as
ibm-granite/granite-speech-3.3-2b configures it: torchaudio's ``MelSpectrogram`` at
16 kHz with ``n_fft`` 512, ``win_length`` 400, ``hop_length`` 160 and 80 HTK mel bins
(centred frames, reflect padding), two consecutive frames stacked into one 160-value
row, and a projector that turns every window of 15 rows into 15 // 5 = 3 query tokens.
The feature plan, the extractor, the collation and the prompt expansion all call
:func:`granite_geometry` / :func:`audio_tokens`; nothing else counts.
"""

from __future__ import annotations

import math
from typing import Final

import attrs

__all__ = [
    "DOWNSAMPLE_RATE",
    "FEATURE_DIM",
    "HOP",
    "N_FFT",
    "N_MELS",
    "QUERIES_PER_WINDOW",
    "SAMPLE_RATE_HZ",
    "STACK",
    "WINDOW_ROWS",
    "WIN_LENGTH",
    "GraniteGeometry",
    "audio_tokens",
    "granite_geometry",
    "interior_frames",
    "mel_frames",
]

SAMPLE_RATE_HZ: Final = 16_000
N_FFT: Final = 512
#: The periodic Hann window's length; ``torch.stft`` centres it in the 512-sample frame,
#: so only 400 samples around each frame centre carry weight.
WIN_LENGTH: Final = 400
HOP: Final = 160
N_MELS: Final = 80
#: Frames per row: the extractor reshapes ``(frames, 80)`` into ``(frames // 2, 160)``.
STACK: Final = 2
FEATURE_DIM: Final = STACK * N_MELS  # 160 = encoder_config.input_dim
#: ``projector_window_size`` and ``projector_downsample_rate`` (config.json
#: ``window_size`` and ``downsample_rate``).
WINDOW_ROWS: Final = 15
DOWNSAMPLE_RATE: Final = 5
QUERIES_PER_WINDOW: Final = WINDOW_ROWS // DOWNSAMPLE_RATE  # 3
#: Half the window: a frame centred at ``160 t`` reads samples ``160 t - 200 .. 160 t + 199``.
HALF_WINDOW: Final = WIN_LENGTH // 2


def mel_frames(samples: int) -> int:
    """Centred STFT frames of ``samples`` samples: ``samples // 160 + 1``."""
    return samples // HOP + 1


def interior_frames(samples: int) -> int:
    """Frames whose 400-sample window lies inside the clip (``160 t + 200 <= samples``).

    Only these frames are the same when the clip is zero-padded inside a longer batch;
    the later ones read the reflected end of the clip alone, and zeros in a batch.
    """
    return max(0, (samples - HALF_WINDOW) // HOP + 1)


def audio_tokens(rows: int) -> int:
    """Projector tokens of ``rows`` stacked rows: ``ceil(rows / 15) * 3``.

    ``GraniteSpeechFeatureExtractor._get_num_audio_features``: the encoder keeps one
    frame per row, the projector pads them to whole windows of 15 and emits 3 queries
    per window (1 s → 50 rows → 12 tokens).
    """
    if rows < 0:
        raise ValueError(f"rows must be >= 0, not {rows}")
    return math.ceil(rows / WINDOW_ROWS) * QUERIES_PER_WINDOW


@attrs.frozen(kw_only=True)
class GraniteGeometry:
    """How one clip of normalized 16 kHz samples maps onto features and tokens.

    :param samples: normalized samples ``N``.
    :param frames: mel frames ``N // 160 + 1`` (the window maximum is taken over all).
    :param rows: stacked rows ``frames // 2`` (an odd last frame is dropped).
    :param interior: frames that read no sample at or past ``N``.
    :param tokens: projector tokens, :func:`audio_tokens` of ``rows``.
    """

    samples: int
    frames: int
    rows: int
    interior: int
    tokens: int

    @property
    def feature_shape(self) -> tuple[int, int]:
        """``(rows, 160)``."""
        return (self.rows, FEATURE_DIM)


def granite_geometry(samples: int) -> GraniteGeometry:
    """The geometry of a clip of ``samples`` normalized samples (``>= 0``)."""
    if samples < 0:
        raise ValueError(f"samples must be >= 0, not {samples}")
    frames = mel_frames(samples)
    rows = frames // STACK
    return GraniteGeometry(
        samples=samples,
        frames=frames,
        rows=rows,
        interior=min(frames, interior_frames(samples)),
        tokens=audio_tokens(rows),
    )
