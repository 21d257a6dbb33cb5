"""Qwen2-Audio: pinned policy defaults, recognized keys and the family spec.

Source rules from the seed ``003_b4bc0aaf81808af3.txt`` (rates, channels, 30 s per
source, more than 320 samples, exact all-zero refusal, 750 rows of 16,384 bytes); the
frontend is ``WhisperFeatureExtractor(feature_size=128)`` with ``Qwen2AudioProcessor``
as shipped by Qwen/Qwen2-Audio-7B-Instruct.
"""

from __future__ import annotations

from typing import Final

from audiogate.family import FamilySpec
from audiogate.policy import AudioPolicy, PolicyKey, load_packaged_schema, standard_keys
from audiogate_qwen2audio._version import __version__

__all__ = ["FAMILY", "MODEL_TYPES", "PINNED", "POLICY_KEYS", "REVISION", "spec"]

FAMILY: Final = "qwen2audio"
#: Reference: the checkpoint's processor as transformers 5.24.0 implements it.
REVISION: Final = "Qwen/Qwen2-Audio-7B-Instruct@transformers-5.24.0"
MODEL_TYPES: Final = ("qwen2_audio",)

MIB: Final = 1 << 20
SAMPLE_RATE_HZ: Final = 16_000
SOURCE_RATES_HZ: Final = (16_000, 44_100, 48_000)
MAX_SECONDS: Final = 30
MAX_SAMPLES: Final = SAMPLE_RATE_HZ * MAX_SECONDS  # 480,000 = n_samples
MAX_CLIPS: Final = 16
HOP: Final = 160
MAX_FRAMES: Final = MAX_SAMPLES // HOP  # 3000 = nb_max_frames
MAX_ROWS: Final = 750
ROW_BYTES: Final = 4096 * 4  # one projected row of 4096 float32
AUDIO_TOKEN_INDEX: Final = 151_646  # <|AUDIO|>

PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling="soxr_hq",
    min_source_rate_hz=min(SOURCE_RATES_HZ),
    max_source_rate_hz=max(SOURCE_RATES_HZ),
    allowed_source_rates_hz=SOURCE_RATES_HZ,
    max_source_channels=2,
    refuse_all_zero=True,
    min_samples_per_clip=321,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    max_encoded_bytes_per_clip=16 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    max_clips=MAX_CLIPS,
    max_encoded_bytes_per_request=64 * MIB,
    max_source_samples_per_request=MAX_CLIPS * MAX_SECONDS * max(SOURCE_RATES_HZ),
    max_normalized_samples_per_request=MAX_CLIPS * MAX_SAMPLES,
    max_source_duration_us_per_request=MAX_CLIPS * MAX_SECONDS * 1_000_000,
    max_frames_per_request=MAX_CLIPS * MAX_FRAMES,
    max_waveform_result_bytes_per_request=32 * MIB,
    max_waveform_working_bytes_per_request=64 * MIB,
    max_prepared_result_bytes_per_request=256 * MIB,
    # Whisper frames are centred: a clip of N samples has ceil(N/160) valid frames.
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=HOP,
    placeholder="rows_per_clip",
    options={
        "audio_token_index": AUDIO_TOKEN_INDEX,
        "max_rows_per_clip": MAX_ROWS,
        "row_bytes": ROW_BYTES,
    },
)

POLICY_KEYS: Final = standard_keys(
    PINNED,
    declared_frame_length=400,
    extra=(
        PolicyKey(
            target="options.audio_token_index",
            paths=("/audio_token_index",),
            maximum=2**31 - 1,
            description="<|AUDIO|> id",
        ),
        PolicyKey(
            target="options.feature_size",
            paths=("/feature_size", "/feature_extractor/feature_size"),
            const=128,
            description="mel bins of the Whisper frontend",
        ),
        PolicyKey(
            target="options.n_fft",
            paths=("/n_fft", "/feature_extractor/n_fft"),
            const=400,
            description="FFT size of the Whisper frontend",
        ),
        PolicyKey(
            target="options.hop_length",
            paths=("/hop_length",),
            const=HOP,
            description="frame hop of the Whisper frontend",
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
        schema=load_packaged_schema(__package__ or "audiogate_qwen2audio"),
        revision=REVISION,
        version=__version__,
        summary="Qwen2-Audio: soxr HQ, 128-bin Whisper log-mel, <|AUDIO|> per pooled row",
    )
