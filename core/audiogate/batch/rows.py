"""One manifest row in, one output row out: the per-row code both engines run.

A manifest row is a JSON object (a JSON Lines line, or a Parquet row as a dict) with an
``id`` and either ``messages`` (OpenAI-style chat messages, as the server takes them) or
``audio`` (a path under the media root, or an ``http(s)://`` URL) with an optional
``prompt``. :func:`prepare_row` never raises for a bad row: the typed error's code and
message go into the output row, so one bad clip never fails a job.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs

from audiogate.errors import INTERNAL_CODE, AudioGateError
from audiogate.errors import error_code as library_error_code
from audiogate.policy import AudioPolicy

__all__ = [
    "BadRowError",
    "GateSpec",
    "error_code",
    "npy_bytes",
    "policy_fingerprint",
    "prepare_row",
    "row_digest",
    "row_key",
]

_T = TypeVar("_T")

#: The ``error_code`` of an exception audiogate did not raise on purpose (a bug).
INTERNAL: Final = INTERNAL_CODE


class BadRowError(AudioGateError):
    """A manifest row that is not a row: not JSON, not an object, no usable ``id``, or
    neither (or both) of ``messages`` and ``audio``."""

    code = "bad_row"


def error_code(error: BaseException) -> str:
    """The stable code of ``error`` in the output's ``error_code`` column: the library's
    one vocabulary (:func:`audiogate.errors.error_code`, the same code the server's JSON
    gives); :data:`INTERNAL` for an exception audiogate did not raise on purpose."""
    return library_error_code(error)


def policy_fingerprint(policy: AudioPolicy) -> str:
    """A short digest of everything that decides the family's output (family, variant,
    frontend, limits, token ids): two rows with the same fingerprint were prepared
    alike. The first 16 hex digits of the SHA-256 of the policy's canonical JSON."""
    values = policy.as_dict()
    values.pop("feature_backend", None)  # numpy and MLX agree within the parity bound
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def npy_bytes(array: Any) -> bytes:
    """``array`` as the bytes of a ``.npy`` file (``np.load(io.BytesIO(b))`` reads it)."""
    import numpy as np

    out = io.BytesIO()
    np.save(out, np.asarray(array), allow_pickle=False)
    return out.getvalue()


def row_key(row_id: str | None, row_sha256: str) -> str:
    """What a resumed run matches finished rows by: the id, or for a row without one
    (unreadable JSON) the digest of its text."""
    return f"id:{row_id}" if row_id is not None else f"sha256:{row_sha256}"


@attrs.frozen(kw_only=True)
class GateSpec:
    """How each process (or Ray actor) builds its gate: picklable, built once per process.

    :param model_dir: a checkpoint directory, or ``None`` with ``family``.
    :param family: a family's pinned defaults (no tokenizer: plain prompts only).
    :param media_root: the directory ``audio`` paths and ``file://`` URLs are confined to.
    :param allow_url_fetch: fetch ``http(s)://`` audio (public addresses only).
    :param block_threads: threads per clip in the process that builds the gate
        (:func:`~audiogate.dsp.blocks.set_block_threads`); ``None`` keeps the process's
        default. The engines set ``1`` where each process or actor has one core of its own.
    """

    model_dir: str | None = None
    family: str | None = None
    media_root: str | None = None
    allow_url_fetch: bool = False
    block_threads: int | None = None

    def __attrs_post_init__(self) -> None:
        if (self.model_dir is None) == (self.family is None):
            raise ValueError("GateSpec: give exactly one of model_dir and family")

    def for_workers(self, threads: int) -> GateSpec:
        """This spec for a process or actor that is one of several workers: ``threads``
        threads per clip, unless :attr:`block_threads` says otherwise."""
        if self.block_threads is not None:
            return self
        return attrs.evolve(self, block_threads=threads)

    def build(self) -> Any:
        """The :class:`~audiogate.api.AudioGate` (no worker: one row at a time in the
        calling thread, under the policy's per-request budgets)."""
        from audiogate.acquire import AcquisitionPolicy
        from audiogate.api import AudioGate

        if self.block_threads is not None:
            from audiogate.dsp.blocks import set_block_threads

            set_block_threads(self.block_threads)
        acquisition = AcquisitionPolicy(
            allow_url_fetch=self.allow_url_fetch,
            media_root=None if self.media_root is None else Path(self.media_root).resolve(),
        )
        if self.model_dir is not None:
            return AudioGate.from_model_dir(self.model_dir, acquisition=acquisition)
        assert self.family is not None
        return AudioGate.from_family(self.family, acquisition=acquisition)


def row_digest(raw: str | bytes | Mapping[str, Any]) -> str:
    """The SHA-256 of the row's text (of a dict: its canonical JSON)."""
    if isinstance(raw, Mapping):
        text = json.dumps(dict(raw), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()
    return hashlib.sha256(raw.encode() if isinstance(raw, str) else bytes(raw)).hexdigest()


def _load(raw: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """The row as a dict (``BadRowError`` if it is not a JSON object)."""
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRowError(f"manifest row is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadRowError(f"manifest row must be a JSON object, got {type(value).__name__}")
    return value


def _row_id(row: Mapping[str, Any]) -> str:
    value = row.get("id")
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise BadRowError(
            f"manifest row needs an 'id' (a non-empty string or an integer), got {value!r}"
        )
    return str(value)


def _drop_nulls(value: Any) -> Any:
    # A Parquet manifest's nested messages come back with every struct field of the
    # column's schema, null where the part had none (a text part's "audio_url": None).
    if isinstance(value, Mapping):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_drop_nulls(v) for v in value]
    return value


def _messages(row: Mapping[str, Any]) -> Any:
    messages = row["messages"]
    if isinstance(messages, str):  # a Parquet manifest may hold them as JSON text
        try:
            messages = json.loads(messages)
        except ValueError as exc:
            raise BadRowError(f"manifest row 'messages' is not JSON: {exc}") from None
    elif not isinstance(messages, Mapping):
        messages = _drop_nulls(messages)
    if not isinstance(messages, list) or not messages:
        raise BadRowError(
            "manifest row 'messages' must be a non-empty list of chat messages, got "
            f"{type(messages).__name__}"
        )
    return messages


def _prepare(gate: Any, row: Mapping[str, Any]) -> Any:
    """The gate's :class:`~audiogate.api.PreparedRequest` for ``row``."""
    has_messages = row.get("messages") is not None
    has_audio = row.get("audio") is not None
    if has_messages == has_audio:
        raise BadRowError("manifest row needs exactly one of 'messages' and 'audio'")
    if has_messages:
        if row.get("prompt") is not None:
            raise BadRowError("manifest row: 'prompt' goes with 'audio', not with 'messages'")
        return gate.prepare(_messages(row))
    audio, prompt = row["audio"], row.get("prompt")
    if not isinstance(audio, str) or not audio:
        raise BadRowError(f"manifest row 'audio' must be a path or URL, got {audio!r}")
    if prompt is not None and not isinstance(prompt, str):
        raise BadRowError(f"manifest row 'prompt' must be text, got {type(prompt).__name__}")
    from audiogate.acquire import acquire_parts_sync

    # The server's rules for an audio_url part: a bare path or file:// URL under the
    # media root, an http(s):// URL only with URL fetching on. A file is read in this
    # thread, with no event loop (a URL runs on one of its own).
    part = {"type": "audio_url", "audio_url": {"url": audio}}
    clips = acquire_parts_sync([part], policy=gate.acquisition)
    # As `audiogate prepare --prompt`: one user turn of the checkpoint's template, the clip
    # before the prompt (no prompt: the clip alone in the user turn); a plain prompt for
    # a family's pinned defaults.
    return gate.prepare_user_turn(prompt, clips)


def prepare_row(
    gate: Any, raw: str | bytes | Mapping[str, Any], *, fingerprint: str
) -> dict[str, Any]:
    """The output row of one manifest row (see ``docs/datasets.md`` for the columns).

    :param gate: the process's :class:`~audiogate.api.AudioGate`.
    :param raw: a JSON Lines line, or a Parquet row as a dict.
    :param fingerprint: :func:`policy_fingerprint` of the gate's policy.
    """
    out: dict[str, Any] = {
        "id": None,
        "status": "error",
        "error_code": None,
        "error": None,
        "input_ids": [],
        "tokens": [],
        "frames": [],
        "family": gate.policy.family,
        "policy_fingerprint": fingerprint,
        "features": [],
        "masks": [],
        "row_sha256": row_digest(raw),
    }
    try:
        row = _load(raw)
        out["id"] = _row_id(row)
        result = _prepare(gate, row)
        clips = result.batch.clips if result.batch is not None else ()
        out.update(
            status="ok",
            input_ids=[int(i) for i in result.input_ids],
            tokens=[int(c.tokens) for c in clips],
            frames=[int(c.frames) for c in clips],
            features=[npy_bytes(f) for f in result.features],
            masks=[None if m is None else npy_bytes(m) for m in result.masks],
        )
    except Exception as exc:  # a bad row is recorded, never the end of the job
        out.update(
            status="error",
            error_code=error_code(exc),
            error=str(exc) if isinstance(exc, AudioGateError) else f"{type(exc).__name__}: {exc}",
            input_ids=[],
            tokens=[],
            frames=[],
            features=[],
            masks=[],
        )
    return out
