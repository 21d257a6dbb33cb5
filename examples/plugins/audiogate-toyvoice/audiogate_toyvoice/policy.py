"""toyvoice: pinned defaults, the checkpoint keys it recognizes, and its registration record.

toyvoice is made up, so its "checkpoint revision" is too. A real family pins the values
of the processor revision it reproduces here, next to a comment naming that source. The
frame constants live with the arithmetic that uses them, in :mod:`~audiogate_toyvoice.geometry`.

Regenerate ``schema.json`` after changing :data:`POLICY_KEYS`::

    python -m audiogate_toyvoice.policy > audiogate_toyvoice/schema.json
"""

from __future__ import annotations

from typing import Final

from audiogate.family import FamilySpec
from audiogate.policy import (
    AudioPolicy,
    PolicyKey,
    build_schema,
    dump_schema,
    load_packaged_schema,
    standard_keys,
)
from audiogate_toyvoice import __version__
from audiogate_toyvoice.geometry import FRAME_HOP_SAMPLES, FRAME_SAMPLES, N_MELS, frame_count

__all__ = [
    "AUDIO_END_TOKEN",
    "AUDIO_START_TOKEN",
    "AUDIO_TOKEN",
    "FAMILY",
    "MODEL_TYPES",
    "PINNED",
    "POLICY_KEYS",
    "REVISION",
    "SAMPLE_RATE_HZ",
    "spec",
]

FAMILY: Final = "toyvoice"
MODEL_TYPES: Final = ("toyvoice",)
REVISION: Final = "toyvoice-processor-2025.1"

MIB: Final = 1 << 20
SAMPLE_RATE_HZ: Final = 16_000
MAX_SECONDS: Final = 60
MAX_SAMPLES: Final = SAMPLE_RATE_HZ * MAX_SECONDS
MAX_SOURCE_RATE_HZ: Final = 96_000
MAX_CLIPS: Final = 8
MAX_FRAMES: Final = frame_count(MAX_SAMPLES)  # 5,998

AUDIO_START_TOKEN: Final = "<|toy_audio_start|>"
AUDIO_TOKEN: Final = "<|toy_audio|>"
AUDIO_END_TOKEN: Final = "<|toy_audio_end|>"

PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling="toy_sinc",
    min_source_rate_hz=8_000,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=2,
    # Shorter than one frame has no features: refuse it in the preflight.
    min_samples_per_clip=FRAME_SAMPLES,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    max_encoded_bytes_per_clip=64 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    max_clips=MAX_CLIPS,
    max_encoded_bytes_per_request=128 * MIB,
    max_source_samples_per_request=MAX_CLIPS * MAX_SECONDS * MAX_SOURCE_RATE_HZ,
    max_normalized_samples_per_request=MAX_CLIPS * MAX_SAMPLES,
    max_source_duration_us_per_request=MAX_CLIPS * MAX_SECONDS * 1_000_000,
    max_frames_per_request=MAX_CLIPS * MAX_FRAMES,
    # Eight retained 60 s waveforms: 30.72 MB.
    max_waveform_result_bytes_per_request=32 * MIB,
    # Those, plus one 96 kHz stereo source decoding (23 MB) and the resampler's scratch.
    max_waveform_working_bytes_per_request=96 * MIB,
    # Eight maximal clips (0.96 MB of features each) and their collated copy.
    max_prepared_result_bytes_per_request=32 * MIB,
    frame_length_samples=FRAME_SAMPLES,
    frame_hop_samples=FRAME_HOP_SAMPLES,
    placeholder="rows_per_clip",
    options={
        "audio_start_token_id": 1_000,
        "audio_token_id": 1_001,
        "audio_end_token_id": 1_002,
    },
)

_TOKEN_ID_MAX: Final = 2**31 - 1

POLICY_KEYS: Final = standard_keys(
    PINNED,
    extra=(
        PolicyKey(
            target="options.audio_start_token_id",
            paths=("/audio_start_token_id",),
            maximum=_TOKEN_ID_MAX,
            description=f"{AUDIO_START_TOKEN} id",
        ),
        PolicyKey(
            target="options.audio_token_id",
            paths=("/audio_token_id",),
            maximum=_TOKEN_ID_MAX,
            description=f"{AUDIO_TOKEN} id",
        ),
        PolicyKey(
            target="options.audio_end_token_id",
            paths=("/audio_end_token_id",),
            maximum=_TOKEN_ID_MAX,
            description=f"{AUDIO_END_TOKEN} id",
        ),
        PolicyKey(
            target="options.num_mel_bins",
            paths=("/feature_extractor/num_mel_bins", "/num_mel_bins"),
            const=N_MELS,
            description="mel bins of the frontend",
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
        schema=load_packaged_schema("audiogate_toyvoice"),
        revision=REVISION,
        version=__version__,
        summary="toyvoice: windowed-sinc resampler, 40-bin log-mel, <|toy_audio|> per 4 frames",
    )


if __name__ == "__main__":
    print(dump_schema(build_schema(FAMILY, POLICY_KEYS)), end="")
