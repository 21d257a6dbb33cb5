"""Phi-4 Multimodal: pinned policy defaults, recognized keys, variants and the family spec.

Pinned constants live here once, next to their source: the remote-code
``Phi4MMProcessor`` of microsoft/Phi-4-multimodal-instruct at revision
``93f923e1a7727d1c4f446756212d9d3e8fcc5d81`` (``processing_phi4mm.py``), as mlxcel
pins them (``phi4mm()`` in ``src/audio/preprocessing_policy.rs``; docs/provenance.md).

Two checkpoint variants share these bounds and differ in their frontend:

* ``remote_code`` (the default): ``Phi4MMProcessor`` / ``Phi4MMAudioFeatureExtractor``,
  the SpeechLib integer-ratio resampler (with its 8 kHz "fillzero" path) and
  ``<|audio_N|>`` placeholders.
* ``native``: transformers' ``Phi4MultimodalProcessor`` /
  ``Phi4MultimodalFeatureExtractor`` (``model_type`` ``phi4_multimodal``). Its extractor
  only takes 16 kHz, and transformers' loader (``load_audio``) brings any rate there with
  soxr HQ, so this variant resamples with ``"soxr_hq"`` from any source rate (minimum
  1 Hz; the decoder and the policy's maximum still bound it); it has no 8 kHz path and
  uses the unnumbered ``<|audio|>`` placeholder.

A remote-code checkpoint may choose vLLM's resampling instead of the processor's rule:
``audiogate_audio_limits.resampling_algorithm = "scipy_polyphase_exact"``
(:mod:`audiogate_phi4mm.resample`; docs/provenance.md says why the default stays).

:func:`parse_policy` picks the variant from what the checkpoint's own files declare.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from audiogate.errors import PolicyError
from audiogate.family import FamilySpec
from audiogate.policy import (
    AudioPolicy,
    CheckpointConfigs,
    PolicyKey,
    ValueSource,
    apply_keys,
    flat_constants,
    load_packaged_schema,
    standard_keys,
)
from audiogate_phi4mm._version import __version__
from audiogate_phi4mm.resample import RESAMPLING_ALGORITHMS

__all__ = [
    "FAMILY",
    "MODEL_TYPES",
    "NATIVE_MIN_SOURCE_RATE_HZ",
    "PINNED",
    "POLICY_KEYS",
    "REVISION",
    "VARIANT_RESAMPLING",
    "Variant",
    "detect_variant",
    "parse_policy",
    "spec",
]

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

Variant = Literal["remote_code", "native"]

#: The resampler each variant's reference pipeline uses.
VARIANT_RESAMPLING: Final[Mapping[str, str]] = {
    "remote_code": "scipy_polyphase_integer",
    "native": "soxr_hq",
}
#: transformers' ``load_audio`` resamples any rate to 16 kHz; the decoder's own bounds
#: (and ``max_source_rate_hz``) still apply.
NATIVE_MIN_SOURCE_RATE_HZ: Final = 1


def _selectable_resampler(key: PolicyKey) -> PolicyKey:
    """The standard ``resampling_algorithm`` key, choosing the remote-code variant's
    resampler instead of confirming it."""
    if key.target != "resampling":
        return key
    return PolicyKey(
        target="resampling",
        paths=key.paths,
        kind="string",
        enum=RESAMPLING_ALGORITHMS,
        description=(
            "remote-code resampler: scipy_polyphase_integer (the processor's integer-ratio "
            "rule) or scipy_polyphase_exact (vLLM's exact ratio)"
        ),
    )


# ``resampling_algorithm`` (a standard key) chooses the remote-code variant's resampler:
# ``"scipy_polyphase_integer"`` (the published processor's rule, the default) or
# ``"scipy_polyphase_exact"`` (vLLM's); the native variant's ``"soxr_hq"`` follows from
# the processor the checkpoint declares, so a native checkpoint must not set the key.
_STANDARD_KEYS: Final = standard_keys(
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
        # Phi4MultimodalFeatureExtractor saves its frontend flat in preprocessor_config.json
        # (the remote-code one does not): a different frontend is refused, not ignored.
        *flat_constants(
            {
                "feature_size": (80, "mel bins of the frontend"),
                "win_length": (400, "analysis window at 16 kHz, samples"),
                "hop_length": (160, "frame hop at 16 kHz, samples"),
                "n_fft": (512, "FFT size at 16 kHz"),
                "padding_side": ("right", "batch padding side: clips are padded at the end"),
            }
        ),
    ),
)

POLICY_KEYS: Final = tuple(_selectable_resampler(key) for key in _STANDARD_KEYS)

# --- variants ------------------------------------------------------------------------

#: What each variant's files declare, by JSON pointer (in each file).
_DECLARATIONS: Final[Mapping[str, Mapping[str, Variant]]] = {
    "/model_type": {"phi4mm": "remote_code", "phi4_multimodal": "native"},
    "/processor_class": {"Phi4MMProcessor": "remote_code", "Phi4MultimodalProcessor": "native"},
    "/feature_extractor_type": {
        "Phi4MMAudioFeatureExtractor": "remote_code",
        "Phi4MultimodalFeatureExtractor": "native",
    },
    # transformers 5 writes one processor_config.json with nested sub-processors.
    "/audio_processor/feature_extractor_type": {
        "Phi4MMAudioFeatureExtractor": "remote_code",
        "Phi4MultimodalFeatureExtractor": "native",
    },
}


@attrs.frozen
class _Declaration:
    variant: Variant
    file: str
    pointer: str
    value: str


def _lookup(document: Mapping[str, Any], pointer: str) -> tuple[bool, Any]:
    node: Any = document
    for part in pointer[1:].split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def detect_variant(configs: CheckpointConfigs) -> tuple[Variant, ValueSource | None]:
    """The checkpoint's variant and the file and key that declare it.

    Looks at ``model_type``, ``processor_class`` and ``feature_extractor_type`` in the
    processor file and ``config.json``. Nothing declared: ``remote_code`` (the pinned
    revision), with no source.

    :raises PolicyError: a declaration names a processor of neither variant, is not a
        string, or two declarations disagree.
    """
    found: list[_Declaration] = []
    for file, document in configs.roots():
        for pointer, known in _DECLARATIONS.items():
            present, value = _lookup(document, pointer)
            if not present:
                continue
            if pointer == "/model_type" and file != configs.model_file:
                continue
            if not isinstance(value, str) or value not in known:
                if pointer == "/model_type":
                    continue  # the host chose this family by model_type already
                raise PolicyError(
                    "must name a Phi-4 MM processor: one of " + ", ".join(repr(v) for v in known),
                    file=file,
                    json_path=pointer,
                    value=value,
                    has_value=True,
                )
            found.append(_Declaration(known[value], file, pointer, value))
    variants = {d.variant for d in found}
    if len(variants) > 1:
        listed = "; ".join(f"{d.file}:{d.pointer} = {d.value!r} ({d.variant})" for d in found)
        first = found[0]
        raise PolicyError(
            f"the checkpoint declares both the remote-code and the transformers-native "
            f"Phi-4 MM processor ({listed})",
            file=first.file,
            json_path=first.pointer,
            value=first.value,
        )
    if not found:
        return "remote_code", None
    # Prefer the processor file's word: it is what loads the audio frontend.
    chosen = found[0]
    return chosen.variant, ValueSource("checkpoint", chosen.file, chosen.pointer)


def parse_policy(family: FamilySpec, configs: CheckpointConfigs) -> AudioPolicy:
    """The effective policy: the family's keys applied, then the variant's frontend.

    :raises PolicyError: an invalid key, contradictory variant declarations, or a
        ``resampling_algorithm`` key on a native checkpoint.
    """
    variant, source = detect_variant(configs)
    # The native frontend admits any rate from 1 Hz: a checkpoint's source-rate bounds are
    # checked against that minimum, not the remote-code one.
    defaults = family.defaults
    if variant != "remote_code":
        defaults = attrs.evolve(defaults, min_source_rate_hz=NATIVE_MIN_SOURCE_RATE_HZ)
    policy = apply_keys(defaults, family.keys, family.schema, configs)
    expected = VARIANT_RESAMPLING[variant]
    sources = dict(policy.sources)
    if source is not None:
        sources["variant"] = source
    if variant == "remote_code":
        return attrs.evolve(policy, variant=variant, sources=sources)
    declared = sources.get("resampling")
    if declared is not None and declared.kind == "checkpoint":
        raise PolicyError(
            f"the transformers-native Phi-4 MM frontend (declared at "
            f"{source.describe() if source else 'the checkpoint'}) resamples with "
            f"{expected!r}; remove the key",
            file=declared.origin,
            json_path=declared.key,
            value=policy.resampling,
        )
    derived = ValueSource("derived", source.describe() if source else "variant", "variant")
    sources["resampling"] = derived
    sources["min_source_rate_hz"] = derived
    return attrs.evolve(
        policy,
        variant=variant,
        resampling=expected,
        min_source_rate_hz=NATIVE_MIN_SOURCE_RATE_HZ,
        sources=sources,
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
        feature_backends=("numpy", "mlx"),
    )
