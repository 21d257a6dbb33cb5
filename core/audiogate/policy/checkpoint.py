"""Reading a model directory's config files and building its audio policy from them."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from audiogate.errors import PolicyError
from audiogate.policy.keys import PolicyKey
from audiogate.policy.model import AudioPolicy, ValueSource, frozen_mapping
from audiogate.policy.schema import iter_schema_errors, key_for_path

__all__ = [
    "MODEL_CONFIG",
    "PROCESSOR_CONFIGS",
    "CheckpointConfigs",
    "apply_keys",
    "read_checkpoint_configs",
]

MODEL_CONFIG = "config.json"
#: The first of these that exists is the processor file; it shadows ``config.json``.
PROCESSOR_CONFIGS = ("preprocessor_config.json", "processor_config.json")


def _optional_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if value is None else frozen_mapping(value)


@attrs.frozen
class CheckpointConfigs:
    """The parsed JSON of a checkpoint's ``config.json`` and its processor file."""

    model: Mapping[str, Any] = attrs.field(converter=frozen_mapping)
    processor: Mapping[str, Any] | None = attrs.field(default=None, converter=_optional_mapping)
    model_file: str = MODEL_CONFIG
    processor_file: str | None = None
    directory: Path | None = None

    @property
    def model_type(self) -> str | None:
        """``model_type`` from ``config.json``, if it is a string."""
        value = self.model.get("model_type")
        return value if isinstance(value, str) else None

    def roots(self) -> list[tuple[str, Mapping[str, Any]]]:
        """``(file name, document)`` in lookup precedence: processor file first."""
        out: list[tuple[str, Mapping[str, Any]]] = []
        if self.processor is not None:
            out.append((self.processor_file or PROCESSOR_CONFIGS[0], self.processor))
        out.append((self.model_file, self.model))
        return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot be read: {exc.strerror or exc}", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise PolicyError(f"is not UTF-8 text: {exc.reason}", file=str(path)) from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PolicyError(
            f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            file=str(path),
        ) from exc
    if not isinstance(document, dict):
        raise PolicyError(
            "must be a JSON object at the top level",
            file=str(path),
            json_path="/",
            value=type(document).__name__,
        )
    return document


def read_checkpoint_configs(directory: str | os.PathLike[str]) -> CheckpointConfigs:
    """Read ``config.json`` and the first existing processor file of ``directory``.

    :raises PolicyError: the directory or ``config.json`` is missing, or a file is
        unreadable or not a JSON object.
    """
    root = Path(directory)
    if not root.is_dir():
        raise PolicyError("model directory does not exist or is not a directory", file=str(root))
    model = _read_json(root / MODEL_CONFIG)
    processor: dict[str, Any] | None = None
    processor_file: str | None = None
    for name in PROCESSOR_CONFIGS:
        candidate = root / name
        if candidate.exists():
            processor = _read_json(candidate)
            processor_file = name
            break
    return CheckpointConfigs(
        model=model,
        processor=processor,
        model_file=MODEL_CONFIG,
        processor_file=processor_file,
        directory=root,
    )


def _lookup(document: Mapping[str, Any], pointer: str) -> tuple[bool, Any]:
    node: Any = document
    for part in pointer[1:].split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _validate(
    file: str, document: Mapping[str, Any], schema: Mapping[str, Any], keys: tuple[PolicyKey, ...]
) -> None:
    for pointer, value, error in iter_schema_errors(schema, dict(document)):
        key = key_for_path(keys, pointer)
        if key is not None:
            rule = key.rule()
        elif error.validator == "additionalProperties":
            rule = f"is not a recognized key here ({error.message})"
        elif error.validator == "type":
            rule = f"must be a JSON {error.validator_value}"
        else:
            rule = error.message
        raise PolicyError(rule, file=file, json_path=pointer, value=value, has_value=True)


def apply_keys(
    pinned: AudioPolicy,
    keys: tuple[PolicyKey, ...],
    schema: Mapping[str, Any],
    configs: CheckpointConfigs,
) -> AudioPolicy:
    """Build the effective policy: pinned defaults overridden by recognized checkpoint keys.

    Every file is validated against ``schema`` first, so a wrong type, a negative or
    non-integer number, a zero bound, a bound above the pinned maximum or a frontend
    other than the family's fails with the file, JSON path, value and rule. Keys with a
    ``const`` never change the policy: they only confirm the frontend.
    """
    roots = configs.roots()
    for file, document in roots:
        _validate(file, document, schema, keys)

    changes: dict[str, Any] = {}
    options = dict(pinned.options)
    sources: dict[str, ValueSource] = dict(pinned.sources)

    def current(field: str) -> Any:
        return changes.get(field, getattr(pinned, field))

    for key in keys:
        found: tuple[str, str, Any] | None = None
        for file, document in roots:
            for pointer in key.paths:
                present, value = _lookup(document, pointer)
                if present:
                    found = (file, pointer, value)
                    break
            if found is not None:
                break
        if found is None:
            continue
        file, pointer, value = found
        source = ValueSource("checkpoint", file, pointer)
        if key.apply == "cap_samples_by_seconds":
            capped = min(int(current("max_samples_per_clip")), int(value) * pinned.target_rate_hz)
            changes["max_samples_per_clip"] = capped
            sources["max_samples_per_clip"] = source
        elif key.has_const:
            sources[key.target] = source
        elif key.target.startswith("options."):
            name = key.target.removeprefix("options.")
            options[name] = value
            sources[key.target] = source
        else:
            changes[key.target] = value
            sources[key.target] = source

    samples = int(current("max_samples_per_clip"))
    pinned_seconds_cap = pinned.target_rate_hz * pinned.max_duration_seconds
    if samples > pinned_seconds_cap:
        src = sources.get("max_samples_per_clip")
        raise PolicyError(
            f"per-clip sample cap exceeds the pinned family duration of "
            f"{pinned.max_duration_seconds} s ({pinned_seconds_cap} samples)",
            file=src.origin if src else None,
            json_path=src.key if src else None,
            value=samples,
        )
    if "max_samples_per_clip" in changes:
        derived_from = ValueSource(
            "derived", sources["max_samples_per_clip"].describe(), "max_samples_per_clip"
        )
        changes["max_duration_seconds"] = math.ceil(samples / pinned.target_rate_hz)
        sources["max_duration_seconds"] = derived_from
    max_rate = int(current("max_source_rate_hz"))
    if max_rate < pinned.min_source_rate_hz:
        src = sources["max_source_rate_hz"]
        raise PolicyError(
            f"must be at least the family's minimum source rate {pinned.min_source_rate_hz} Hz",
            file=src.origin,
            json_path=src.key,
            value=max_rate,
        )
    policy = attrs.evolve(pinned, **changes, options=options, sources=sources)
    if "max_samples_per_clip" in changes:
        frames = policy.estimate_frames(samples)
        policy = attrs.evolve(
            policy,
            max_frames_per_clip=min(frames, pinned.max_frames_per_clip),
            sources={
                **sources,
                "max_frames_per_clip": ValueSource(
                    "derived", sources["max_samples_per_clip"].describe(), "max_samples_per_clip"
                ),
            },
        )
    return policy
