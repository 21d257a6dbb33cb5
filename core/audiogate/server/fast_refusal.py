"""A strict reader of plain request heads, so that a request refused from its head (issue
#33) costs no h11 parsing.

Under overload most requests are refused from their heads, and h11's parsing of a head
was the largest part of a refusal's CPU. :func:`plain_head` reads a whole head that
arrived in one piece, on a connection between requests, when it is as plain as a load
generator's or an HTTP library's: ``POST /path HTTP/1.1``, one ``Host``, at most one
``Content-Length`` of digits, no ``Transfer-Encoding``, ``Expect`` or ``Upgrade``, field
lines of visible characters only, nothing after the body. Everything it accepts h11
accepts with the same method, target and (lower-case) headers; anything else, or a part
of a head, is ``None`` and h11 reads it as before. The connection protocol
(:mod:`audiogate.server.protocol`) asks :class:`~audiogate.server.admission.HeadAdmission`
about a plain head first: refused, it is answered from it (the same 429 bytes and
metrics as from h11's parse); admitted, h11 parses it as usual.

A flood repeats one head byte for byte: the heads read are kept by their bytes
(:data:`KEPT_HEADS`), and a head read before costs a lookup, not its parsing.
"""

from __future__ import annotations

import re
from typing import Final

import attrs
import h11

__all__ = ["KEPT_HEADS", "PlainHead", "plain_head"]

_END: Final = b"\r\n\r\n"
_REQUEST_LINE: Final = re.compile(rb"POST (/[\x21-\x7e]*) HTTP/1\.1")
# A subset of h11's field line (its values also take control characters, which a plain
# head never has): a token, a colon, optional blanks, visible characters and blanks.
_FIELD: Final = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9A-Za-z]+):[ \t]*"
    rb"((?:[\x21-\x7e\x80-\xff]+(?:[ \t]+[\x21-\x7e\x80-\xff]+)*)?)[ \t]*"
)
_DIGITS: Final = re.compile(rb"[0-9]{1,18}")
#: Fields whose presence makes a head unusual here (h11 reads it).
_UNUSUAL: Final = frozenset({b"transfer-encoding", b"expect", b"upgrade"})
#: Distinct plain heads kept by their bytes (all forgotten when full: a client varying its
#: heads costs their parsing, as without the cache, and at most this many heads' memory).
KEPT_HEADS: Final = 256
_kept: dict[bytes, PlainHead] = {}


@attrs.frozen
class PlainHead:
    """A whole plain ``POST`` head (HTTP/1.1), as h11 would have parsed it.

    :ivar target: the request target (path and query), as sent.
    :ivar headers: the field lines in order, names lower-case, values stripped (shared by
        every read of the same head: read only).
    :ivar length: ``Content-Length`` in bytes, ``None`` when absent.
    :ivar closes: whether ``Connection`` names ``close``.
    :ivar size: bytes of the head, its blank line included (its body starts there).
    """

    target: bytes
    headers: list[tuple[bytes, bytes]]
    length: int | None
    closes: bool
    size: int

    def drained(self, limit: int) -> int | None:
        """The body length to skip to keep the connection after refusing the request:
        its ``Content-Length`` when at most ``limit`` bytes and the connection is kept
        alive, else ``None`` (the connection closes), as for a head h11 parsed."""
        if self.closes or self.length is None or self.length > limit:
            return None
        return self.length


def plain_head(data: bytes, conn: h11.Connection, max_size: int) -> PlainHead | None:
    """The plain head ``data`` starts with, when ``conn`` waits for a new request with
    nothing buffered and ``data`` holds the whole head (at most ``max_size`` bytes) and
    at most its declared body after it; else ``None`` (h11 reads ``data``)."""
    if not data.startswith(b"POST /"):
        return None
    if conn.their_state is not h11.IDLE or conn.our_state is not h11.IDLE:
        return None
    end = data.find(_END, 0, max_size)
    if end < 0 or conn.trailing_data[0]:
        return None
    size = end + len(_END)
    raw = data[:size]
    head = _kept.get(raw)
    if head is None:
        head = _parse(raw, end)
        if head is None:
            return None
        if len(_kept) >= KEPT_HEADS:
            _kept.clear()
        _kept[raw] = head
    if len(data) - size > (head.length or 0):  # pipelined: h11 reads it
        return None
    return head


def _parse(data: bytes, end: int) -> PlainHead | None:
    """The plain head of ``data``, whose blank line starts at ``end``; else ``None``."""
    lines = data[:end].split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        return None
    headers: list[tuple[bytes, bytes]] = []
    length = None
    hosts = 0
    closes = False
    for raw in lines[1:]:
        field = _FIELD.fullmatch(raw)
        if field is None:  # obs-fold, a bare CR or LF, control characters, no colon
            return None
        name = field[1].lower()
        value = field[2]
        if name == b"content-length":
            if length is not None or _DIGITS.fullmatch(value) is None:
                return None
            length = int(value)
        elif name == b"host":
            hosts += 1
        elif name == b"connection":
            closes = closes or b"close" in value.lower()
        elif name in _UNUSUAL:
            return None
        headers.append((name, value))
    if hosts != 1:
        return None
    return PlainHead(line[1], headers, length, closes, end + len(_END))
