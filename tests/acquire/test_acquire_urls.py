"""Tricky URL spellings: each is refused, or pinned to exactly where the connection goes.

The table is run three ways: through the strict parser and resolver (what address is
pinned), through a real fetch against the loopback server with private addresses allowed
(the server must see the request, with the ``Host`` header we validated), and with the
escape hatch off (every spelling that reaches loopback is refused, naming the host, the
address and the environment variable). For the numeric spellings we refuse, a last test
shows where the operating system's resolver would really have gone.
"""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass
from ipaddress import ip_address

import pytest
from acquire_helpers import LoopbackServer, audio_url, net_policy, respond, static_resolver, wav

from audiogate.acquire import PRIVATE_MEDIA_URLS_ENV, acquire_parts
from audiogate.acquire.context import SourceRefused
from audiogate.acquire.net import resolve_checked
from audiogate.acquire.urls import parse_media_url
from audiogate.errors import AcquisitionError

PORT = 8765  # the table's port; the fetch tests substitute the live server's


@dataclass(frozen=True)
class Pin:
    """Accepted: connects to ``address`` sending ``Host: host`` and target ``target``."""

    address: str
    host: str
    target: str = "/a.wav"
    dial: bool = True  # the loopback server can be reached there (IPv4)


@dataclass(frozen=True)
class Refuse:
    """Refused before any connection, whatever the private-address switch says."""

    needle: str


NUMERIC = "non-canonical numeric IPv4"
RESOLVER = static_resolver({"media.test": ["127.0.0.1"], "evil.test": ["127.0.0.1"]})

TABLE: list[tuple[str, Pin | Refuse]] = [
    # Canonical forms and normalization.
    ("http://127.0.0.1:{p}/a.wav", Pin("127.0.0.1", "127.0.0.1:{p}")),
    ("hTtP://127.0.0.1:{p}/a.wav", Pin("127.0.0.1", "127.0.0.1:{p}")),
    ("http://127.0.0.1.:{p}/a.wav", Pin("127.0.0.1", "127.0.0.1:{p}")),
    ("http://MEDIA.Test:{p}/a.wav", Pin("127.0.0.1", "media.test:{p}")),
    ("http://media.test.:{p}/a.wav", Pin("127.0.0.1", "media.test:{p}")),
    ("http://media.test:{p}/a.wav?x=1#frag", Pin("127.0.0.1", "media.test:{p}", "/a.wav?x=1")),
    ("http://evil.test#@media.test:{p}/", Pin("127.0.0.1", "evil.test", "/", dial=False)),
    ("http://media.test:{p}?@evil.test/", Pin("127.0.0.1", "media.test:{p}", "/?@evil.test/")),
    ("http://media.test:{p}#@evil.test/", Pin("127.0.0.1", "media.test:{p}", "/")),
    # IPv6 literals; mapped forms are judged and dialled as the IPv4 address they map.
    ("http://[::ffff:127.0.0.1]:{p}/a.wav", Pin("127.0.0.1", "[::ffff:7f00:1]:{p}")),
    ("http://[::FFFF:7F00:1]:{p}/a.wav", Pin("127.0.0.1", "[::ffff:7f00:1]:{p}")),
    ("http://[0:0:0:0:0:ffff:7f00:1]:{p}/a.wav", Pin("127.0.0.1", "[::ffff:7f00:1]:{p}")),
    ("http://[::1]:{p}/a.wav", Pin("::1", "[::1]:{p}", dial=False)),
    ("http://[0::1]:{p}/a.wav", Pin("::1", "[::1]:{p}", dial=False)),
    ("http://[::127.0.0.1]:{p}/a.wav", Pin("::7f00:1", "[::7f00:1]:{p}", dial=False)),
    ("http://[64:ff9b::a9fe:a9fe]/", Pin("64:ff9b::a9fe:a9fe", "[64:ff9b::a9fe:a9fe]", "/", False)),
    ("http://[fe80::1%25eth0]:{p}/", Refuse("percent-encoding is not allowed in the host")),
    ("http://[::1:{p}/", Refuse("malformed IPv6 literal")),
    ("http://[::1]x/", Refuse("malformed authority")),
    ("http://[127.0.0.1]/", Refuse("malformed IPv6 literal")),
    # Numeric IPv4 spellings that inet_aton would read as loopback (or 0.0.0.0).
    ("http://2130706433:{p}/", Refuse(NUMERIC)),
    ("http://0x7f000001:{p}/", Refuse(NUMERIC)),
    ("http://0X7F000001:{p}/", Refuse(NUMERIC)),
    ("http://017700000001:{p}/", Refuse(NUMERIC)),
    ("http://0177.0.0.1:{p}/", Refuse(NUMERIC)),
    ("http://0x7f.0.0.1:{p}/", Refuse(NUMERIC)),
    ("http://0x7f.1:{p}/", Refuse(NUMERIC)),
    ("http://127.1:{p}/", Refuse(NUMERIC)),
    ("http://127.0.1:{p}/", Refuse(NUMERIC)),
    ("http://127.000.000.001:{p}/", Refuse(NUMERIC)),
    ("http://127.0.0.01:{p}/", Refuse(NUMERIC)),
    ("http://0:{p}/", Refuse(NUMERIC)),
    ("http://1.2.3.4.5/", Refuse(NUMERIC)),
    ("http://256.0.0.1/", Refuse(NUMERIC)),
    ("http://media.0x10/", Refuse(NUMERIC)),
    ("http://media.99/", Refuse(NUMERIC)),
    # Userinfo, backslashes, percent-encoding, whitespace, non-ASCII.
    ("http://user:pw@127.0.0.1:{p}/", Refuse("credentials")),
    ("http://@127.0.0.1:{p}/", Refuse("credentials")),
    ("http://media.test:{p}@127.0.0.1:{p}/", Refuse("credentials")),
    ("http://127.0.0.1:{p}\\@media.test/", Refuse("backslashes")),
    ("http://media.test\\@127.0.0.1:{p}/", Refuse("backslashes")),
    ("http:\\\\127.0.0.1/", Refuse("backslashes")),
    ("http://127.0.0.1:{p}/a\\b", Refuse("backslashes")),
    ("http://127.0.0.%31:{p}/", Refuse("percent-encoding is not allowed in the host")),
    ("http://media%2etest:{p}/", Refuse("percent-encoding is not allowed in the host")),
    ("http://media.test :{p}/", Refuse("character ' '")),
    ("http://media.test:{p}/a b", Refuse("character ' '")),
    ("http://media.test:{p}/a\tb", Refuse("character '\\t'")),
    ("http://münchen.test/", Refuse("character 'ü'")),
    ("http://a_b.test/", Refuse("not a valid DNS name")),
    ("http://-a.test/", Refuse("not a valid DNS name")),
    ("http://a..test/", Refuse("not a valid DNS name")),
    ("http://media.test../", Refuse("not a valid DNS name")),
    ("http://" + "a" * 64 + ".test/", Refuse("not a valid DNS name")),
    # Shapes, schemes and ports.
    ("http:/127.0.0.1/", Refuse("expected scheme://host")),
    ("http:127.0.0.1", Refuse("expected scheme://host")),
    ("http:///a.wav", Refuse("no host")),
    ("http://:{p}/", Refuse("no host")),
    ("http://./", Refuse("no host")),
    ("ftp://127.0.0.1/", Refuse("scheme 'ftp' is not http or https")),
    ("javascript://127.0.0.1/", Refuse("scheme 'javascript'")),
    ("http://127.0.0.1:+80/", Refuse("port '+80'")),
    ("http://127.0.0.1:080/", Refuse("port '080'")),
    ("http://127.0.0.1:0/", Refuse("port '0'")),
    ("http://127.0.0.1:65536/", Refuse("port '65536'")),
    ("http://127.0.0.1:/", Refuse("port ''")),
    ("http://127.0.0.1:80:80/", Refuse("port '80:80'")),
    ("http://[::1]:99999/", Refuse("port '99999'")),
]


def spelled(text: str, port: int) -> str:
    return text.replace("{p}", str(port))


async def pinned(url_text: str, *, allow_private: bool = True) -> list[str]:
    url = parse_media_url(url_text)
    policy = net_policy(resolver=RESOLVER, allow_private_addresses=allow_private)
    return [str(a) for a in await resolve_checked(url, policy)]


@pytest.mark.parametrize(("text", "outcome"), TABLE, ids=[t for t, _ in TABLE])
def test_each_spelling_is_refused_or_pinned(text, outcome):
    url_text = spelled(text, PORT)
    if isinstance(outcome, Refuse):
        with pytest.raises(SourceRefused, match=_escape(outcome.needle)):
            asyncio.run(pinned(url_text))
        return
    url = parse_media_url(url_text)
    assert url.authority == spelled(outcome.host, PORT)
    assert url.target == outcome.target
    assert asyncio.run(pinned(url_text)) == [str(ip_address(outcome.address))]


DIALLED = [(t, o) for t, o in TABLE if isinstance(o, Pin) and o.dial]


@pytest.mark.parametrize(("text", "outcome"), DIALLED, ids=[t for t, _ in DIALLED])
def test_accepted_spellings_reach_exactly_the_pinned_address(text, outcome):
    data = wav()

    async def scenario() -> None:
        async with LoopbackServer() as server:
            for path in ("/a.wav", "/"):
                server.route(path, respond(data))
            clips = await acquire_parts(
                [audio_url(spelled(text, server.port))], policy=net_policy(resolver=RESOLVER)
            )
            assert clips[0].data == data
            (exchange,) = server.exchanges
            assert exchange.headers["host"] == spelled(outcome.host, server.port)
            assert exchange.target == outcome.target
            assert exchange.peer[0] == outcome.address

    asyncio.run(scenario())


PRIVATE = [(t, o) for t, o in TABLE if isinstance(o, Pin)]


@pytest.mark.parametrize(("text", "outcome"), PRIVATE, ids=[t for t, _ in PRIVATE])
def test_with_the_escape_hatch_off_every_private_spelling_is_refused(text, outcome):
    async def scenario() -> None:
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(wav()))
            policy = net_policy(resolver=RESOLVER, allow_private_addresses=False)
            with pytest.raises(AcquisitionError) as caught:
                await acquire_parts([audio_url(spelled(text, server.port))], policy=policy)
            message = str(caught.value)
            url = parse_media_url(spelled(text, server.port))
            assert repr(url.host) in message
            assert str(ip_address(outcome.address)) in message
            assert PRIVATE_MEDIA_URLS_ENV in message
            assert (caught.value.clip_index, caught.value.origin) == (0, "URL")
            assert server.exchanges == []

    asyncio.run(scenario())


def test_localhost_goes_through_the_system_resolver_and_is_refused_by_default():
    try:
        answers = {ai[4][0] for ai in socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)}
    except OSError:
        pytest.skip("this machine cannot resolve localhost")
    if "127.0.0.1" not in answers:
        pytest.skip("localhost does not resolve to 127.0.0.1 here")

    async def scenario() -> None:
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(wav()))
            url = f"HTTP://LocalHost.:{server.port}/a.wav"
            (clip,) = await acquire_parts([audio_url(url)], policy=net_policy())
            assert server.exchanges[0].headers["host"] == f"localhost:{server.port}"
            assert clip.origin == "URL"
            with pytest.raises(AcquisitionError, match="'localhost' resolves to"):
                await acquire_parts(
                    [audio_url(url)], policy=net_policy(allow_private_addresses=False)
                )
            assert len(server.exchanges) == 1

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "host", ["2130706433", "0x7f000001", "017700000001", "0177.0.0.1", "0x7f.1", "127.1"]
)
def test_the_numeric_spellings_we_refuse_really_mean_loopback_to_the_os(host):
    """Why they are refused: httpx passes them on as names and inet_aton reads loopback."""
    try:
        infos = socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)
    except OSError:
        pytest.skip("this libc does not read the inet_aton forms")
    assert {info[4][0] for info in infos} == {"127.0.0.1"}
    with pytest.raises(SourceRefused, match=NUMERIC):
        parse_media_url(f"http://{host}/")


def _escape(text: str) -> str:
    return re.escape(text)
