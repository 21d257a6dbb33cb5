"""Gemma 3n: pinned policy defaults, recognized keys and the family spec.

Pinned constants live here once, next to their source: transformers revision
``181beb3ba4c47098ed8cbc97ee250d1d45ae0107`` (``Gemma3nAudioFeatureExtractor``,
``Gemma3nProcessor``) and ``Gemma3nConfig`` defaults, as mlxcel pins them
(``gemma3n()`` in ``src/audio/preprocessing_policy.rs``; docs/provenance.md). The
frontend's own constants and frame arithmetic live in :mod:`audiogate_gemma3n.geometry`.

Over-long audio is refused by default (``overflow = "reject"``). The opt-in
``audiogate_audio_limits.overflow = "truncate"`` keeps the first ``max_samples_per_clip``
normalized samples of a longer clip (the pipeline cuts the waveform and reports processed
and received durations; the linear resampler's prefix is exact); never silently.
Clips shorter than 513 normalized samples are refused (``min_samples_per_clip``): the
reference would give them zero frames (see :mod:`audiogate_gemma3n.geometry`).

The resampler is a choice: ``audiogate_audio_limits.resampling_algorithm`` is
``"linear"`` (the default, mlxcel's, without anti-aliasing) or ``"torchaudio_sinc"``
(band-limited, what vLLM runs for Gemma 3n); :mod:`audiogate_gemma3n.resample` has both,
docs/provenance.md says why the default stays linear.
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
from audiogate_gemma3n._version import __version__
from audiogate_gemma3n.geometry import (
    FEATURE_SIZE,
    FFT_LENGTH,
    FRAME_HOP_SAMPLES,
    FRAME_SAMPLES,
    MIN_SAMPLES,
    PAD_MULTIPLE_SAMPLES,
    SAMPLE_RATE_HZ,
    SOFT_TOKENS_PER_CLIP,
    UNFOLD_SAMPLES,
    feature_frames,
)
from audiogate_gemma3n.resample import LINEAR, RESAMPLING_ALGORITHMS

__all__ = ["FAMILY", "MODEL_TYPES", "PINNED", "POLICY_KEYS", "REVISION", "spec"]

FAMILY: Final = "gemma3n"
REVISION: Final = "181beb3ba4c47098ed8cbc97ee250d1d45ae0107"
MODEL_TYPES: Final = ("gemma3n",)

MIB: Final = 1 << 20
MAX_SECONDS: Final = 30
MAX_SAMPLES: Final = SAMPLE_RATE_HZ * MAX_SECONDS  # 480,000 (the FE's max_length)
MAX_FRAMES: Final = feature_frames(MAX_SAMPLES)  # 2,997
MAX_SOURCE_RATE_HZ: Final = 192_000
BOA_TOKEN_ID: Final = 256_000  # <start_of_audio>
EOA_TOKEN_ID: Final = 262_272  # <end_of_audio>
AUDIO_TOKEN_ID: Final = 262_273  # <audio_soft_token>
#: ``Gemma3nAudioFeatureExtractor.frame_length``: 32 ms at 16 kHz. Framing reads one more
#: sample for the pre-emphasis, so the frontend's analysis frame is 513 samples.
DECLARED_FRAME_LENGTH: Final = FRAME_SAMPLES

PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling=LINEAR,
    min_source_rate_hz=1,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=8,
    min_samples_per_clip=MIN_SAMPLES,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    max_encoded_bytes_per_clip=64 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    max_clips=16,
    max_encoded_bytes_per_request=64 * MIB,
    max_source_samples_per_request=MAX_SOURCE_RATE_HZ * MAX_SECONDS,
    max_normalized_samples_per_request=MAX_SAMPLES,
    max_source_duration_us_per_request=MAX_SECONDS * 1_000_000,
    max_frames_per_request=MAX_FRAMES,
    max_waveform_result_bytes_per_request=2 * MIB,
    max_waveform_working_bytes_per_request=32 * MIB,
    max_prepared_result_bytes_per_request=64 * MIB,
    frame_length_samples=UNFOLD_SAMPLES,
    frame_hop_samples=FRAME_HOP_SAMPLES,
    pad_multiple_samples=PAD_MULTIPLE_SAMPLES,
    placeholder="fixed_soft_tokens_per_clip",
    soft_tokens_per_clip=SOFT_TOKENS_PER_CLIP,
    options={
        "boa_token_id": BOA_TOKEN_ID,
        "eoa_token_id": EOA_TOKEN_ID,
        "audio_token_id": AUDIO_TOKEN_ID,
        "padding_side": "right",
    },
)

_TOKEN_ID_MAX: Final = 2**31 - 1


def _selectable_resampler(key: PolicyKey) -> PolicyKey:
    """The standard ``resampling_algorithm`` key, choosing among this family's resamplers
    instead of confirming one."""
    if key.target != "resampling":
        return key
    return PolicyKey(
        target="resampling",
        paths=key.paths,
        kind="string",
        enum=RESAMPLING_ALGORITHMS,
        description="resampler to 16 kHz: linear (no anti-aliasing) or torchaudio_sinc",
    )


_STANDARD_KEYS: Final = standard_keys(
    PINNED,
    declared_frame_length=DECLARED_FRAME_LENGTH,
    overflow_modes=("reject", "truncate"),
    extra=(
        PolicyKey(
            target="soft_tokens_per_clip",
            paths=("/audio_seq_length", "/audio_soft_tokens_per_image"),
            const=SOFT_TOKENS_PER_CLIP,
            description="soft tokens per clip (what the audio tower is padded to)",
        ),
        PolicyKey(
            target="options.boa_token_id",
            paths=("/boa_token_id",),
            maximum=_TOKEN_ID_MAX,
            description="<start_of_audio> id",
        ),
        PolicyKey(
            target="options.eoa_token_id",
            paths=("/eoa_token_id",),
            maximum=_TOKEN_ID_MAX,
            description="<end_of_audio> id",
        ),
        PolicyKey(
            target="options.audio_token_id",
            paths=("/audio_token_id",),
            maximum=_TOKEN_ID_MAX,
            description="<audio_soft_token> id",
        ),
        PolicyKey(
            target="options.padding_side",
            paths=("/padding_side", "/feature_extractor/padding_side"),
            kind="string",
            enum=("right", "left"),
            description="which side the batch view pads shorter clips on",
        ),
        # The checkpoint's preprocessor_config.json states the frontend flat (as
        # Gemma3nAudioFeatureExtractor saves it): a different one is refused, not ignored.
        *flat_constants(
            {
                "feature_extractor_type": (
                    "Gemma3nAudioFeatureExtractor",
                    "the feature extractor this frontend reproduces",
                ),
                "feature_size": (FEATURE_SIZE, "mel bins of the frontend"),
                "frame_length": (FRAME_SAMPLES, "analysis frame of the frontend, samples"),
                "hop_length": (FRAME_HOP_SAMPLES, "frame hop of the frontend, samples"),
                "fft_length": (FFT_LENGTH, "FFT size of the frontend"),
            }
        ),
    ),
)
POLICY_KEYS: Final = tuple(_selectable_resampler(key) for key in _STANDARD_KEYS)


def spec() -> FamilySpec:
    """The family registration record."""
    return FamilySpec(
        name=FAMILY,
        model_types=MODEL_TYPES,
        defaults=PINNED,
        keys=POLICY_KEYS,
        schema=load_packaged_schema(__package__ or "audiogate_gemma3n"),
        revision=REVISION,
        version=__version__,
        summary="Gemma 3n: linear resampler, 128-bin USM log-mel, 188 soft tokens per clip",
        feature_backends=("numpy", "mlx"),
    )
