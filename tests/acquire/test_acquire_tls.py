"""HTTPS with pinning: the address is dialled, the host name is what TLS sends and checks.

Needs the ``openssl`` command to make a throw-away certificate for ``media.test``.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from acquire_helpers import (
    LoopbackServer,
    audio_url,
    net_policy,
    redirect,
    respond,
    static_resolver,
    wav,
)

from audiogate.acquire import acquire_parts, create_media_client
from audiogate.errors import AcquisitionError

CLIP = wav()
RESOLVER_TABLE = {"media.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2",
            "-subj", "/CN=media.test", "-addext", "subjectAltName=DNS:media.test",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def server_context(certificate) -> ssl.SSLContext:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def client_context(certificate) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


def policy(**overrides):
    return net_policy(resolver=static_resolver(RESOLVER_TABLE), **overrides)


def test_sni_and_host_carry_the_name_while_the_pinned_address_is_dialled(certificate):
    async def scenario():
        async with LoopbackServer(ssl_context=server_context(certificate)) as server:
            server.route("/a.wav", respond(CLIP))
            async with create_media_client(verify=client_context(certificate)) as client:
                (clip,) = await acquire_parts(
                    [audio_url(f"https://media.test:{server.port}/a.wav")],
                    policy=policy(https_only=True),
                    client=client,
                )
            assert clip.data == CLIP
            assert server.sni_names == ["media.test"]
            assert server.exchanges[0].headers["host"] == f"media.test:{server.port}"
            assert server.exchanges[0].peer[0] == "127.0.0.1"

    asyncio.run(scenario())


@pytest.mark.parametrize("host", ["other.test", "127.0.0.1"])
def test_the_certificate_is_still_checked_against_the_url_host(certificate, host):
    async def scenario():
        async with LoopbackServer(ssl_context=server_context(certificate)) as server:
            server.route("/a.wav", respond(CLIP))
            async with create_media_client(verify=client_context(certificate)) as client:
                with pytest.raises(AcquisitionError, match="certificate verify failed") as caught:
                    await acquire_parts(
                        [audio_url(f"https://{host}:{server.port}/a.wav")],
                        policy=policy(),
                        client=client,
                    )
            assert re.search(rf"could not connect to '{re.escape(host)}'", str(caught.value))
            assert server.exchanges == []

    asyncio.run(scenario())


def test_https_only_refuses_a_redirect_that_downgrades(certificate):
    async def scenario():
        async with (
            LoopbackServer(ssl_context=server_context(certificate)) as secure,
            LoopbackServer() as plain,
        ):
            plain.route("/a.wav", respond(CLIP))
            secure.route("/down", redirect(f"http://media.test:{plain.port}/a.wav"))
            url = f"https://media.test:{secure.port}/down"
            async with create_media_client(verify=client_context(certificate)) as client:
                with pytest.raises(AcquisitionError, match=re.escape("plain http to 'media.test'")):
                    await acquire_parts(
                        [audio_url(url)], policy=policy(https_only=True), client=client
                    )
                assert plain.exchanges == []
                # Without the switch the downgrade is followed (and still pinned and checked).
                (clip,) = await acquire_parts([audio_url(url)], policy=policy(), client=client)
            assert clip.data == CLIP

    asyncio.run(scenario())
