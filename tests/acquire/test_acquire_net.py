"""Remote fetches against a real loopback server that lies, trickles, redirects and floods."""

from __future__ import annotations

import asyncio
import base64
import re
from ipaddress import IPv4Address

import httpx
import pytest
from acquire_helpers import (
    WAIT_S,
    LoopbackServer,
    audio_url,
    endless,
    head,
    input_audio,
    net_policy,
    redirect,
    respond,
    static_resolver,
    trickle,
    wav,
)

from audiogate.acquire import PRIVATE_MEDIA_URLS_ENV, acquire_parts, addresses
from audiogate.errors import AcquisitionError, LimitError, MemoryLimitError

CLIP = wav()


def run(scenario):
    return asyncio.run(scenario())


def fetch(url, policy=None, **kwargs):
    return acquire_parts([audio_url(url)], policy=policy or net_policy(), **kwargs)


@pytest.fixture
def loopback_is_public(monkeypatch):
    """Judge 127.0.0.1 (only) public, so a first hop can reach the test server while
    redirects to every other private address are still refused."""
    real = addresses.refusal

    def refusal(address):
        if addresses.normalize_address(address) == IPv4Address("127.0.0.1"):
            return None
        return real(address)

    monkeypatch.setattr(addresses, "refusal", refusal)


def test_a_url_is_fetched_with_a_pinned_connection_and_neutral_headers():
    calls: list[str] = []

    async def scenario():
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(CLIP))
            policy = net_policy(resolver=static_resolver({"media.test": ["127.0.0.1"]}, calls))
            (clip,) = await fetch(f"http://media.test:{server.port}/a.wav", policy)
            assert (clip.data, clip.origin, clip.ordinal) == (CLIP, "URL", 1)
            (ex,) = server.exchanges
            assert ex.method == "GET"
            assert ex.headers["host"] == f"media.test:{server.port}"
            assert ex.headers["accept-encoding"] == "identity"
            assert ex.headers["connection"] == "close"
            assert ex.headers["user-agent"].startswith("audiogate/")
            assert "authorization" not in ex.headers
            assert "cookie" not in ex.headers
        assert calls == ["media.test"]  # one lookup, and the connection used its answer

    run(scenario)


def test_url_fetching_is_off_unless_switched_on():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            with pytest.raises(AcquisitionError, match="allow_url_fetch is off") as caught:
                await fetch(url, net_policy(allow_url_fetch=False))
            assert (caught.value.clip_index, caught.value.origin) == (0, "URL")
            assert server.exchanges == []

    run(scenario)


def test_a_private_address_is_refused_with_the_hatch_off_and_fetched_with_it_on():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            with pytest.raises(AcquisitionError) as caught:
                await fetch(url, net_policy(allow_private_addresses=False))
            message = str(caught.value)
            assert "'127.0.0.1' is 127.0.0.1" in message
            assert "loopback 127.0.0.0/8" in message
            assert PRIVATE_MEDIA_URLS_ENV in message
            assert server.exchanges == []
            (clip,) = await fetch(url, net_policy(allow_private_addresses=True))
            assert clip.data == CLIP

    run(scenario)


def test_every_resolved_address_must_be_public(loopback_is_public):
    async def scenario():
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(CLIP))
            resolver = static_resolver({"mixed.test": ["127.0.0.1", "10.0.0.7"]})
            policy = net_policy(resolver=resolver, allow_private_addresses=False)
            with pytest.raises(
                AcquisitionError, match=re.escape("'mixed.test' resolves to 10.0.0.7")
            ):
                await fetch(f"http://mixed.test:{server.port}/a.wav", policy)
            assert server.exchanges == []
            policy = net_policy(resolver=static_resolver({"nothing.test": []}))
            with pytest.raises(AcquisitionError, match="could not be resolved"):
                await fetch(f"http://nothing.test:{server.port}/a.wav", policy)
            with pytest.raises(AcquisitionError, match="could not be resolved"):
                await fetch(f"http://unknown.test:{server.port}/a.wav", policy)

    run(scenario)


def test_a_rebinding_resolver_is_asked_once_per_hop_and_its_checked_answer_is_dialled(
    loopback_is_public,
):
    """DNS rebinding: the first answer passes the check, later ones would not. Pinning
    means there is no later lookup for the connection to use."""
    calls: list[str] = []

    async def rebinding(host, port):
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["169.254.169.254"]

    async def scenario():
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(CLIP))
            policy = net_policy(resolver=rebinding, allow_private_addresses=False)
            (clip,) = await fetch(f"http://rebind.test:{server.port}/a.wav", policy)
            assert clip.data == CLIP
            assert server.exchanges[0].peer[0] == "127.0.0.1"
            # A redirect is a new hop: resolved again, and this time refused.
            server.route("/hop", redirect(f"http://rebind.test:{server.port}/a.wav"))
            with pytest.raises(AcquisitionError, match=re.escape("resolves to 169.254.169.254")):
                await fetch(server.url("/hop"), policy)  # the first hop is a literal
        assert calls == ["rebind.test", "rebind.test"]

    run(scenario)


def test_unreachable_addresses_are_skipped_for_the_next_checked_one():
    async def scenario():
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(CLIP))
            # Nothing listens on 127.0.0.2 (the server is bound to 127.0.0.1 only).
            resolver = static_resolver({"two.test": ["127.0.0.2", "127.0.0.1"]})
            url = f"http://two.test:{server.port}/a.wav"
            (clip,) = await fetch(url, net_policy(resolver=resolver))
            assert clip.data == CLIP
            with pytest.raises(
                AcquisitionError, match=re.escape("could not connect to 'two.test'")
            ):
                await fetch(url, net_policy(resolver=static_resolver({"two.test": ["127.0.0.2"]})))

    run(scenario)


# --- sizes ---------------------------------------------------------------------------


def test_a_content_length_over_the_cap_is_refused_before_the_body():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/huge", trickle(b"", content_length=10**12))
            with pytest.raises(LimitError) as caught:
                await fetch(url, net_policy(max_bytes_per_clip=1000))
            assert (caught.value.limit, caught.value.actual) == ("encoded bytes per clip", 10**12)
            ex = server.exchanges[0]
            await asyncio.wait_for(ex.closed.wait(), WAIT_S)
            assert ex.body_sent == 0

    run(scenario)


def test_the_request_budget_applies_to_a_content_length_too():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            policy = net_policy(max_bytes_per_request=len(CLIP) + 100)
            with pytest.raises(MemoryLimitError) as caught:
                await acquire_parts([audio_url(url), audio_url(url)], policy=policy)
            assert (caught.value.limit, caught.value.clip_index) == ("encoded bytes per request", 1)
            assert caught.value.actual == 2 * len(CLIP)

    run(scenario)


@pytest.mark.parametrize("framing", ["chunked", "close-delimited", "lying-length"])
def test_an_oversize_stream_is_cut_off_by_the_running_cap(framing):
    cap = 300_000

    async def scenario():
        async with LoopbackServer() as server:
            if framing == "chunked":
                handler = endless()
            elif framing == "lying-length":
                handler = endless(content_length=cap)  # claims the cap, sends forever
            else:
                handler = respond(b"\0" * (4 * cap), content_length=None)
            url = server.route("/big", handler)
            policy = net_policy(max_bytes_per_clip=cap)
            if framing == "lying-length":
                # h11 frames the body by its declared length: only `cap` bytes are ever
                # read, the rest never reaches the buffer (the decoder refuses them: they
                # are not audio).
                (clip,) = await fetch(url, policy)
                assert clip.data == b"\0" * cap
            else:
                with pytest.raises(LimitError) as caught:
                    await fetch(url, policy)
                assert caught.value.limit == "encoded bytes per clip"
                assert cap < caught.value.actual <= cap + 70_000
            ex = server.exchanges[0]
            await asyncio.wait_for(ex.closed.wait(), WAIT_S)

    run(scenario)


def test_a_body_shorter_than_its_content_length_is_refused():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/short", respond(CLIP, content_length=len(CLIP) + 10))
            with pytest.raises(AcquisitionError, match="RemoteProtocolError"):
                await fetch(url)

    run(scenario)


def test_a_content_length_shorter_than_the_body_takes_only_the_declared_bytes():
    async def scenario():
        async with LoopbackServer() as server:

            async def lie(ex, writer):
                writer.write(head(200, [("Content-Length", "5")]) + CLIP)
                await writer.drain()

            url = server.route("/lie", lie)
            # Only the 5 declared bytes are taken (the decoder refuses them: not a WAV).
            (clip,) = await fetch(url)
            assert clip.data == CLIP[:5]
            declared = audio_url(url, format="wav")
            with pytest.raises(AcquisitionError, match="does not match the bytes"):
                await acquire_parts([declared], policy=net_policy())

    run(scenario)


@pytest.mark.parametrize(
    ("handler", "needle"),
    [
        (respond(b"nope", status=404), "answered HTTP 404"),
        (respond(b"", status=500), "answered HTTP 500"),
        (respond(CLIP, status=206), "answered HTTP 206"),
        (respond(b"", status=304), "answered HTTP 304"),
        (respond(CLIP, headers=[("Content-Encoding", "gzip")]), "Content-Encoding 'gzip'"),
        (respond(b"", status=302), "0 Location headers"),
        (respond(b"", status=204), "empty"),
    ],
)
def test_unusable_answers_are_refused(handler, needle):
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/x", handler)
            with pytest.raises(AcquisitionError, match=needle) as caught:
                await fetch(url)
            assert caught.value.origin == "URL"

    run(scenario)


# --- time ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_slow_body_hits_the_total_timeout_and_the_connection_is_closed():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/slow", trickle(CLIP[:100], content_length=len(CLIP)))
            with pytest.raises(AcquisitionError, match=re.escape("took longer than 0.5 s")):
                await fetch(url, net_policy(total_timeout_s=0.5))
            await asyncio.wait_for(server.exchanges[0].closed.wait(), WAIT_S)

    run(scenario)


@pytest.mark.slow
def test_a_server_that_never_answers_hits_the_total_timeout():
    async def scenario():
        async with LoopbackServer() as server:

            async def silent(ex, writer):
                await asyncio.wait_for(ex.closed.wait(), WAIT_S)

            url = server.route("/silent", silent)
            with pytest.raises(AcquisitionError, match=re.escape("took longer than 0.5 s")):
                await fetch(url, net_policy(total_timeout_s=0.5))

    run(scenario)


# --- redirects -----------------------------------------------------------------------


def test_redirects_are_followed_up_to_the_limit_and_no_further():
    async def scenario():
        async with LoopbackServer() as server:
            server.route("/0", respond(CLIP))
            for hop in range(1, 7):
                server.route(
                    f"/{hop}", redirect(f"/{hop - 1}", status=(301, 302, 303, 307, 308)[hop % 5])
                )
            (clip,) = await fetch(server.url("/5"))
            assert clip.data == CLIP
            assert [ex.target for ex in server.exchanges] == ["/5", "/4", "/3", "/2", "/1", "/0"]
            with pytest.raises(AcquisitionError, match="too many redirects: more than 5"):
                await fetch(server.url("/6"))
            with pytest.raises(AcquisitionError, match="more than 2"):
                await fetch(server.url("/3"), net_policy(max_redirects=2))
            with pytest.raises(AcquisitionError, match="more than 0"):
                await fetch(server.url("/1"), net_policy(max_redirects=0))

    run(scenario)


def test_a_redirect_loop_is_cut_at_the_limit():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/loop", redirect("/loop"))
            with pytest.raises(AcquisitionError, match="too many redirects"):
                await fetch(url)
            assert len(server.exchanges) == 6

    run(scenario)


@pytest.mark.parametrize(
    ("location", "needle"),
    [
        ("http://127.0.0.2:{p}/a.wav", "'127.0.0.2' is 127.0.0.2"),
        ("http://169.254.169.254/latest/meta-data/", "link-local (cloud metadata)"),
        ("http://[::1]:{p}/a.wav", "loopback ::1/128"),
        ("http://[::ffff:10.0.0.1]/", "private 10.0.0.0/8"),
        ("http://metadata.test/computeMetadata/v1/", "'metadata.test' resolves to 169.254.169.254"),
        ("http://2130706433:{p}/a.wav", "non-canonical numeric"),
        ("http://0/", "non-canonical numeric"),
        ("//10.1.2.3/a.wav", "private 10.0.0.0/8"),
        ("file:///etc/passwd", "scheme 'file' is not http or https"),
        ("gopher://127.0.0.1/", "scheme 'gopher'"),
        ("http://user@127.0.0.1:{p}/a.wav", "credentials"),
        ("http://127.0.0.1:{p}\\@evil.test/", "backslashes"),
        ("http://media.test:{p}/a b", "spaces, controls"),
        # urljoin (ours and httpx's own while receiving) and idna raise plain ValueError
        ("http:////][/", "the Location is not a valid URL (ValueError"),
        ("https:////[x]/a.wav", "the Location is not a valid URL (ValueError"),
        (":http://[", "the Location is not a valid URL (ValueError"),
        ("https://xn--ff%5b", "the Location is not a valid URL (IDNAError"),
        ("//xn--a/", "the Location is not a valid URL (InvalidCodepoint"),
    ],
)
def test_redirects_to_private_or_malformed_targets_are_refused(
    loopback_is_public, location, needle
):
    async def scenario():
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(CLIP))
            url = server.route("/go", redirect(location.replace("{p}", str(server.port))))
            resolver = static_resolver({"metadata.test": ["169.254.169.254"]})
            policy = net_policy(resolver=resolver, allow_private_addresses=False)
            with pytest.raises(AcquisitionError, match=re.escape(needle)) as caught:
                await fetch(url, policy)
            assert (caught.value.clip_index, caught.value.origin) == (0, "URL")
            assert [ex.target for ex in server.exchanges] == ["/go"]

    run(scenario)


def test_with_the_hatch_on_a_redirect_to_another_private_address_is_followed():
    async def scenario():
        async with LoopbackServer() as server:
            server.route("/a.wav", respond(CLIP))
            resolver = static_resolver({"media.test": ["127.0.0.1"]})
            url = server.route("/go", redirect(f"http://media.test:{server.port}/a.wav"))
            (clip,) = await fetch(url, net_policy(resolver=resolver))
            assert clip.data == CLIP
            assert server.exchanges[1].headers["host"] == f"media.test:{server.port}"

    run(scenario)


def test_the_allow_list_is_checked_on_every_hop():
    async def scenario():
        async with LoopbackServer() as server:
            table = {"media.test": ["127.0.0.1"], "cdn.media.test": ["127.0.0.1"]}
            table["other.test"] = ["127.0.0.1"]
            resolver = static_resolver(table)
            port = server.port
            server.route("/a.wav", respond(CLIP))
            server.route("/to-cdn", redirect(f"http://cdn.media.test:{port}/a.wav"))
            server.route("/to-other", redirect(f"http://other.test:{port}/a.wav"))
            policy = net_policy(resolver=resolver, allowed_hosts=["media.test", "*.media.test"])
            (clip,) = await fetch(f"http://media.test:{port}/to-cdn", policy)
            assert clip.data == CLIP
            with pytest.raises(
                AcquisitionError, match=re.escape("'other.test' is not in the allowed hosts")
            ):
                await fetch(f"http://media.test:{port}/to-other", policy)
            with pytest.raises(
                AcquisitionError, match=re.escape("'other.test' is not in the allowed")
            ):
                await fetch(f"http://other.test:{port}/a.wav", policy)
            exact = net_policy(resolver=resolver, allowed_hosts=["*.media.test"])
            with pytest.raises(
                AcquisitionError, match=re.escape("'media.test' is not in the allowed")
            ):
                await fetch(f"http://media.test:{port}/a.wav", exact)
            nothing = net_policy(resolver=resolver, allowed_hosts=[])
            with pytest.raises(AcquisitionError, match="not in the allowed hosts"):
                await fetch(f"http://cdn.media.test:{port}/a.wav", nothing)

    run(scenario)


def test_https_only_refuses_plain_http():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            with pytest.raises(
                AcquisitionError, match=re.escape("plain http to '127.0.0.1' (https only)")
            ):
                await fetch(url, net_policy(https_only=True))
            assert server.exchanges == []

    run(scenario)


# --- clients and proxies ----------------------------------------------------------------


def test_the_peer_address_is_checked_after_connecting():
    """A client that goes through a proxy reaches another peer than the pinned address."""

    async def scenario():
        async with LoopbackServer() as proxy:
            proxy.route("http://93.184.216.34:8080/a.wav", respond(CLIP))
            resolver = static_resolver({"public.test": ["93.184.216.34"]})
            policy = net_policy(resolver=resolver, allow_private_addresses=False)
            async with httpx.AsyncClient(proxy=proxy.url("")) as client:
                with pytest.raises(AcquisitionError) as caught:
                    await fetch("http://public.test:8080/a.wav", policy, client=client)
            message = str(caught.value)
            assert "reached 127.0.0.1, not the checked address 93.184.216.34" in message
            # The proxy saw an absolute-form request for the pinned address itself.
            assert proxy.exchanges[0].target == "http://93.184.216.34:8080/a.wav"
            assert proxy.exchanges[0].headers["host"] == "public.test:8080"

    run(scenario)


def test_a_transport_that_cannot_report_its_peer_is_refused():
    async def scenario():
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=CLIP))
        async with httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(AcquisitionError, match=r"peer address .* is unknown"):
                await fetch("http://127.0.0.1:9/a.wav", client=client)

    run(scenario)


def test_a_unix_socket_transport_is_refused_with_a_typed_error(tmp_path):
    # Its peer is a path (the classic docker.sock set-up), not an IP address.
    path = str(tmp_path / "s.sock")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    async def scenario():
        server = await asyncio.start_unix_server(handle, path)
        try:
            transport = httpx.AsyncHTTPTransport(uds=path)
            async with httpx.AsyncClient(transport=transport) as client:
                with pytest.raises(AcquisitionError, match="not an IP address") as caught:
                    await fetch("http://93.184.216.34/a.wav", client=client)
            assert path not in str(caught.value)
        finally:
            server.close()
            await server.wait_closed()

    run(scenario)


def test_the_default_client_ignores_proxy_environment_variables(monkeypatch):
    async def scenario():
        async with LoopbackServer() as proxy, LoopbackServer() as server:
            monkeypatch.setenv("HTTP_PROXY", proxy.url(""))
            monkeypatch.setenv("ALL_PROXY", proxy.url(""))
            (clip,) = await fetch(server.route("/a.wav", respond(CLIP)))
            assert clip.data == CLIP
            assert proxy.exchanges == []

    run(scenario)


def test_a_callers_client_never_lends_its_headers_cookies_or_auth():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP, headers=[("Set-Cookie", "s=1")]))
            async with httpx.AsyncClient(
                headers={"X-Secret": "1"}, cookies={"session": "abc"}, auth=("user", "pw")
            ) as client:
                await fetch(url, client=client)
                await fetch(url, client=client)
                # httpx stored the media server's Set-Cookie; it is not kept either.
                assert [c.name for c in client.cookies.jar] == ["session"]
            for ex in server.exchanges:
                assert "x-secret" not in ex.headers
                assert "cookie" not in ex.headers
                assert "authorization" not in ex.headers

    run(scenario)


def test_mixed_sources_in_one_request_keep_their_order():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            inline = base64.b64encode(CLIP).decode()
            clips = await acquire_parts(
                [input_audio(inline), audio_url(url), audio_url("data:audio/wav;base64," + inline)],
                policy=net_policy(),
            )
            assert [(c.ordinal, c.origin) for c in clips] == [
                (1, "inline base64"),
                (2, "URL"),
                (3, "data URI"),
            ]

    run(scenario)


@pytest.mark.parametrize(
    ("later", "origin", "needle"),
    [
        (audio_url("http://2130706433/a.wav"), "URL", "non-canonical numeric"),
        (audio_url("https://user@media.test/a.wav"), "URL", "credentials"),
        (audio_url("file:///clip.wav"), "file", "media root"),
        (input_audio("clip.wav"), "file", "media root"),
    ],
)
def test_cheap_refusals_come_before_any_source_is_read(later, origin, needle):
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            with pytest.raises(AcquisitionError, match=needle) as caught:
                await acquire_parts([audio_url(url), later], policy=net_policy())
            assert (caught.value.clip_index, caught.value.origin) == (1, origin)
            assert server.exchanges == []

    run(scenario)
