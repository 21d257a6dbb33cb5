"""GLM-ASR: pinned policy defaults, recognized keys and the family spec.

The frontend is ``GlmAsrProcessor`` with ``WhisperFeatureExtractor(feature_size=128)`` as
transformers 5.24.0 implements it and as zai-org/GLM-ASR-Nano-2512 configures it
(transformers' ``convert_glmasr_weights_to_hf.py`` writes its processor: ``audio_token``
``<|pad|>``, ``max_audio_len`` 655, the extractor's 16 kHz, ``n_fft`` 400, ``hop_length``
160, ``chunk_length`` 30, ``n_samples`` 480,000, ``nb_max_frames`` 3000; ``config.json``
(``GlmAsrConfig`` defaults): ``audio_token_id`` 59260, ``audio_config.num_mel_bins`` 128,
``audio_config.max_position_embeddings`` 1500).

Source rules: every rate soxr converts (8 to 192 kHz, as ``librosa.load`` does) and any
channel count up to 8, averaged to mono. A clip needs more than 960 normalized samples
(seven mask frames, one merged row). Longer clips than the processor's 21 windows
(630 s) are **refused** (``LimitError``): the processor would keep the first 21 windows
and drop the rest with only a log line. The processor refuses more than one audio per
prompt; audiogate admits up to 16 and places each clip's block in clip order (see
:mod:`audiogate_glmasr.prompt`).
"""

from __future__ import annotations

from typing import Final

from audiogate.family import FamilySpec
from audiogate.policy import (
    AudioPolicy,
    PolicyKey,
    load_packaged_schema,
    standard_keys,
)
from audiogate_glmasr._version import __version__
from audiogate_glmasr.geometry import (
    HOP,
    MAX_AUDIO_LEN_SECONDS,
    MAX_FRAMES,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_SECONDS,
    N_FFT,
    N_MELS,
    SAMPLE_RATE_HZ,
    WINDOW_FRAMES,
    WINDOW_SAMPLES,
    WINDOW_SECONDS,
)

__all__ = [
    "AUDIO_BOS_TOKEN",
    "AUDIO_BOS_TOKEN_ID",
    "AUDIO_EOS_TOKEN",
    "AUDIO_EOS_TOKEN_ID",
    "AUDIO_TOKEN",
    "AUDIO_TOKEN_ID",
    "FAMILY",
    "MAX_CLIPS",
    "MIN_SAMPLES",
    "MODEL_TYPES",
    "PINNED",
    "POLICY_KEYS",
    "REVISION",
    "spec",
]

FAMILY: Final = "glmasr"
#: Reference: the checkpoint's processor as transformers 5.24.0 implements it.
REVISION: Final = "zai-org/GLM-ASR-Nano-2512@transformers-5.24.0"
MODEL_TYPES: Final = ("glmasr",)

MIB: Final = 1 << 20
MIN_SOURCE_RATE_HZ: Final = 8_000
MAX_SOURCE_RATE_HZ: Final = 192_000
MAX_CHANNELS: Final = 8
#: Seven mask frames make one merged row: ``ceil(N / 160) >= 7``.
MIN_SAMPLES: Final = 961
MAX_CLIPS: Final = 16
#: Audio of all clips of one request: two maximal (630 s) clips.
MAX_REQUEST_SECONDS: Final = 2 * MAX_SECONDS
AUDIO_TOKEN: Final = "<|pad|>"
AUDIO_TOKEN_ID: Final = 59_260  # config.json audio_token_id
#: The chat template's delimiters around each clip's rows (ids: docs/provenance.md).
AUDIO_BOS_TOKEN: Final = "<|begin_of_audio|>"
AUDIO_EOS_TOKEN: Final = "<|end_of_audio|>"
AUDIO_BOS_TOKEN_ID: Final = 59_261
AUDIO_EOS_TOKEN_ID: Final = 59_262

# A maximal clip's result: 21 windows × (128 × 3000 float32 + a 3000-frame bool mask) =
# 32,319,000 B; the preflight adds a collated copy per clip at the largest clip's size
# (32,259,000 B for 21 windows). Two maximal clips need 129,156,000 B.
PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling="soxr_hq",
    min_source_rate_hz=MIN_SOURCE_RATE_HZ,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=MAX_CHANNELS,
    # The processor takes digital silence (its features are the constant floor).
    refuse_all_zero=False,
    min_samples_per_clip=MIN_SAMPLES,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    # 630 s of 48 kHz stereo PCM16 is 120,960,000 B; longer or wider PCM sources are
    # compressed or shorter.
    max_encoded_bytes_per_clip=128 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    max_clips=MAX_CLIPS,
    max_encoded_bytes_per_request=256 * MIB,
    max_source_samples_per_request=MAX_REQUEST_SECONDS * MAX_SOURCE_RATE_HZ,
    max_normalized_samples_per_request=MAX_REQUEST_SECONDS * SAMPLE_RATE_HZ,
    max_source_duration_us_per_request=MAX_REQUEST_SECONDS * 1_000_000,
    max_frames_per_request=2 * MAX_FRAMES,
    # 1260 s of retained 16 kHz waveforms are 80,640,000 B.
    max_waveform_result_bytes_per_request=80 * MIB,
    # Those plus one maximal clip in flight at 192 kHz (483,840,000 B decoded), the
    # decoder's block in 8 channels (4.2 MB) and soxr's scratch: ~570 MB.
    max_waveform_working_bytes_per_request=576 * MIB,
    # Two maximal clips (129.2 MB), or one and a few short ones.
    max_prepared_result_bytes_per_request=256 * MIB,
    # Whisper frames are centred: a clip of N samples has ceil(N/160) valid frames.
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=HOP,
    placeholder="rows_per_clip",
    options={
        "audio_token_id": AUDIO_TOKEN_ID,
        "audio_bos_token_id": AUDIO_BOS_TOKEN_ID,
        "audio_eos_token_id": AUDIO_EOS_TOKEN_ID,
        "audio_token": AUDIO_TOKEN,
        "audio_bos_token": AUDIO_BOS_TOKEN,
        "audio_eos_token": AUDIO_EOS_TOKEN,
        "max_rows_per_clip": MAX_ROWS,
    },
)

_FE = "/feature_extractor"

POLICY_KEYS: Final = standard_keys(
    PINNED,
    declared_frame_length=N_FFT,
    extra=(
        PolicyKey(
            target="options.audio_token_id",
            paths=("/audio_token_id",),
            maximum=2**31 - 1,
            description="<|pad|> id (the audio rows)",
        ),
        PolicyKey(
            target="options.audio_token",
            paths=("/audio_token",),
            kind="string",
            const=AUDIO_TOKEN,
            description="the processor's audio token",
        ),
        PolicyKey(
            target="options.max_audio_len",
            paths=("/max_audio_len",),
            const=MAX_AUDIO_LEN_SECONDS,
            description="the processor's window cap in seconds (21 windows of 30 s)",
        ),
        PolicyKey(
            target="options.feature_size",
            paths=("/feature_size", f"{_FE}/feature_size"),
            const=N_MELS,
            description="mel bins of the Whisper frontend",
        ),
        PolicyKey(
            target="options.n_fft",
            paths=("/n_fft", f"{_FE}/n_fft"),
            const=N_FFT,
            description="FFT size of the Whisper frontend",
        ),
        PolicyKey(
            target="options.hop_length",
            paths=("/hop_length",),
            const=HOP,
            description="frame hop of the Whisper frontend",
        ),
        PolicyKey(
            target="options.n_samples",
            paths=("/n_samples", f"{_FE}/n_samples"),
            const=WINDOW_SAMPLES,
            description="samples of the Whisper window each 30 s window is padded to",
        ),
        PolicyKey(
            target="options.nb_max_frames",
            paths=("/nb_max_frames", f"{_FE}/nb_max_frames"),
            const=WINDOW_FRAMES,
            description="feature frames of one Whisper window",
        ),
        PolicyKey(
            target="options.chunk_length",
            paths=("/chunk_length", f"{_FE}/chunk_length"),
            const=WINDOW_SECONDS,
            description="seconds of one Whisper window",
        ),
        PolicyKey(
            target="options.num_mel_bins",
            paths=("/audio_config/num_mel_bins",),
            const=N_MELS,
            description="mel bins the audio encoder consumes",
        ),
        PolicyKey(
            target="options.max_position_embeddings",
            paths=("/audio_config/max_position_embeddings",),
            const=WINDOW_FRAMES // 2,
            description="encoder positions (each window must be 2 × this frames long)",
        ),
        PolicyKey(
            target="options.padding_side",
            paths=("/padding_side", f"{_FE}/padding_side"),
            kind="string",
            const="right",
            description="batch padding side: each window is padded at its end",
        ),
    ),
)


def spec() -> FamilySpec:
    """The family registration record."""
    return FamilySpec(
        name=FAMILY,
        model_types=MODEL_TYPES,
        defaults=PINNED,
        keys=POLICY_KEYS,
        schema=load_packaged_schema(__package__ or "audiogate_glmasr"),
        revision=REVISION,
        version=__version__,
        summary="GLM-ASR: soxr HQ, 30 s windows of 128-bin Whisper log-mel, <|pad|> rows",
    )
