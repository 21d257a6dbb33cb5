"""The registration record a family plugin hands to ``register``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from audiogate.policy.keys import PolicyKey
from audiogate.policy.model import AudioPolicy, frozen_mapping, str_tuple

__all__ = ["FAMILY_NAME_RE", "FamilySpec", "RegisteredFamily"]

#: Family names are short identifiers: they appear in metric labels and CLI arguments.
FAMILY_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,31}$")


def _key_tuple(value: Iterable[PolicyKey]) -> tuple[PolicyKey, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class FamilySpec:
    """Who a family is and what it pins.

    :param name: family name (``"gemma3n"``), also the metrics label.
    :param model_types: ``config.json`` ``model_type`` values it handles.
    :param defaults: the pinned policy used when a checkpoint declares nothing.
    :param keys: the checkpoint config keys it recognizes (drives lookup and schema).
    :param schema: the JSON schema it ships (generated from ``keys``, committed).
    :param revision: the pinned checkpoint or reference revision.
    :param version: the plugin's version.
    :param summary: one line for ``audiogate families``.
    :param source_reference: the text form of a reference to a stored source in this
        family's prompts (group 1: the 64-hex digest), or ``None`` where it has none;
        with a source store, the gate resolves each through the store (docs/sources.md).
    """

    name: str
    model_types: tuple[str, ...] = attrs.field(converter=str_tuple)
    defaults: AudioPolicy
    keys: tuple[PolicyKey, ...] = attrs.field(converter=_key_tuple)
    schema: Mapping[str, Any] = attrs.field(converter=frozen_mapping)
    revision: str
    version: str
    summary: str = ""
    source_reference: re.Pattern[str] | None = None


@attrs.frozen(kw_only=True)
class RegisteredFamily:
    """A family as the host knows it: the spec plus where it came from.

    :param distribution: the installed distribution that provided it (``"audiogate-phi4mm"``),
        or ``"<direct>"`` for a plugin object registered without installation.
    :param plugin_name: the pluggy plugin name (the entry point name).
    """

    spec: FamilySpec
    distribution: str
    distribution_version: str | None
    plugin_name: str
