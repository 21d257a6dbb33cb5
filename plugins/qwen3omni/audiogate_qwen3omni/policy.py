"""Qwen3-Omni (the audio path of the MoE thinker): pinned policy defaults, recognized keys
and the family spec.

The frontend is ``Qwen3OmniMoeProcessor`` with ``WhisperFeatureExtractor`` as
Qwen/Qwen3-Omni-30B-A3B-Instruct ships it (``preprocessor_config.json``: 16 kHz, 128 bins,
``n_fft`` 400, ``hop_length`` 160), called with ``padding=True, truncation=False`` (the
framing is in :mod:`audiogate_qwen3omni.geometry`), and the thinker's ``config.json``
keys (``thinker_config.audio_token_id`` 151675, ``audio_start_token_id`` 151669,
``audio_end_token_id`` 151670, ``audio_config.num_mel_bins`` 128, ``audio_config.n_window``
50). Source rates are what the reference loader (``librosa.load(sr=16000)``, soxr HQ)
converts; any channel count the core downmixes. The sources of every value are in
``docs/provenance.md``.
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
from audiogate_qwen3omni._version import __version__
from audiogate_qwen3omni.geometry import (
    HOP,
    MAX_FRAMES,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_SECONDS,
    MIN_SAMPLES,
    N_FFT,
    N_MELS,
    N_WINDOW,
    SAMPLE_RATE_HZ,
)

__all__ = [
    "AUDIO_BOS_TOKEN",
    "AUDIO_BOS_TOKEN_ID",
    "AUDIO_EOS_TOKEN",
    "AUDIO_EOS_TOKEN_ID",
    "AUDIO_TOKEN",
    "AUDIO_TOKEN_INDEX",
    "FAMILY",
    "MAX_CLIPS",
    "MODEL_TYPES",
    "PINNED",
    "POLICY_KEYS",
    "REVISION",
    "spec",
]

FAMILY: Final = "qwen3omni"
#: Reference: the checkpoint's processor as transformers 5.24.0 implements it.
REVISION: Final = "Qwen/Qwen3-Omni-30B-A3B-Instruct@transformers-5.24.0"
MODEL_TYPES: Final = ("qwen3_omni_moe",)

MIB: Final = 1 << 20
MIN_SOURCE_RATE_HZ: Final = 8_000
MAX_SOURCE_RATE_HZ: Final = 192_000
MAX_CHANNELS: Final = 8
#: A clip's features are as long as the clip (128 × 100 float32 per second); sixteen
#: 300 s clips would need 16 × 30.9 MB, so the result budget (256 MiB) admits about eight
#: maximal clips and any number of shorter ones up to sixteen.
MAX_CLIPS: Final = 16
AUDIO_TOKEN: Final = "<|audio_pad|>"
AUDIO_BOS_TOKEN: Final = "<|audio_start|>"
AUDIO_EOS_TOKEN: Final = "<|audio_end|>"
AUDIO_TOKEN_INDEX: Final = 151_675  # thinker_config.audio_token_id
AUDIO_BOS_TOKEN_ID: Final = 151_669  # thinker_config.audio_start_token_id
AUDIO_EOS_TOKEN_ID: Final = 151_670  # thinker_config.audio_end_token_id

PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling="soxr_hq",
    min_source_rate_hz=MIN_SOURCE_RATE_HZ,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=MAX_CHANNELS,
    # A silent clip is a valid input of the reference (its features are the clamp floor).
    refuse_all_zero=False,
    min_samples_per_clip=MIN_SAMPLES,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    # 300 s of 48 kHz stereo float32 is 115.2 MB of samples.
    max_encoded_bytes_per_clip=128 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    max_clips=MAX_CLIPS,
    max_encoded_bytes_per_request=256 * MIB,
    max_source_samples_per_request=MAX_CLIPS * MAX_SECONDS * MAX_SOURCE_RATE_HZ,
    max_normalized_samples_per_request=MAX_CLIPS * MAX_SAMPLES,
    max_source_duration_us_per_request=MAX_CLIPS * MAX_SECONDS * 1_000_000,
    max_frames_per_request=MAX_CLIPS * MAX_FRAMES,
    # Retained 16 kHz waveforms: 160 MiB holds eight of 300 s.
    max_waveform_result_bytes_per_request=160 * MIB,
    # Those plus one 300 s clip in flight from 192 kHz (230.4 MB decoded, soxr's buffers).
    max_waveform_working_bytes_per_request=512 * MIB,
    # A 300 s clip: 15,390,000 B of result and 15,480,000 B collated.
    max_prepared_result_bytes_per_request=256 * MIB,
    # A clip of N samples has N // 160 frames (the centred STFT's last is dropped):
    # 160-sample frames without padding count exactly those.
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=1,
    placeholder="rows_per_clip",
    options={
        "audio_token_index": AUDIO_TOKEN_INDEX,
        "audio_bos_token_id": AUDIO_BOS_TOKEN_ID,
        "audio_eos_token_id": AUDIO_EOS_TOKEN_ID,
        "audio_token": AUDIO_TOKEN,
        "audio_bos_token": AUDIO_BOS_TOKEN,
        "audio_eos_token": AUDIO_EOS_TOKEN,
        # What the chat template prints for each audio part, whatever its payload.
        "chat_audio_marker": AUDIO_TOKEN,
        "max_rows_per_clip": MAX_ROWS,
    },
)

POLICY_KEYS: Final = standard_keys(
    PINNED,
    declared_frame_length=N_FFT,
    extra=(
        PolicyKey(
            target="options.audio_token_index",
            paths=("/thinker_config/audio_token_id",),
            const=AUDIO_TOKEN_INDEX,
            description="<|audio_pad|> id",
        ),
        PolicyKey(
            target="options.audio_bos_token_id",
            paths=("/thinker_config/audio_start_token_id",),
            const=AUDIO_BOS_TOKEN_ID,
            description="<|audio_start|> id",
        ),
        PolicyKey(
            target="options.audio_eos_token_id",
            paths=("/thinker_config/audio_end_token_id",),
            const=AUDIO_EOS_TOKEN_ID,
            description="<|audio_end|> id",
        ),
        PolicyKey(
            target="options.num_mel_bins",
            paths=("/thinker_config/audio_config/num_mel_bins",),
            const=N_MELS,
            description="mel bins the audio encoder consumes",
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
            target="options.n_window",
            paths=("/thinker_config/audio_config/n_window",),
            const=N_WINDOW,
            description="audio encoder window (2 × n_window-frame chunks; sets the token count)",
        ),
        # The thinker reads feature_attention_mask as right padding: another side is
        # refused, not ignored.
        *flat_constants(
            {"padding_side": ("right", "batch padding side: clips are padded at the end")}
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
        schema=load_packaged_schema(__package__ or "audiogate_qwen3omni"),
        revision=REVISION,
        version=__version__,
        summary="Qwen3-Omni: soxr HQ, 128-bin Whisper log-mel of each clip, <|audio_pad|> per row",
    )
