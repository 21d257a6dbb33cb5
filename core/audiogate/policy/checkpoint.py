"""Reading a model directory's config files and building its audio policy from them."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from audiogate.errors import PolicyError
from audiogate.jsonkeys import DuplicateKeyError, loads_unique_keys
from audiogate.policy.keys import PolicyKey
from audiogate.policy.model import AudioPolicy, ValueSource, frozen_mapping
from audiogate.policy.schema import iter_schema_errors, key_for_path

__all__ = [
    "MAX_CONFIG_BYTES",
    "MODEL_CONFIG",
    "PROCESSOR_CONFIGS",
    "CheckpointConfigs",
    "apply_keys",
    "check_tokenizer_files",
    "read_checkpoint_configs",
]

MODEL_CONFIG = "config.json"
#: The processor files, in lookup precedence; each that exists is read and validated,
#: and both shadow ``config.json`` (Gemma 3n ships its feature extractor in the first and
#: ``audio_seq_length`` in the second).
PROCESSOR_CONFIGS = ("preprocessor_config.json", "processor_config.json")
#: Largest config file read (real ones are a few KiB); a bigger one is refused unread.
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: A schema rule longer than this is cut (jsonschema quotes the offending value in it).
_MAX_RULE_CHARACTERS = 300


def _optional_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if value is None else frozen_mapping(value)


def _named_documents(
    pairs: Iterable[tuple[str, Mapping[str, Any]]],
) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    return tuple((name, frozen_mapping(document)) for name, document in pairs)


@attrs.frozen
class CheckpointConfigs:
    """The parsed JSON of a checkpoint's ``config.json`` and its processor file."""

    model: Mapping[str, Any] = attrs.field(converter=frozen_mapping)
    processor: Mapping[str, Any] | None = attrs.field(default=None, converter=_optional_mapping)
    model_file: str = MODEL_CONFIG
    processor_file: str | None = None
    directory: Path | None = None
    #: Further processor files after ``processor`` (``processor_config.json`` beside a
    #: ``preprocessor_config.json``), ``(file name, document)`` in precedence order.
    more_processors: tuple[tuple[str, Mapping[str, Any]], ...] = attrs.field(
        default=(), converter=_named_documents
    )

    @property
    def model_type(self) -> str | None:
        """``model_type`` from ``config.json``, if it is a string."""
        value = self.model.get("model_type")
        return value if isinstance(value, str) else None

    def roots(self) -> list[tuple[str, Mapping[str, Any]]]:
        """``(file name, document)`` in lookup precedence: processor files first."""
        out: list[tuple[str, Mapping[str, Any]]] = []
        if self.processor is not None:
            out.append((self.processor_file or PROCESSOR_CONFIGS[0], self.processor))
        out.extend(self.more_processors)
        out.append((self.model_file, self.model))
        return out


#: The files transformers reads for a tokenizer: a fast tokenizer, a SentencePiece
#: model, the usual vocabularies, and its configuration and chat templates. The first
#: group may be large (Gemma 3n's ``tokenizer.json`` is 33 MB); the others are text a
#: few KiB to a few MiB long.
TOKENIZER_DATA_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer.model.v3",
    "tekken.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
)
TOKENIZER_TEXT_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)
#: transformers' folder of named chat templates (``*.jinja``).
CHAT_TEMPLATE_FOLDER = "additional_chat_templates"
#: Largest tokenizer data file accepted; the text files share :data:`MAX_CONFIG_BYTES`.
MAX_TOKENIZER_DATA_BYTES = 256 * 1024 * 1024


def check_tokenizer_files(directory: str | os.PathLike[str]) -> bool:
    """Check the tokenizer files of a model directory before transformers reads them.

    transformers skips a file it cannot open and reads any file whole, so a dangling
    link would silently drop special tokens or the chat template, and a huge or endless
    file (a link to ``/dev/zero``) would take the memory of the server.

    :returns: whether the directory has a tokenizer (one of :data:`TOKENIZER_DATA_FILES`).
    :raises PolicyError: a tokenizer file that is a dangling link, not a regular file,
        unreadable, or larger than :data:`MAX_TOKENIZER_DATA_BYTES` (data files) or
        :data:`MAX_CONFIG_BYTES` (configuration and templates); or configuration and
        templates without any data file (transformers would build an empty tokenizer).
    """
    root = Path(directory)
    named = [(root / name, MAX_TOKENIZER_DATA_BYTES) for name in TOKENIZER_DATA_FILES]
    named += [(root / name, MAX_CONFIG_BYTES) for name in TOKENIZER_TEXT_FILES]
    folder = root / CHAT_TEMPLATE_FOLDER
    if folder.is_dir():
        named += [(path, MAX_CONFIG_BYTES) for path in sorted(folder.glob("*.jinja"))]
    present = []
    for path, limit in named:
        if not os.path.lexists(path):
            continue
        present.append(path)
        try:
            info = path.stat()  # links followed, as in Hugging Face caches
        except OSError as exc:
            raise PolicyError(f"cannot be read: {exc.strerror or exc}", file=str(path)) from exc
        if not stat.S_ISREG(info.st_mode):
            raise PolicyError("is not a regular file", file=str(path))
        if info.st_size > limit:
            raise PolicyError(
                f"is {info.st_size} bytes, more than the {limit} a tokenizer file may have",
                file=str(path),
            )
    data = [path for path in present if path.name in TOKENIZER_DATA_FILES]
    if present and not data:
        found = ", ".join(path.name for path in present)
        raise PolicyError(
            f"has tokenizer configuration ({found}) but no tokenizer: none of "
            f"{', '.join(TOKENIZER_DATA_FILES)}",
            file=str(root),
        )
    return bool(data)


def _read_bounded(path: Path) -> bytes:
    """A regular file's bytes (symlinks followed, as Hugging Face caches use them), at
    most :data:`MAX_CONFIG_BYTES`; FIFOs and devices are refused without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise PolicyError(f"cannot be read: {exc.strerror or exc}", file=str(path)) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PolicyError("is not a regular file", file=str(path))
        if info.st_size > MAX_CONFIG_BYTES:
            raise PolicyError(
                f"is {info.st_size} bytes, more than the {MAX_CONFIG_BYTES} a config file may have",
                file=str(path),
            )
        with open(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise PolicyError(f"cannot be read: {exc.strerror or exc}", file=str(path)) from exc
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise PolicyError(f"grew past {MAX_CONFIG_BYTES} bytes while read", file=str(path))
    return data


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = _read_bounded(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"is not UTF-8 text: {exc.reason}", file=str(path)) from exc
    try:
        # A key given twice is refused, not resolved: Python keeps the last, other
        # readers the first, and the first may be the stricter limit the author meant.
        document = loads_unique_keys(text)
    except DuplicateKeyError as exc:
        raise PolicyError(
            "gives a key twice in one JSON object; keep one", file=str(path), value=exc.key
        ) from None
    except json.JSONDecodeError as exc:
        raise PolicyError(
            f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            file=str(path),
        ) from exc
    except (ValueError, RecursionError) as exc:
        # An integer of more than 4,300 digits, or nesting deeper than the parser's stack.
        raise PolicyError(f"cannot be parsed: {exc}", file=str(path)) from None
    if not isinstance(document, dict):
        raise PolicyError(
            "must be a JSON object at the top level",
            file=str(path),
            json_path="/",
            value=type(document).__name__,
        )
    return document


def read_checkpoint_configs(directory: str | os.PathLike[str]) -> CheckpointConfigs:
    """Read ``config.json`` and every existing processor file of ``directory``.

    :raises PolicyError: the directory or ``config.json`` is missing, or a file is
        unreadable, not a regular file, over :data:`MAX_CONFIG_BYTES`, or not a JSON
        object (a dangling symlink named like a config file counts as present).
    """
    root = Path(directory)
    if not root.is_dir():
        raise PolicyError("model directory does not exist or is not a directory", file=str(root))
    model = _read_json(root / MODEL_CONFIG)
    processors = [
        (name, _read_json(root / name))
        for name in PROCESSOR_CONFIGS
        if (root / name).exists() or (root / name).is_symlink()
    ]
    first = processors[0] if processors else (None, None)
    return CheckpointConfigs(
        model=model,
        processor=first[1],
        model_file=MODEL_CONFIG,
        processor_file=first[0],
        directory=root,
        more_processors=tuple(processors[1:]),
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
        if len(rule) > _MAX_RULE_CHARACTERS:  # jsonschema's messages quote the value whole
            rule = rule[:_MAX_RULE_CHARACTERS] + "…"
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
        if frames < 1 or samples < policy.min_samples_per_clip:
            # Every request would be refused: a broken checkpoint, not a strict one.
            src = sources["max_samples_per_clip"]
            shortest = (
                f"the family's minimum of {policy.min_samples_per_clip} samples"
                if samples < policy.min_samples_per_clip
                else f"one feature frame ({policy.frame_length_samples} samples)"
            )
            raise PolicyError(
                f"admits no clip: a clip of at most {samples} samples is shorter than {shortest}",
                file=src.origin,
                json_path=src.key,
                value=samples,
            )
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
