"""Qwen2.5-Omni: pinned policy defaults, recognized keys and the family spec.

The frontend is ``Qwen2_5OmniProcessor`` with ``WhisperFeatureExtractor`` as
Qwen/Qwen2.5-Omni-7B ships it (``preprocessor_config.json``: 16 kHz, 128 bins, ``n_fft``
400, ``hop_length`` 160, ``chunk_length`` 300, ``n_samples`` 4,800,000,
``nb_max_frames`` 30,000, ``padding_side`` right; the framing constants are in
:mod:`audiogate_qwen25omni.geometry`), and the thinker's ``config.json`` keys
(``thinker_config.audio_token_index`` 151646, ``audio_start_token_id`` 151647,
``audio_end_token_id`` 151648, ``audio_config.num_mel_bins`` 128). Source rates are what
the reference loader (``librosa.load(sr=16000)``, soxr HQ) converts; any channel count the
core downmixes. The sources of every value are in ``docs/provenance.md``.
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
from audiogate_qwen25omni._version import __version__
from audiogate_qwen25omni.geometry import (
    HOP,
    MAX_FRAMES,
    MAX_ROWS,
    MAX_SAMPLES,
    MAX_SECONDS,
    MIN_SAMPLES,
    N_FFT,
    N_MELS,
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

FAMILY: Final = "qwen25omni"
#: Reference: the checkpoint's processor as transformers 5.24.0 implements it.
REVISION: Final = "Qwen/Qwen2.5-Omni-7B@transformers-5.24.0"
MODEL_TYPES: Final = ("qwen2_5_omni",)

MIB: Final = 1 << 20
MIN_SOURCE_RATE_HZ: Final = 8_000
MAX_SOURCE_RATE_HZ: Final = 192_000
MAX_CHANNELS: Final = 8
#: Every clip is a 300 s window of 128 × 30,000 float32 (15.36 MB, twice with the batch):
#: eight clips fill the 256 MiB result budget.
MAX_CLIPS: Final = 8
AUDIO_TOKEN: Final = "<|AUDIO|>"
AUDIO_BOS_TOKEN: Final = "<|audio_bos|>"
AUDIO_EOS_TOKEN: Final = "<|audio_eos|>"
AUDIO_TOKEN_INDEX: Final = 151_646  # thinker_config.audio_token_index
AUDIO_BOS_TOKEN_ID: Final = 151_647  # thinker_config.audio_start_token_id
AUDIO_EOS_TOKEN_ID: Final = 151_648  # thinker_config.audio_end_token_id

_CLIP_RESULT_BYTES: Final = N_MELS * MAX_FRAMES * 4 + MAX_FRAMES  # features + bool mask

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
    # Eight retained 300 s waveforms at 16 kHz are 153.6 MB.
    max_waveform_result_bytes_per_request=160 * MIB,
    # Those plus one 300 s clip in flight from 192 kHz (230.4 MB decoded, soxr's buffers).
    max_waveform_working_bytes_per_request=512 * MIB,
    # Eight maximal clips: 15,390,000 B of result and 15,480,000 B collated each.
    max_prepared_result_bytes_per_request=256 * MIB,
    # Whisper frames are centred: a clip of N samples has ceil(N/160) valid frames.
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=HOP,
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
            paths=("/thinker_config/audio_token_index",),
            const=AUDIO_TOKEN_INDEX,
            description="<|AUDIO|> id",
        ),
        PolicyKey(
            target="options.audio_bos_token_id",
            paths=("/thinker_config/audio_start_token_id",),
            const=AUDIO_BOS_TOKEN_ID,
            description="<|audio_bos|> id",
        ),
        PolicyKey(
            target="options.audio_eos_token_id",
            paths=("/thinker_config/audio_end_token_id",),
            const=AUDIO_EOS_TOKEN_ID,
            description="<|audio_eos|> id",
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
            target="options.n_samples",
            paths=("/n_samples",),
            const=MAX_SAMPLES,
            description="samples of the window every clip is padded to",
        ),
        PolicyKey(
            target="options.nb_max_frames",
            paths=("/nb_max_frames",),
            const=MAX_FRAMES,
            description="feature frames of the window",
        ),
        PolicyKey(
            target="options.chunk_length",
            paths=("/chunk_length",),
            const=MAX_SECONDS,
            description="seconds of the window",
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
        schema=load_packaged_schema(__package__ or "audiogate_qwen25omni"),
        revision=REVISION,
        version=__version__,
        summary="Qwen2.5-Omni: soxr HQ, 128-bin Whisper log-mel over 300 s, <|AUDIO|> per row",
    )
