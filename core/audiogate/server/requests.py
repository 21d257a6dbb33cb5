"""Request parsing: a prepare request's body (strict UTF-8 JSON) to a :class:`PrepareCall`,
and the lane that large bodies are read, parsed and prepared in."""

from __future__ import annotations

import asyncio
import math
import re
import secrets
import time
from types import TracebackType
from typing import Any, Final

import attrs
import numpy as np

from audiogate.errors import QueueFullError
from audiogate.jsonkeys import DuplicateKeyError, loads_unique_keys
from audiogate.server.encoding import FEATURE_FORMATS, FeatureFormat, safetensors_available
from audiogate.server.errors import BadRequestError

__all__ = [
    "LARGE_BODY_BYTES",
    "SERVER_SWITCH_INTERVAL_S",
    "LaneTicket",
    "LargeBodyLane",
    "PrepareCall",
    "parse_body",
    "parse_call",
]

_OPTION_KEYS: Final = frozenset({"feature_format", "return_features"})
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")

#: The interpreter's switch interval in ``audiogate serve`` (CPython's default: 5 ms). A
#: thread in pure Python (a large body's container walk, a feature computation) gives
#: the GIL up after this long to another that waits for it; at 5 ms, the event loop
#: waited up to that long each time it woke beside a large body's work, several times
#: per small request (docs/performance.md, "Hostile uploads").
SERVER_SWITCH_INTERVAL_S: Final = 0.001

#: A body of this many bytes or more (declared, or read) takes a place in the
#: :class:`LargeBodyLane` before it is read on, parsed and prepared.
LARGE_BODY_BYTES: Final = 1 << 20


class LargeBodyLane:
    """While small requests are being served, at most ``width`` requests with a large body
    (:data:`LARGE_BODY_BYTES` or more) are read, parsed and prepared at a time; the others
    wait for a place, unread, for up to ``wait_s`` (``None``: as long as it takes), then
    are refused (429, ``queue_full``).

    Why: the work of a large body is CPU work in this process that holds the GIL for long
    stretches (reading it chunk by chunk on the loop, one ``json`` scan of its base64
    string, the base64 decode, a container walk before a refusal). Six clients looping
    16 MB bodies kept four threads contending for the GIL and moved a small request's
    p99 to 16 times its unloaded value; in the lane, large bodies take at most ``width``
    threads' worth of it, whatever their number, and the rest of the server keeps
    serving small requests (``benchmarks/bench_hostile_uploads.py``, docs/performance.md).
    Bodies of unknown length (chunked) take their place once read, when they turn out
    large.

    The limit holds only while small requests are in progress or one left less than
    ``recent_s`` ago: with large bodies alone (a vLLM render client's 1.28 MB requests),
    there is nothing to protect, and each takes a place at once, so they use every worker
    thread. Once a small request comes, large ones that arrive wait until fewer than
    ``width`` are in progress.

    While small requests are in progress, a place is given back ``pause_ratio`` times the
    time it was held after its request left it (at most ``max_pause_s``): back to back,
    large bodies would still hold the GIL half of the time beside a small request;
    paced, they hold it at most ``1 / (1 + pause_ratio)`` of a thread's time. Alone, they
    are not paced.
    """

    def __init__(
        self,
        width: int,
        *,
        wait_s: float | None,
        pause_ratio: float = 3.0,
        max_pause_s: float = 1.0,
        recent_s: float = 1.0,
    ) -> None:
        if width < 1:
            raise ValueError(f"width must be at least 1, not {width}")
        self.width = width
        self.wait_s = wait_s
        self.pause_ratio = pause_ratio
        self.max_pause_s = max_pause_s
        self.recent_s = recent_s
        #: Tickets open, tickets waiting for a place, tickets holding one, and places
        #: taken (held, or in their pause after their request left).
        self._open = self._waiting = self._held = self._taken = 0
        #: When the last small request left (event-loop time).
        self._small_left = -math.inf
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def small_in_progress(self) -> int:
        """Open tickets that neither hold nor wait for a place (small requests, and
        large ones on their way to :meth:`LaneTicket.admit`)."""
        return self._open - self._waiting - self._held

    @property
    def free(self) -> int:
        """Places free under the limit (negative: more taken than ``width``, admitted
        while no small request was around)."""
        return self.width - self._taken

    def _quiet_in(self, now: float) -> float:
        """Seconds until the limit lapses (0: it does now; ``inf``: a small request is
        in progress)."""
        if self.small_in_progress > 0:
            return math.inf
        return max(0.0, self._small_left + self.recent_s - now)

    def _may_take(self, now: float) -> bool:
        return self._taken < self.width or self._quiet_in(now) == 0.0

    def _wake(self) -> None:
        # Every waiter checks again, in the order they came (asyncio resumes them in
        # the order their futures are done): the first that may take a place takes it.
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def _release(self) -> None:
        self._taken -= 1
        self._wake()

    def _give_back(self, held_s: float) -> None:
        self._held -= 1
        pause_s = min(held_s * self.pause_ratio, self.max_pause_s)
        if self.small_in_progress > 1 and pause_s > 0:  # the leaving ticket is open
            asyncio.get_running_loop().call_later(pause_s, self._release)
        else:
            self._release()

    def _small_leaves(self) -> None:
        self._small_left = asyncio.get_running_loop().time()
        if self.small_in_progress == 1:  # the last one (the leaving ticket is open)
            self._wake()  # the waiters time the limit's lapse from now

    async def _take(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = math.inf if self.wait_s is None else loop.time() + self.wait_s
        while not self._may_take(now := loop.time()):
            if now >= deadline:
                raise QueueFullError(
                    f"{self.width} large request bodies ({LARGE_BODY_BYTES} bytes or more) "
                    f"are being processed and this one waited {self.wait_s:g} s for its "
                    f"turn; retry later"
                )
            waiter = loop.create_future()
            self._waiters.append(waiter)
            wait_s = min(deadline - now, self._quiet_in(now))
            # Woken by a place given back, or when the wait ends or the limit lapses.
            handle = None if math.isinf(wait_s) else loop.call_later(wait_s, self._wake)
            try:
                await waiter
            finally:
                if handle is not None:
                    handle.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self._taken += 1

    def ticket(self) -> LaneTicket:
        """One request's claim (an async context manager that gives back its place)."""
        return LaneTicket(self)


class LaneTicket:
    """A request's place in a :class:`LargeBodyLane`, taken by :meth:`admit` once the body
    is known to be large, and given back on leaving the ``async with`` block."""

    def __init__(self, lane: LargeBodyLane) -> None:
        self._lane = lane
        self.held = False
        #: Its body is large (whether it got a place or not): its leaving is no small
        #: request's.
        self.large = False
        self._since = 0.0

    async def admit(self, nbytes: int | None) -> None:
        """Take a place if ``nbytes`` (declared or read; ``None``: unknown) is large.

        :raises QueueFullError: no place within the lane's ``wait_s``.
        """
        if self.held or nbytes is None or nbytes < LARGE_BODY_BYTES:
            return
        lane = self._lane
        self.large = True
        lane._waiting += 1
        try:
            await lane._take()
        finally:
            lane._waiting -= 1
        lane._held += 1
        self.held = True
        self._since = time.monotonic()

    async def __aenter__(self) -> LaneTicket:
        self._lane._open += 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.held:
            self.held = False
            self._lane._give_back(time.monotonic() - self._since)
        elif not self.large:
            self._lane._small_leaves()
        self._lane._open -= 1


@attrs.frozen(kw_only=True)
class PrepareCall:
    """What a prepare request asks for: its chat messages and the answer's options."""

    model: str | None
    messages: list[Any]
    feature_format: FeatureFormat
    return_features: bool


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_body(body: bytes | bytearray) -> Any:
    """The JSON document of a request body, which must be UTF-8 (a leading BOM is dropped).

    Decoded strictly first: ``json.loads`` on bytes would also take UTF-16 and UTF-32 and
    let encoded surrogates through ("surrogatepass"). A key given twice in one object is
    refused: parsers disagree on which one counts (Python's takes the last, some proxies
    and validators the first), so a request that a filter in front of the server read
    one way must not be served another way.

    Long plain string values (base64 uploads) are cut out before ``json`` scans the body
    and put back after (:func:`_cut_long_strings`): the same document, without holding
    the GIL for one scan of the whole upload.
    """
    cut, values = _cut_long_strings(body)
    document: Any = None
    if values:
        try:
            document = _put_back(_loads(cut), values)
        except (BadRequestError, _NotPutBack):
            document = None  # parsed whole below: its refusal names the body's own bytes
    if document is None:
        document = _loads(body)
    # JSON admits a lone "\udXXX" escape; Python keeps it, tokenizers fail on it. The walk
    # only runs when the (UTF-8) body has such an escape at all (a valid pair is fine).
    # A body without any backslash (a base64 upload) is passed at memchr speed: the regex
    # held the GIL for 30 to 70 ms on a 16 MB body, as did ``b"\\u" in body``.
    if body.find(b"\\") != -1 and _SURROGATE_ESCAPE.search(body) and _lone_surrogate(document):
        raise BadRequestError("the request contains a lone UTF-16 surrogate (invalid Unicode)")
    return document


def _loads(body: bytes | bytearray) -> Any:
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadRequestError(
            f"the request body is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        return loads_unique_keys(text)
    except RecursionError:
        raise BadRequestError("the request body is nested too deeply") from None
    except DuplicateKeyError as exc:
        raise BadRequestError(
            f"the request body gives the key {exc.shown} twice in one JSON object"
        ) from None
    except ValueError as exc:
        raise BadRequestError(f"the request body is not valid JSON: {exc}") from None


#: A JSON string value of this many bytes or more, ASCII without a backslash or a control
#: character (base64, a data URI), is cut out of the body before ``json`` scans it.
LONG_STRING_BYTES: Final = 64 * 1024
#: Quotes looked at in search of long strings; a body with more is parsed as it is.
_MAX_QUOTES: Final = 4096
_WHITESPACE: Final = b" \t\r\n"


class _NotPutBack(Exception):
    """A cut value's marker was not found once in the parsed document."""


def _cut_long_strings(body: bytes | bytearray) -> tuple[bytes | bytearray, dict[str, str]]:
    """``body`` with each long plain string value replaced by a short marker string, and
    the markers' values; ``(body, {})`` when there is none.

    Strings are found as ``json`` lexes them (each unescaped quote opens or closes one),
    with ``bytes.find`` (memchr speed) and at most :data:`_MAX_QUOTES` quotes; object
    keys are left alone. A cut value must be what ``json`` would have accepted: ASCII
    without control characters (checked by numpy, which releases the GIL) and without
    escapes, so its JSON text is its value. The markers hold a random nonce, so no
    string of the request can equal one.
    """
    if len(body) < LONG_STRING_BYTES:
        return body, {}
    spans: list[tuple[int, int]] = []
    pos = quotes = 0
    while (start := body.find(b'"', pos)) != -1:
        end = start
        while True:
            end = body.find(b'"', end + 1)
            quotes += 1
            if end == -1 or quotes > _MAX_QUOTES:
                return body, {}  # unterminated (json says where), or too many to look at
            backslashes = 0
            while body[end - 1 - backslashes] == 0x5C:
                backslashes += 1
                if backslashes > _MAX_QUOTES:
                    return body, {}
            if backslashes % 2 == 0:
                break
        pos = end + 1
        if end - start - 1 >= LONG_STRING_BYTES and body.find(b"\\", start, end) == -1:
            after = pos
            while after < len(body) and body[after] in _WHITESPACE:
                after += 1
            if after < len(body) and body[after] == 0x3A:  # ':': a key
                continue
            spans.append((start + 1, end))
    if not spans:
        return body, {}
    view = memoryview(body)
    nonce = secrets.token_hex(12)
    pieces: list[bytes | memoryview] = []
    values: dict[str, str] = {}
    last = 0
    for index, (first, stop) in enumerate(spans):
        raw = view[first:stop]
        if int(np.frombuffer(raw, dtype=np.uint8).min()) < 0x20:
            continue  # a control character: json refuses it, with its position
        try:
            value = str(raw, "ascii")
        except UnicodeDecodeError:
            continue
        marker = f"audiogate-cut-{nonce}-{index}"
        values[marker] = value
        pieces += (view[last:first], marker.encode())
        last = stop
    pieces.append(view[last:])
    return (b"".join(pieces), values) if values else (body, {})


def _put_back(document: Any, values: dict[str, str]) -> Any:
    """``document`` with each marker string replaced by its value (in place).

    :raises _NotPutBack: a marker is not found exactly once as a value.
    """
    left = dict(values)
    stack = [document]
    while stack:
        item = stack.pop()
        slots = item.items() if isinstance(item, dict) else enumerate(item)
        for key, value in slots:
            if isinstance(value, str):
                if value in left:
                    item[key] = left.pop(value)
            elif isinstance(value, dict | list):
                stack.append(value)
    if left:
        raise _NotPutBack(sorted(left))
    return document


def parse_call(document: Any) -> PrepareCall:
    if not isinstance(document, dict):
        raise BadRequestError(
            f"the request body must be a JSON object (an OpenAI chat completions request), "
            f"got {type(document).__name__}"
        )
    model = document.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequestError(
            f"'model' must be a string, got {type(model).__name__}", field="model"
        )
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' must be a non-empty list", field="messages")
    options = document.get("audiogate", {})
    if not isinstance(options, dict):
        raise BadRequestError(
            f"'audiogate' must be an object, got {type(options).__name__}", field="audiogate"
        )
    unknown = sorted(set(options) - _OPTION_KEYS)
    if unknown:
        raise BadRequestError(
            f"unknown 'audiogate' option(s) {unknown}; allowed: {sorted(_OPTION_KEYS)}",
            field="audiogate",
        )
    feature_format = options.get("feature_format", "npy")
    if feature_format not in FEATURE_FORMATS:
        raise BadRequestError(
            f"'audiogate.feature_format' must be one of {list(FEATURE_FORMATS)}, "
            f"got {feature_format!r}",
            field="audiogate.feature_format",
        )
    if feature_format == "safetensors" and not safetensors_available():
        raise BadRequestError(
            "'audiogate.feature_format' 'safetensors' needs the safetensors package on the "
            "server (pip install safetensors); use 'npy'",
            field="audiogate.feature_format",
        )
    return_features = options.get("return_features", True)
    if not isinstance(return_features, bool):
        raise BadRequestError(
            f"'audiogate.return_features' must be true or false, got {return_features!r}",
            field="audiogate.return_features",
        )
    return PrepareCall(
        model=model,
        messages=messages,
        feature_format=feature_format,
        return_features=return_features,
    )
