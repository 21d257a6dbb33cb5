"""Checkpoint audio policies: the model, the recognized keys, the schema and the loader."""

from __future__ import annotations

from audiogate.policy.checkpoint import (
    MODEL_CONFIG,
    PROCESSOR_CONFIGS,
    CheckpointConfigs,
    apply_keys,
    check_tokenizer_files,
    read_checkpoint_configs,
)
from audiogate.policy.keys import LIMIT_NAMESPACES, PolicyKey, flat_constants, standard_keys
from audiogate.policy.model import (
    MICROS_PER_SECOND,
    AudioPolicy,
    FeatureBackend,
    OverflowMode,
    PlaceholderKind,
    ValueSource,
    frozen_mapping,
)
from audiogate.policy.schema import build_schema, dump_schema, load_packaged_schema

__all__ = [
    "LIMIT_NAMESPACES",
    "MICROS_PER_SECOND",
    "MODEL_CONFIG",
    "PROCESSOR_CONFIGS",
    "AudioPolicy",
    "CheckpointConfigs",
    "FeatureBackend",
    "OverflowMode",
    "PlaceholderKind",
    "PolicyKey",
    "ValueSource",
    "apply_keys",
    "build_schema",
    "check_tokenizer_files",
    "dump_schema",
    "flat_constants",
    "frozen_mapping",
    "load_packaged_schema",
    "read_checkpoint_configs",
    "standard_keys",
]
