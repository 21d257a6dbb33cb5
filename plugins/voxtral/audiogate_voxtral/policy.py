"""Voxtral: pinned policy defaults, recognized keys and the family spec.

Reference: mistralai/Voxtral-Mini-3B-2507 as transformers 5.24.0 processes it
(``VoxtralProcessor``: ``WhisperFeatureExtractor(feature_size=128)`` for the features,
mistral-common 1.13's ``MistralCommonBackend`` / ``AudioEncoder`` for the prompt). Its files
(``preprocessor_config.json``: 16 kHz, ``n_fft`` 400, ``hop_length`` 160,
``chunk_length`` 30, ``n_samples`` 480,000, ``nb_max_frames`` 3000, ``dither`` 0.0;
``config.json``: ``audio_token_id`` 24, ``audio_config.num_mel_bins`` 128,
``max_source_positions`` 1500; ``tekken.json``: ``[AUDIO]`` 24, ``[BEGIN_AUDIO]`` 25,
``audio.frame_rate`` 12.5, ``chunk_length_s`` 30) are bundled in
``examples/models/voxtral-mini-3b-2507`` (docs/provenance.md says which are verified).

Long audio is never truncated: the processor splits it into 30 s windows (375 tokens
each), and so does this family. The cap is the model card's: "Voxtral handles audios up
to 30 minutes for transcription" within its 32k-token context, i.e. 60 windows and
22,500 audio tokens per request; longer audio is refused (``LimitError``).
"""

from __future__ import annotations

from typing import Final

from audiogate.family import FamilySpec
from audiogate.policy import (
    AudioPolicy,
    PolicyKey,
    flat_constants,
    load_packaged_schema,
    standard_keys,
)
from audiogate_voxtral._version import __version__
from audiogate_voxtral.geometry import (
    CHUNK_SAMPLES,
    HOP,
    N_FFT,
    N_MELS,
    SAMPLE_RATE_HZ,
    WINDOW_FRAMES,
)

__all__ = [
    "AUDIO_TOKEN",
    "AUDIO_TOKEN_ID",
    "BEGIN_AUDIO_TOKEN",
    "BEGIN_AUDIO_TOKEN_ID",
    "FAMILY",
    "MAX_SECONDS",
    "MAX_WINDOWS",
    "MODEL_TYPES",
    "PINNED",
    "POLICY_KEYS",
    "REVISION",
    "spec",
]

FAMILY: Final = "voxtral"
#: Reference: the checkpoint's processor as transformers 5.24.0 and mistral-common 1.13
#: implement it.
REVISION: Final = "mistralai/Voxtral-Mini-3B-2507@transformers-5.24.0+mistral-common-1.13.1"
MODEL_TYPES: Final = ("voxtral",)

MIB: Final = 1 << 20
#: The model card: up to 30 minutes of audio (for transcription) in the 32k context.
MAX_SECONDS: Final = 30 * 60
MAX_WINDOWS: Final = MAX_SECONDS * SAMPLE_RATE_HZ // CHUNK_SAMPLES  # 60
MAX_SAMPLES: Final = MAX_WINDOWS * CHUNK_SAMPLES  # 28,800,000
MAX_FRAMES: Final = MAX_WINDOWS * WINDOW_FRAMES  # 180,000
#: Every rate mistral-common's soxr resampler converts (as for the other families).
MIN_SOURCE_RATE_HZ: Final = 8_000
MAX_SOURCE_RATE_HZ: Final = 192_000
MAX_CHANNELS: Final = 8
MAX_CLIPS: Final = 16
#: ``VoxtralProcessor.audio_token_id`` (hard-coded there) and ``config.json``.
AUDIO_TOKEN: Final = "[AUDIO]"
AUDIO_TOKEN_ID: Final = 24
#: mistral-common's ``SpecialTokens.begin_audio``: one before each clip's ``[AUDIO]`` run.
BEGIN_AUDIO_TOKEN: Final = "[BEGIN_AUDIO]"
BEGIN_AUDIO_TOKEN_ID: Final = 25
_WINDOW_BYTES: Final = N_MELS * WINDOW_FRAMES * 4  # 1,536,000 B of features per window

PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    # mistral-common's Audio.resample: soxr.resample(x, rate, 16000, quality="HQ"), at
    # soxr's own length (no librosa fix_length).
    resampling="soxr_hq_native",
    min_source_rate_hz=MIN_SOURCE_RATE_HZ,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=MAX_CHANNELS,
    # The processor takes silence (one window of constant features); nothing to refuse.
    refuse_all_zero=False,
    # An empty clip has no window (the feature extractor fails on it); one sample has one.
    min_samples_per_clip=1,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    # 30 min of 16 kHz mono PCM16 is 57.6 MB; wider or longer PCM must be compressed.
    max_encoded_bytes_per_clip=256 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    max_clips=MAX_CLIPS,
    max_encoded_bytes_per_request=256 * MIB,
    # The context holds 60 windows for the whole request, however they are split.
    max_source_samples_per_request=MAX_SECONDS * MAX_SOURCE_RATE_HZ,
    max_normalized_samples_per_request=MAX_SAMPLES,
    max_source_duration_us_per_request=MAX_SECONDS * 1_000_000,
    max_frames_per_request=MAX_FRAMES,
    # 28,800,000 retained samples × 4 B = 115,200,000 B.
    max_waveform_result_bytes_per_request=112 * MIB,
    # Those plus one long source decoding and resampling (30 min at 48 kHz is 345.6 MB
    # decoded); longer high-rate sources are refused by this cap before decoding.
    max_waveform_working_bytes_per_request=512 * MIB,
    # 60 windows of features (92,160,000 B) and their collated copy.
    max_prepared_result_bytes_per_request=256 * MIB,
    # Frames are counted over the padded signal: P / 160 for P a multiple of 480,000.
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=CHUNK_SAMPLES,
    placeholder="rows_per_clip",
    options={
        "audio_token_id": AUDIO_TOKEN_ID,
        "begin_audio_token_id": BEGIN_AUDIO_TOKEN_ID,
        "audio_token": AUDIO_TOKEN,
        "begin_audio_token": BEGIN_AUDIO_TOKEN,
        "max_windows": MAX_WINDOWS,
    },
)

POLICY_KEYS: Final = standard_keys(
    PINNED,
    declared_frame_length=N_FFT,
    extra=(
        PolicyKey(
            target="options.audio_token_id",
            paths=("/audio_token_id",),
            const=AUDIO_TOKEN_ID,
            description="[AUDIO] id (VoxtralProcessor hard-codes 24)",
        ),
        PolicyKey(
            target="options.feature_size",
            paths=("/feature_size", "/feature_extractor/feature_size"),
            const=N_MELS,
            description="mel bins of the Whisper frontend",
        ),
        PolicyKey(
            target="options.n_fft",
            paths=("/n_fft", "/feature_extractor/n_fft"),
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
            paths=("/n_samples",),
            const=CHUNK_SAMPLES,
            description="samples of one 30 s window (clips are padded to a multiple of it)",
        ),
        PolicyKey(
            target="options.nb_max_frames",
            paths=("/nb_max_frames",),
            const=WINDOW_FRAMES,
            description="feature frames of one window",
        ),
        PolicyKey(
            target="options.chunk_length",
            paths=("/chunk_length",),
            const=CHUNK_SAMPLES // SAMPLE_RATE_HZ,
            description="seconds of one window",
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
            description="encoder positions per window (features are 2 × this frames long)",
        ),
        *flat_constants({"padding_side": ("right", "window padding side: zeros after the audio")}),
    ),
)


def spec() -> FamilySpec:
    """The family registration record."""
    return FamilySpec(
        name=FAMILY,
        model_types=MODEL_TYPES,
        defaults=PINNED,
        keys=POLICY_KEYS,
        schema=load_packaged_schema(__package__ or "audiogate_voxtral"),
        revision=REVISION,
        version=__version__,
        summary="Voxtral: soxr HQ, 128-bin Whisper log-mel in 30 s windows, 375 [AUDIO] each",
    )
