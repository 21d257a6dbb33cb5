"""Phi-4 Multimodal: pinned policy defaults, recognized keys and the family spec.

Pinned constants live here once, next to their source: the remote-code
``Phi4MMProcessor`` of microsoft/Phi-4-multimodal-instruct at revision
``93f923e1a7727d1c4f446756212d9d3e8fcc5d81`` (``processing_phi4mm.py``), as the seed
system pins them (``mlxcel-audio-boundary.md`` §3.2).
"""

from __future__ import annotations

from typing import Final

from audiogate.family import FamilySpec
from audiogate.policy import AudioPolicy, PolicyKey, load_packaged_schema, standard_keys
from audiogate_phi4mm._version import __version__

__all__ = ["FAMILY", "MODEL_TYPES", "PINNED", "POLICY_KEYS", "REVISION", "spec"]

FAMILY: Final = "phi4mm"
REVISION: Final = "93f923e1a7727d1c4f446756212d9d3e8fcc5d81"
#: ``phi4mm``: the remote-code checkpoint; ``phi4_multimodal``: the transformers-native one.
MODEL_TYPES: Final = ("phi4mm", "phi4_multimodal")

MIB: Final = 1 << 20
SAMPLE_RATE_HZ: Final = 16_000
MAX_AUDIO_DURATION_SECONDS: Final = 30 * 60
MAX_SAMPLES: Final = SAMPLE_RATE_HZ * MAX_AUDIO_DURATION_SECONDS  # 28,800,000
MAX_SOURCE_RATE_HZ: Final = 192_000
AUDIO_TOKEN_ID: Final = 200_011  # <|endoftext11|>
IMAGE_TOKEN_ID: Final = 200_010  # <|endoftext10|>
COMPRESSION_RATE: Final = 8  # preprocessor_config.json audio_compression_rate
DOWNSAMPLE_RATE: Final = 1  # preprocessor_config.json audio_downsample_rate

PINNED: Final = AudioPolicy(
    family=FAMILY,
    variant="remote_code",
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling="scipy_polyphase_integer",
    min_source_rate_hz=8_000,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=8,
    max_duration_seconds=MAX_AUDIO_DURATION_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    max_encoded_bytes_per_clip=256 * MIB,
    max_frames_per_clip=179_998,
    max_clips=16,
    max_encoded_bytes_per_request=256 * MIB,
    max_source_samples_per_request=MAX_SOURCE_RATE_HZ * MAX_AUDIO_DURATION_SECONDS,
    max_normalized_samples_per_request=MAX_SAMPLES,
    max_source_duration_us_per_request=MAX_AUDIO_DURATION_SECONDS * 1_000_000,
    max_frames_per_request=179_998,
    max_waveform_result_bytes_per_request=128 * MIB,
    max_waveform_working_bytes_per_request=512 * MIB,
    max_prepared_result_bytes_per_request=256 * MIB,
    frame_length_samples=400,
    frame_hop_samples=160,
    placeholder="numbered_per_clip",
    options={
        "audio_token_id": AUDIO_TOKEN_ID,
        "image_token_id": IMAGE_TOKEN_ID,
        "audio_compression_rate": COMPRESSION_RATE,
        "audio_downsample_rate": DOWNSAMPLE_RATE,
    },
)

POLICY_KEYS: Final = standard_keys(
    PINNED,
    extra=(
        PolicyKey(
            target="options.audio_compression_rate",
            paths=("/audio_compression_rate",),
            const=COMPRESSION_RATE,
            description="audio frames per prompt token (ceil(T/8))",
        ),
        PolicyKey(
            target="options.audio_downsample_rate",
            paths=("/audio_downsample_rate",),
            const=DOWNSAMPLE_RATE,
            description="the qformer downsample step, a no-op at 1",
        ),
        PolicyKey(
            target="options.audio_token_id",
            paths=("/audio_token_id", "/audio_config/audio_token_id"),
            const=AUDIO_TOKEN_ID,
            description="<|endoftext11|>, the audio placeholder id",
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
        schema=load_packaged_schema(__package__ or "audiogate_phi4mm"),
        revision=REVISION,
        version=__version__,
        summary="Phi-4 Multimodal: SpeechLib integer-ratio resampler, 80-bin log-mel, <|audio_N|>",
    )
