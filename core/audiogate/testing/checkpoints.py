"""Checkpoint config documents for tests: restating a family's keys at their pinned values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from audiogate.family import FamilySpec
from audiogate.policy import AudioPolicy, PolicyKey

__all__ = ["pinned_document", "pinned_value"]


def pinned_value(key: PolicyKey, pinned: AudioPolicy) -> Any:
    """The value a checkpoint would declare for ``key`` to restate the pinned policy."""
    if key.has_const:
        return key.const
    if key.apply == "cap_samples_by_seconds":
        return pinned.max_duration_seconds
    if key.target.startswith("options."):
        return pinned.options[key.target.removeprefix("options.")]
    return getattr(pinned, key.target)


def pinned_document(spec: FamilySpec, *, skip_targets: Sequence[str] = ()) -> dict[str, Any]:
    """A config document declaring every recognized key (its first path) at its pinned value.

    :param skip_targets: key targets to leave out (a key a variant refuses).
    """
    document: dict[str, Any] = {}
    for key in spec.keys:
        if key.target in skip_targets:
            continue
        parts = key.paths[0][1:].split("/")
        node = document
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = pinned_value(key, spec.defaults)
    return document
