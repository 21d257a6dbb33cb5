"""The strict reader of plain request heads (issue #33): what it reads, h11 reads the same
(method, target, lower-case headers, where the body starts); anything unusual, a part of
a head, or a request pipelined after the body is left to h11."""

from __future__ import annotations

import random

import h11
import pytest

from audiogate.server.fast_refusal import PlainHead, plain_head

MAX = 16 * 1024
PREPARE = b"/v1/audio/prepare"
PLAIN = (
    b"POST /v1/audio/prepare HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 5\r\n\r\n"
)


def _idle() -> h11.Connection:
    return h11.Connection(h11.SERVER, MAX)


def _h11(data: bytes) -> tuple[h11.Request, int] | None:
    """h11's request for ``data`` and the bytes of its head, or ``None`` if it refuses
    it or needs more."""
    conn = _idle()
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(event, h11.Request):
        return None
    return event, len(data) - len(conn.trailing_data[0])


def _same_as_h11(data: bytes, head: PlainHead) -> None:
    parsed = _h11(data)
    assert parsed is not None, data
    request, size = parsed
    assert (request.method, request.http_version) == (b"POST", b"1.1")
    assert request.target == head.target
    assert list(request.headers) == head.headers
    assert size == head.size
    lengths = [int(v) for n, v in request.headers if n == b"content-length"]
    assert head.length == (lengths[0] if lengths else None)


@pytest.mark.parametrize(
    "data",
    [
        PLAIN,
        PLAIN + b"{}",
        PLAIN + b'{"a":',  # the whole body after the head, or part of it
        PLAIN.replace(b"Length: 5", b"Length:5  "),
        PLAIN.replace(b"Host: x", b"hOsT: \t x \t"),
        PLAIN.replace(b"prepare", b"prepare?x=1&y=%20"),
        PLAIN.replace(b"Host: x\r\n", b"Host: x\r\nAuthorization: Bearer  t0k \r\nX-Empty:\r\n"),
        PLAIN.replace(b"Host: x\r\n", b"Host: x\r\nX-Forwarded-For: 10.0.0.1, 10.0.0.2\r\n"),
        PLAIN.replace(b"Host: x\r\n", b"Host: x\r\nConnection: keep-alive, Close\r\n"),
        PLAIN.replace(b"Host: x\r\n", b"Host: x\r\nX-Obs: caf\xe9\r\n"),
        b"POST / HTTP/1.1\r\nHost: x\r\n\r\n",  # no body, no length
    ],
)
def test_a_plain_head_reads_as_h11_reads_it(data: bytes) -> None:
    head = plain_head(data, _idle(), MAX)
    assert head is not None
    _same_as_h11(data, head)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("GET", PLAIN.replace(b"POST", b"GET")),
        ("lower-case method", PLAIN.replace(b"POST", b"post")),
        ("HTTP/1.0", PLAIN.replace(b"HTTP/1.1", b"HTTP/1.0")),
        ("absolute target", PLAIN.replace(b"/v1", b"http://x/v1")),
        ("leading blank line", b"\r\n" + PLAIN),
        ("part of a head", PLAIN[:-2]),
        ("obs-fold", PLAIN.replace(b"Host: x\r\n", b"Host: x\r\nX-A: a\r\n b\r\n")),
        ("chunked", PLAIN.replace(b"Content-Length: 5", b"Transfer-Encoding: chunked")),
        ("both lengths", PLAIN.replace(b"Host: x", b"Host: x\r\nTransfer-Encoding: chunked")),
        ("two lengths", PLAIN.replace(b"Host: x", b"Host: x\r\nContent-Length: 5")),
        ("a list of lengths", PLAIN.replace(b"Length: 5", b"Length: 5, 5")),
        ("a signed length", PLAIN.replace(b"Length: 5", b"Length: +5")),
        ("a huge length", PLAIN.replace(b"Length: 5", b"Length: " + b"9" * 19)),
        ("no host", PLAIN.replace(b"Host: x\r\n", b"")),
        ("two hosts", PLAIN.replace(b"Host: x", b"Host: x\r\nHost: y")),
        ("expect", PLAIN.replace(b"Host: x", b"Host: x\r\nExpect: 100-continue")),
        ("upgrade", PLAIN.replace(b"Host: x", b"Host: x\r\nUpgrade: websocket")),
        ("a bare LF", PLAIN.replace(b"Host: x\r\n", b"Host: x\nX-A: b\r\n")),
        ("a control character", PLAIN.replace(b"Host: x", b"Host: x\x01")),
        ("a space before the colon", PLAIN.replace(b"Host:", b"Host :")),
        ("no colon", PLAIN.replace(b"Host: x", b"Host x")),
        ("pipelined", PLAIN + b"{}{}}" + b"POST / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("pipelined after no body", b"POST / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n"),
        ("too long", PLAIN.replace(b"Host: x", b"Host: x\r\nX-Pad: " + b"p" * MAX)),
    ],
)
def test_an_unusual_head_is_left_to_h11(name: str, data: bytes) -> None:
    assert plain_head(data, _idle(), MAX) is None, name


def test_a_head_is_read_only_on_a_connection_between_requests() -> None:
    # Part of a head already buffered: the rest is h11's.
    conn = _idle()
    conn.receive_data(b"POST /x")
    assert conn.next_event() is h11.NEED_DATA
    assert plain_head(PLAIN, conn, MAX) is None
    # Mid-request (a body being read): the bytes are the body's, whatever they look like.
    conn = _idle()
    conn.receive_data(PLAIN.replace(b"Length: 5", b"Length: 500"))
    assert isinstance(conn.next_event(), h11.Request)
    assert plain_head(PLAIN, conn, MAX) is None


@pytest.mark.parametrize(
    ("extra", "length", "limit", "drained"),
    [
        (b"", 5, 5, 5),
        (b"", 6, 5, None),  # past the drain bound: the connection closes
        (b"Connection: close\r\n", 5, 5, None),
        (b"Connection: Keep-Alive\r\n", 0, 5, 0),
    ],
)
def test_the_body_skipped_after_a_refusal(
    extra: bytes, length: int, limit: int, drained: int | None
) -> None:
    data = PLAIN.replace(b"Length: 5\r\n", b"Length: %d\r\n%s" % (length, extra))
    head = plain_head(data, _idle(), MAX)
    assert head is not None
    assert head.drained(limit) == drained
    no_length = plain_head(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n", _idle(), MAX)
    assert no_length is not None
    assert no_length.drained(limit) is None


_BYTES = [b" ", b"\t", b"\r", b"\n", b"\r\n", b":", b",", b"\x00", b"\x7f", b"\xff", b"a", b"5"]


def test_whatever_is_read_as_plain_h11_reads_the_same() -> None:
    """Mutated heads (bytes inserted, deleted, lines doubled): each one read as plain is
    read the same by h11, and most are left to h11."""
    rng = random.Random(33)
    bases = [
        PLAIN + b"{}{}}",
        PLAIN.replace(
            b"Host: x\r\n", b"Host: x\r\nAuthorization: Bearer t\r\nConnection: close\r\n"
        ),
    ]
    plain = 0
    for _ in range(3000):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            move = rng.random()
            if move < 0.5:
                data[at:at] = rng.choice(_BYTES)
            elif move < 0.8:
                del data[at]
            else:
                start = data.rfind(b"\r\n", 0, at) + 2
                end = data.find(b"\r\n", at)
                if start >= 2 and end > start:
                    data[end:end] = data[start - 2 : end]
        head = plain_head(bytes(data), _idle(), MAX)
        if head is not None:
            plain += 1
            _same_as_h11(bytes(data), head)
    assert 0 < plain < 3000
