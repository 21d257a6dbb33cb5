"""The JSON schema of a family's recognized keys, generated from its key table.

Each family ships the output as ``schema.json`` inside its package; a freshness test
regenerates it and compares (tox's pattern), so the schema cannot drift from the code.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from audiogate.policy.keys import LIMIT_NAMESPACES, PolicyKey

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__ = [
    "SCHEMA_DIALECT",
    "build_schema",
    "dump_schema",
    "iter_schema_errors",
    "key_for_path",
    "load_packaged_schema",
]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _is_strict_integer(_checker: Any, instance: Any) -> bool:
    # JSON has one number type; jsonschema counts 5.0 as an integer. A config value of
    # 5.0 for a sample count is a mistake worth refusing, as mlxcel's ``as_u64`` parse does
    # (``src/audio/preprocessing_policy.rs``).
    return isinstance(instance, int) and not isinstance(instance, bool)


@functools.cache
def _strict_validator() -> Any:
    # jsonschema is imported when a config file is first validated, not with the package:
    # listing families or preparing under pinned defaults never needs it.
    from jsonschema import Draft202012Validator, validators

    return validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_strict_integer),
    )


def _split(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {pointer!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def build_schema(family: str, keys: Sequence[PolicyKey], *, title: str = "") -> dict[str, Any]:
    """Build the draft 2020-12 schema that validates one checkpoint config file.

    Unknown top-level keys are allowed (real configs carry hundreds); unknown keys inside
    ``audiogate_audio_limits`` are refused, since that namespace is ours and a typo there
    would silently leave a bound at its default.
    """
    root: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "$id": f"https://audiogate.invalid/schemas/{family}.json",
        "title": title or f"audiogate {family} checkpoint audio policy keys",
        "type": "object",
        "properties": {},
    }
    for key in keys:
        for pointer in key.paths:
            node = root
            parts = _split(pointer)
            for part in parts[:-1]:
                child = node["properties"].setdefault(part, {"type": "object", "properties": {}})
                if part == LIMIT_NAMESPACES[0] and node is root:
                    child["additionalProperties"] = False
                node = child
            if parts[-1] in node["properties"]:
                raise ValueError(f"{family}: path {pointer} is declared by two keys")
            node["properties"][parts[-1]] = key.property_schema()
    return root


def dump_schema(schema: Mapping[str, Any]) -> str:
    """Serialise a schema the way the committed ``schema.json`` files are written."""
    return json.dumps(dict(schema), indent=2, sort_keys=True) + "\n"


def key_for_path(keys: Sequence[PolicyKey], pointer: str) -> PolicyKey | None:
    """The key that declares ``pointer``, if any."""
    for key in keys:
        if pointer in key.paths:
            return key
    return None


def iter_schema_errors(
    schema: Mapping[str, Any], document: Any
) -> Iterator[tuple[str, Any, ValidationError]]:
    """Yield ``(json_pointer, value, error)`` for each violation, in document order."""
    validator = _strict_validator()(schema)
    errors = sorted(
        validator.iter_errors(document),
        key=lambda e: (
            [str(p) for p in e.absolute_path],
            0 if e.validator == "type" else 1,
        ),
    )
    for error in errors:
        pointer = "/" + "/".join(
            str(p).replace("~", "~0").replace("/", "~1") for p in error.absolute_path
        )
        yield (pointer if error.absolute_path else "/", error.instance, error)


def load_packaged_schema(package: str, resource: str = "schema.json") -> dict[str, Any]:
    """Load the ``schema.json`` a family package ships (``importlib.resources``)."""
    from importlib.resources import files

    loaded: dict[str, Any] = json.loads(files(package).joinpath(resource).read_text("utf-8"))
    return loaded
