"""Audio Flamingo 3: pinned policy defaults, recognized keys and the family spec.

The frontend is ``AudioFlamingo3Processor`` with ``WhisperFeatureExtractor(feature_size=128,
return_attention_mask=True)`` as transformers 5.24.0 implements it and as
nvidia/audio-flamingo-3-hf configures it (``convert_audioflamingo3_to_hf.py`` of
transformers writes its processor: ``audio_token`` ``<sound>``, ``max_audio_len`` 600,
the extractor's 16 kHz, ``n_fft`` 400, ``hop_length`` 160, ``chunk_length`` 30,
``n_samples`` 480,000, ``nb_max_frames`` 3000; ``config.json``: ``audio_token_id``
151669, ``audio_config.num_mel_bins`` 128, ``audio_config.max_source_positions`` 1500).

Source rules: every rate soxr converts (8 to 192 kHz, as ``librosa.load`` does in transformers'
``load_audio``) and any channel count up to 8, averaged to mono. A clip
needs more than 320 normalized samples (three mask frames, one pooled row). Longer clips
than the processor's 600 s are **refused** (``LimitError``): the processor would keep the
first 20 windows and drop the rest with only a log line. The processor refuses more
than one audio per prompt; audiogate admits up to 16 and places each clip's rows in clip
order (see :mod:`audiogate_audioflamingo3.prompt`).
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
from audiogate_audioflamingo3._version import __version__
from audiogate_audioflamingo3.geometry import (
    HOP,
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

FAMILY: Final = "audioflamingo3"
#: Reference: the checkpoint's processor as transformers 5.24.0 implements it.
REVISION: Final = "nvidia/audio-flamingo-3-hf@transformers-5.24.0"
MODEL_TYPES: Final = ("audioflamingo3",)

MIB: Final = 1 << 20
MIN_SOURCE_RATE_HZ: Final = 8_000
MAX_SOURCE_RATE_HZ: Final = 192_000
MAX_CHANNELS: Final = 8
#: Three mask frames make one pooled row: ``ceil(N / 160) >= 3``.
MIN_SAMPLES: Final = 321
MAX_CLIPS: Final = 16
#: Audio of all clips of one request: two maximal (10 minute) clips.
MAX_REQUEST_SECONDS: Final = 2 * MAX_SECONDS
AUDIO_TOKEN: Final = "<sound>"
AUDIO_TOKEN_ID: Final = 151_669  # config.json audio_token_id
#: ``AudioFlamingo3Processor(max_audio_len=600)``.
MAX_AUDIO_LEN_SECONDS: Final = MAX_SECONDS

# A maximal clip's result: 20 windows × (128 × 3000 float32 + a 3000-frame bool mask) =
# 30,780,000 B; the preflight adds a collated copy per clip at the largest clip's size
# (30,723,000 B for 20 windows). Two maximal clips need 122,886,000 B.
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
    # 10 minutes of 48 kHz stereo PCM16 is 115,200,000 B; longer or wider PCM sources are
    # compressed or shorter.
    max_encoded_bytes_per_clip=128 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    max_clips=MAX_CLIPS,
    max_encoded_bytes_per_request=256 * MIB,
    max_source_samples_per_request=MAX_REQUEST_SECONDS * MAX_SOURCE_RATE_HZ,
    max_normalized_samples_per_request=MAX_REQUEST_SECONDS * SAMPLE_RATE_HZ,
    max_source_duration_us_per_request=MAX_REQUEST_SECONDS * 1_000_000,
    max_frames_per_request=2 * MAX_FRAMES,
    # 20 minutes of retained 16 kHz waveforms are 76,800,000 B.
    max_waveform_result_bytes_per_request=80 * MIB,
    # Those plus one maximal clip in flight at 192 kHz (460,800,000 B decoded), the
    # decoder's block in 8 channels (4.2 MB) and soxr's scratch: ~543 MB.
    max_waveform_working_bytes_per_request=544 * MIB,
    # Two maximal clips (122.9 MB), or one and a few short ones.
    max_prepared_result_bytes_per_request=256 * MIB,
    # Whisper frames are centred: a clip of N samples has ceil(N/160) valid frames.
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=HOP,
    placeholder="rows_per_clip",
    options={
        "audio_token_id": AUDIO_TOKEN_ID,
        "audio_token": AUDIO_TOKEN,
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
            description="<sound> id",
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
            description="the processor's window cap in seconds (20 windows of 30 s)",
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
            target="options.max_source_positions",
            paths=("/audio_config/max_source_positions",),
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
        schema=load_packaged_schema(__package__ or "audiogate_audioflamingo3"),
        revision=REVISION,
        version=__version__,
        summary="Audio Flamingo 3: soxr HQ, 30 s windows of 128-bin Whisper log-mel, <sound> rows",
    )
