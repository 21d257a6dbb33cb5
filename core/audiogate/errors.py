"""One root exception and narrow typed subclasses, and one vocabulary of error codes.

Every message says what was wrong, the value received, the allowed values where there
are any, and which clip, key or file it concerns. Servers map the classes to status
codes (bad input → 400, limits → 413, queue full → 429, worker unavailable → 503).

Every error has a stable ``code``: the same string is the server's JSON ``code``, the
batch output's ``error_code`` and what :func:`error_code` returns (``"internal"`` for an
exception audiogate did not raise on purpose). Most classes have one code; a
:class:`DecodeError` names the rule that failed (``riff_size_mismatch``, ...). The
``reason`` class attribute is the coarser metrics label a rejection is counted under
(``audiogate_audio_preprocess_rejections_total``: ``queue_full``, ``memory_limit``,
``worker_unavailable``, ``overflow``, ``waveform``, ``feature``, ``feature_panic``,
``context_limit``, and ``cancelled``); the table of every code with its reason, HTTP
status and exit code is ``docs/reference/errors.md``.
"""

from __future__ import annotations

import reprlib
import traceback
from typing import Any, ClassVar, Final

__all__ = [
    "INTERNAL_CODE",
    "AcquisitionError",
    "AudioGateError",
    "AudioInputError",
    "ChatRequestError",
    "CodecsUnavailableError",
    "ContextLimitError",
    "DecodeError",
    "EmptyAudioError",
    "FeatureError",
    "LimitError",
    "MemoryLimitError",
    "MissingExtraError",
    "NonFiniteSampleError",
    "PlaceholderError",
    "PluginError",
    "PolicyError",
    "PreprocessCancelled",
    "QueueFullError",
    "RequestError",
    "SizeOverflowError",
    "SourceBusyError",
    "SourceError",
    "SourceLostError",
    "SourceNotFoundError",
    "SourceQuotaError",
    "SourceRetiredError",
    "SourceStoreMissingError",
    "StreamTimeoutError",
    "WorkerUnavailableError",
    "clear_frames",
    "clip_number",
    "error_code",
    "install_hint",
]


def clip_number(clip_index: Any) -> Any:
    """The one-based number a message shows for a zero-based ``clip_index`` (as the
    summaries number clips); a template placeholder is shown as ``{clip_index + 1}``."""
    if isinstance(clip_index, int) and not isinstance(clip_index, bool):
        return clip_index + 1
    return f"{str(clip_index)[:-1]} + 1}}"


#: What a rule refusing a clip is, by ``DecodeError.code``: a policy limit or something
#: audiogate does not decode is not "corrupt".
_DECODE_VERBS: dict[str, str] = {
    "rate_below_minimum": "is outside the audio policy",
    "rate_not_allowed": "is outside the audio policy",
    "all_zero": "is refused by the audio policy",
    "unsupported_format": "is in a format audiogate does not decode",
    "unsupported_subformat": "is in a format audiogate does not decode",
    "unsupported_codec": "is in a format audiogate does not decode",
    "unknown_container": "is in a format audiogate does not decode",
    "format_mismatch": "is not in the declared format",
    "codecs_unavailable": "cannot be decoded here",
    "buffer_not_contiguous": "cannot be read as bytes",
    "geometry_mismatch": "does not match the geometry given for it",
    "decoder_crashed": "could not be decoded",
    "decoder_timeout": "could not be decoded",
    "decoder_memory_limit": "could not be decoded",
    "decoder_error": "could not be decoded",
}

#: Limits of the request's text or of the HTTP body, not of its audio: their message does
#: not say "audio".
_NOT_AUDIO_LIMITS: frozenset[str] = frozenset(
    {"request body bytes", "in-flight request body bytes", "prompt text bytes", "prefill tokens"}
)

#: Units of the per-clip policy limits, and the scale of a value shown in that unit.
_LIMIT_UNITS: dict[str, tuple[str, int]] = {
    "source sample rate": ("Hz", 1),
    "source channels": ("channels", 1),
    "source duration per clip": ("s", 1_000_000),
    "source frames per clip": ("frames", 1),
}


#: The code of an exception audiogate did not raise on purpose (a bug).
INTERNAL_CODE: Final = "internal"


class AudioGateError(Exception):
    """Root of every error audiogate raises on purpose."""

    #: The stable machine-readable name (server JSON ``code``, batch ``error_code``).
    code: str = "error"
    #: Rejection reason label (``audiogate_audio_preprocess_rejections_total``).
    reason: ClassVar[str] = "waveform"


def error_code(error: BaseException) -> str:
    """The code of ``error`` in every output: its ``code`` for an audiogate error,
    :data:`INTERNAL_CODE` for anything else."""
    if isinstance(error, AudioGateError):
        code = getattr(error, "code", None)
        if isinstance(code, str) and code:
            return code
        return AudioGateError.code
    return INTERNAL_CODE


# --- start-up errors -----------------------------------------------------------------

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 120
_SHORT.maxlong = 40
_SHORT.maxlevel = 4
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8


def _shown(value: Any) -> str:
    """``repr`` of an offending value, shortened: a config value can be megabytes long or
    nested hundreds deep, and the message must stay one readable line."""
    try:
        return _SHORT.repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit, say
        return f"<{type(value).__name__}>"


class PolicyError(AudioGateError):
    """A checkpoint's audio policy cannot be loaded; model start-up must fail.

    :param file: the config file concerned (``config.json``, ...), or ``None``.
    :param json_path: JSON pointer of the offending key (``/feature_extractor/max_length``).
    :param value: the value found there.
    :param rule: the rule it breaks, with the allowed values.
    """

    code = "policy"
    reason = "waveform"

    def __init__(
        self,
        rule: str,
        *,
        file: str | None = None,
        json_path: str | None = None,
        value: Any = None,
        has_value: bool = False,
    ) -> None:
        self.rule = rule
        self.file = file
        self.json_path = json_path
        self.value = value
        where = f" in {file}" if file else ""
        if json_path is not None:
            where = f"{where} at {json_path}"
        shown = f" (got {_shown(value)})" if has_value or value is not None else ""
        super().__init__(f"invalid audio policy{where}: {rule}{shown}")


class PluginError(AudioGateError):
    """A family plugin failed to load, registered something unusable, or misbehaved.

    The message names the entry point and its distribution where they are known. During
    a request it is counted as ``feature_panic``: the plugin broke its contract or raised
    something that is not an audiogate error.
    """

    code = "plugin"
    reason = "feature_panic"


def install_hint(module: str, extra: str | None) -> str:
    """How to install ``module``: its extra (``pip install 'audiogate[codecs]'``), or the
    package itself where no extra brings it (``torch``)."""
    if extra is None:
        return f"pip install {module.partition('.')[0]}"
    return f"pip install 'audiogate[{extra}]'"


class MissingExtraError(AudioGateError):
    """An optional dependency is not installed; the message names the extra to install.

    Raised through :func:`audiogate.extras.require_module`, the one way audiogate imports
    an optional dependency. It is the installation's problem, not the input's: the server
    answers 500 (a clip in a format whose codecs are missing is a
    :class:`CodecsUnavailableError`, a 400).

    :param purpose: what needs the module (``"audiogate batch writes Parquet and"``).
    :param module: the module that could not be imported (``"pyarrow"``).
    :param extra: the extra that installs it (``"batch"``), or ``None`` where none does.
    :param hint: a sentence appended to the message (another way out, a licence note).
    """

    code = "missing_extra"
    reason = "feature_panic"

    def __init__(self, purpose: str, *, module: str, extra: str | None, hint: str = "") -> None:
        self.purpose = purpose
        self.module = module
        self.extra = extra
        self.hint = hint
        super().__init__(self._describe())

    def _describe(self) -> str:
        tail = f"; {self.hint}" if self.hint else ""
        return (
            f"{self.purpose} needs {self.module}, which is not installed: "
            f"{install_hint(self.module, self.extra)}{tail}"
        )


# --- per-request errors --------------------------------------------------------------


class AudioInputError(AudioGateError):
    """Base for errors in one clip of a request; ``clip_index`` is zero-based."""

    code = "audio_input"

    def __init__(self, message: str, *, clip_index: int | None = None) -> None:
        self.clip_index = clip_index
        super().__init__(message)


class DecodeError(AudioInputError):
    """The encoded audio of a clip is not acceptable.

    :param code: a stable machine-readable name of the rule that failed
        (``"not_riff_wave"``, ``"truncated_chunk_header"``, ``"unsupported_format"``, ...;
        every code is in ``audiogate.decode.DECODE_ERROR_CODES``).
    """

    code = "corrupt"

    def __init__(self, detail: str, *, clip_index: int, code: str = "corrupt") -> None:
        self.code = code
        self.detail = detail
        verb = _DECODE_VERBS.get(code, "is corrupt")
        super().__init__(
            f"audio clip {clip_number(clip_index)} {verb}: {detail}", clip_index=clip_index
        )


class EmptyAudioError(DecodeError):
    """A clip has no bytes or no sample frames."""

    code = "empty"

    def __init__(self, *, clip_index: int, detail: str = "") -> None:
        AudioInputError.__init__(
            self,
            f"audio clip {clip_number(clip_index)} is empty" + (f": {detail}" if detail else ""),
            clip_index=clip_index,
        )
        self.code = "empty"
        self.detail = detail or "empty"


class CodecsUnavailableError(MissingExtraError, DecodeError):
    """A clip's container (and codec) needs optional codecs that are not installed here:
    a :class:`DecodeError` of the clip (``codecs_unavailable``, 400) and a
    :class:`MissingExtraError` naming the extra."""

    code = "codecs_unavailable"
    reason = "waveform"

    def __init__(
        self, what: str, *, module: str, extra: str, clip_index: int, hint: str = ""
    ) -> None:
        self.purpose = f"decoding {what}"
        self.module = module
        self.extra = extra
        self.hint = hint
        self.code = "codecs_unavailable"
        self.detail = self._describe()
        AudioInputError.__init__(
            self,
            f"audio clip {clip_number(clip_index)} {_DECODE_VERBS[self.code]}: {self.detail}",
            clip_index=clip_index,
        )


class NonFiniteSampleError(DecodeError):
    """A float sample is NaN or infinite; ``frame`` is its zero-based frame index."""

    code = "non_finite"

    def __init__(self, *, clip_index: int, frame: int) -> None:
        AudioInputError.__init__(
            self,
            f"audio clip {clip_number(clip_index)} contains a non-finite sample at frame {frame}",
            clip_index=clip_index,
        )
        self.code = "non_finite"
        self.detail = f"non-finite sample at frame {frame}"
        self.frame = frame


class AcquisitionError(AudioInputError):
    """A source could not be turned into encoded bytes.

    :param origin: ``"inline base64"``, ``"data URI"``, ``"URL"``, ``"file"`` or ``"bytes"``.
    """

    code = "acquisition"

    def __init__(self, detail: str, *, clip_index: int | None, origin: str) -> None:
        self.origin = origin
        self.detail = detail
        where = (
            f"audio clip {clip_number(clip_index)}" if clip_index is not None else "audio request"
        )
        super().__init__(
            f"{where} ({origin}) could not be acquired: {detail}", clip_index=clip_index
        )


class LimitError(AudioGateError):
    """A budget was exceeded; the request is refused before the work is done.

    :param limit: the limit's name (``"encoded bytes per request"``).
    :param actual: the value the request would reach.
    :param maximum: the configured maximum.
    """

    code = "limit"
    reason = "waveform"
    #: What the message calls the bound (a store's quotas are "quota").
    _bound: ClassVar[str] = "limit"

    def __init__(
        self,
        limit: str,
        *,
        actual: int | float,
        maximum: int | float,
        clip_index: int | None = None,
    ) -> None:
        self.limit = limit
        self.actual = actual
        self.maximum = maximum
        self.clip_index = clip_index
        where = f" (clip {clip_number(clip_index)})" if clip_index is not None else ""
        subject = "" if limit in _NOT_AUDIO_LIMITS or self._bound != "limit" else "audio "
        unit, scale = _LIMIT_UNITS.get(limit, ("", 1))
        if unit and isinstance(actual, int | float) and isinstance(maximum, int | float):
            # A per-clip policy limit: say so, in its unit, with the allowed range.
            shown = (actual / scale, maximum / scale) if scale > 1 else (actual, maximum)
            message = (
                f"audio {limit} limit exceeded{where}: actual {shown[0]:g} {unit}, maximum "
                f"{shown[1]:g} {unit} (the model's audio policy allows at most "
                f"{shown[1]:g} {unit})"
            )
        else:
            message = (
                f"{subject}{limit} {self._bound} exceeded{where}: actual {actual}, "
                f"maximum {maximum}"
            )
        super().__init__(message)


class MemoryLimitError(LimitError):
    """A host-memory or queued-bytes budget of the bounded worker was exceeded."""

    code = "memory_limit"
    reason = "memory_limit"


class ContextLimitError(LimitError):
    """The expanded prompt is longer than the model's prefill capacity."""

    code = "context_limit"
    reason = "context_limit"


class SizeOverflowError(AudioGateError):
    """A size computation left the representable range (int64)."""

    code = "overflow"
    reason = "overflow"

    def __init__(self, context: str) -> None:
        self.context = context
        super().__init__(f"audio size calculation overflowed while computing {context}")


class PlaceholderError(AudioGateError):
    """Placeholders or sentinels in a prompt do not match the request's media."""

    code = "placeholder"
    reason = "waveform"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"audio placeholder mapping is invalid: {detail}")


class RequestError(AudioGateError):
    """A request that cannot be served as given, for a reason that is not its audio
    (:class:`AudioInputError`) nor its placeholders (:class:`PlaceholderError`): chat
    messages that are not valid, a chat request to a gate without a chat template.

    :param detail: what was wrong, with the value received.
    """

    code = "invalid_request"
    reason = "waveform"
    _what: ClassVar[str] = "invalid request"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{self._what}: {detail}")


class ChatRequestError(RequestError):
    """The chat messages are not a valid chat request (shape, roles, part types), or the
    chat template refused them."""

    code = "chat_request"
    _what = "invalid chat messages"


class StreamTimeoutError(RequestError):
    """A streamed clip (a chunked upload, a Realtime audio buffer) was cut: nothing
    arrived for the idle timeout, or it arrived slower than the minimum rate
    (:mod:`audiogate.streaming.deadlines`); what it held is released.

    :param detail: what was too slow, with the figures.
    :param kind: ``"idle"`` or ``"min_rate"``.
    """

    code = "stream_timeout"
    _what = "the audio stream timed out"

    def __init__(self, detail: str, *, kind: str = "idle") -> None:
        self.kind = kind
        super().__init__(detail)


class SourceStoreMissingError(RequestError):
    """A source-store operation (``add_source``, an upload) on a gate that has no store."""

    code = "no_source_store"
    _what = "no source store"

    def __init__(self, operation: str) -> None:
        self.operation = operation
        RequestError.__init__(
            self,
            f"{operation} needs a source store, and this gate has none (give AudioGate a "
            "store=, or start the server with `audiogate serve --store DIR`)",
        )


class SourceError(AudioInputError):
    """A stored source (``audio_ref``, ``[audio:<sha256>]``) cannot be used
    (docs/sources.md); the whole prompt is refused.

    :param sha256: the digest the caller gave.
    :param code: a stable machine-readable name (``"source_not_found"``, ...).
    """

    code = "source_error"
    _why: ClassVar[str] = "cannot be used"

    def __init__(self, sha256: str, *, clip_index: int | None = None, detail: str = "") -> None:
        self.sha256 = sha256
        self.detail = detail
        where = f"audio clip {clip_number(clip_index)}: " if clip_index is not None else ""
        tail = f" ({detail})" if detail else ""
        super().__init__(f"{where}audio source {sha256} {self._why}{tail}", clip_index=clip_index)


class SourceNotFoundError(SourceError):
    """No source with this digest is visible to the caller: it does not exist, or it is
    another owner's private source (the two are refused alike: no existence oracle)."""

    code = "source_not_found"
    _why = "is not in the source store or is not accessible to this caller"


class SourceRetiredError(SourceError):
    """The source was retired (its history is kept; new references are refused)."""

    code = "source_retired"
    _why = "was retired; upload it again to use it"


class SourceLostError(SourceError):
    """The source's stored bytes are gone or damaged (found by the store's recovery or
    by the digest check of a read); upload it again."""

    code = "source_lost"
    _why = "is lost: its stored bytes are missing or damaged; upload it again"


class SourceBusyError(SourceError):
    """The source was still processing when the prompt's bounded wait ran out, or it is
    leased by a request when a bounded retirement ran out."""

    code = "source_processing"
    _why = "is still processing"


class SourceQuotaError(LimitError):
    """A source store quota (bytes or sources per owner, total bytes) refuses an upload.

    ``limit`` is ``"source bytes per owner"``, ``"sources per owner"`` or
    ``"source store bytes"``.
    """

    code = "source_quota"
    _bound = "quota"


class FeatureError(AudioInputError):
    """A family frontend refused a clip (too short for one frame, ...)."""

    code = "feature"
    reason = "feature"

    def __init__(self, detail: str, *, clip_index: int | None = None) -> None:
        self.detail = detail
        where = f"audio clip {clip_number(clip_index)}" if clip_index is not None else "audio"
        super().__init__(f"{where} cannot be turned into features: {detail}", clip_index=clip_index)


class PreprocessCancelled(AudioGateError):
    """The request was cancelled; ``checkpoint`` names where it was noticed."""

    code = "cancelled"
    reason = "cancelled"

    def __init__(self, *, checkpoint: str, clip_index: int | None = None) -> None:
        self.checkpoint = checkpoint
        self.clip_index = clip_index
        clip = f"clip {clip_number(clip_index)}" if clip_index is not None else "the request"
        super().__init__(f"audio preprocessing cancelled during {checkpoint} for {clip}")


class QueueFullError(AudioGateError):
    """The bounded worker's job queue is full; retry later."""

    code = "queue_full"
    reason = "queue_full"


class WorkerUnavailableError(AudioGateError):
    """The bounded worker is shut down or its thread died (the reference server also
    answers it for a request still running when its graceful shutdown times out)."""

    code = "worker_unavailable"
    reason = "worker_unavailable"


def clear_frames(error: BaseException) -> None:
    """Clear the locals of the finished frames that ``error``'s tracebacks hold.

    Those frames hold the request (its clips, its job or task), and the job or task holds
    the error back: a reference cycle that would keep a refused or cancelled request's
    memory until the cyclic collector happens to run, far past the budgets. Follows
    ``__cause__`` and ``__context__``.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]
