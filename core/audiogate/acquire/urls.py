"""A strict parser for media URLs that agrees with how the connection is made.

Parser differentials are how SSRF guards get bypassed (vLLM CVE-2026-24779: a backslash
read as a path separator by one parser and as userinfo by another). So the accepted
language is small, anything outside it is refused rather than interpreted, and the
result is cross-checked against ``httpx.URL``:

* printable ASCII only (no spaces, controls, non-ASCII: send IDNs in punycode), at most
  8 KiB, and no backslash anywhere;
* ``scheme://authority[/path][?query][#fragment]``; the scheme (any case) is ``http`` or
  ``https``; the fragment is dropped (never sent);
* no userinfo (any ``@`` in the authority) and no ``%`` in the authority;
* a port, if given, is 1–65535 in plain decimal (no sign, no leading zero);
* the host is an IPv6 literal in brackets (no zone), a canonical dotted-quad IPv4
  literal, or a DNS name of letters, digits and hyphens (case-folded, one trailing dot
  dropped, labels of 1–63 characters, at most 253 in all).

**Numeric IPv4 spellings are refused outright.** A host whose last label is a number
(decimal, ``0x`` hex) but that is not a canonical dotted quad — ``2130706433``,
``0x7f000001``, ``0177.0.0.1``, ``127.1``, ``127.000.000.001``, ``1.2.3.4.5``, ``0`` —
is refused: ``httpx`` treats such hosts as names and hands them to ``getaddrinfo``, whose
``inet_aton`` reads them as 127.0.0.1 (or 0.0.0.0, which Linux dials as loopback), while
WHATWG URL parsers do it differently again. Nothing legitimate needs them.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv6Address
from typing import Final, Literal

import attrs
import httpx

from audiogate.acquire.addresses import normalize_address
from audiogate.acquire.context import SourceRefused
from audiogate.acquire.policy import IPAddress

__all__ = ["MAX_URL_CHARS", "MediaURL", "host_allowed", "parse_media_url"]

#: Longest accepted URL.
MAX_URL_CHARS: Final = 8192

_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}:")
_SHAPE: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([/?#].*)?", re.DOTALL)
_PORT: Final = re.compile(r"[1-9][0-9]{0,4}")
_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_NUMERIC_LABEL: Final = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_DECIMAL_OCTET: Final = re.compile(r"(?:0|[1-9][0-9]{0,2})")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


@attrs.frozen(kw_only=True)
class MediaURL:
    """One validated hop of a media fetch.

    :param scheme: ``"http"`` or ``"https"``.
    :param host: the normalized host: lowercase name without trailing dot, or an IP
        literal in compressed form (IPv6 without brackets).
    :param port: the port connected to (the scheme's default if none was given).
    :param target: path and query as sent (``/`` if empty).
    :param literal: the address when the host is an IP literal (IPv4-mapped IPv6 as IPv4).
    """

    scheme: Literal["http", "https"]
    host: str
    port: int
    target: str
    literal: IPAddress | None = None

    @property
    def authority(self) -> str:
        """``host[:port]`` as the ``Host`` header carries it (port only if not default)."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == _DEFAULT_PORTS[self.scheme]:
            return shown
        return f"{shown}:{self.port}"

    @property
    def url(self) -> str:
        """The normalized URL (what redirects are resolved against)."""
        return f"{self.scheme}://{self.authority}{self.target}"

    def dial_url(self, address: IPAddress) -> httpx.URL:
        """The same request aimed at ``address``: how the connection is pinned."""
        return httpx.URL(
            scheme=self.scheme,
            host=str(address),
            port=None if self.port == _DEFAULT_PORTS[self.scheme] else self.port,
            raw_path=self.target.encode("ascii"),
        )


def _refuse(detail: str) -> SourceRefused:
    return SourceRefused(f"media URL refused: {detail}")


def _parse_host(text: str) -> tuple[str, IPAddress | None]:
    if text.startswith("["):
        if not text.endswith("]"):
            raise _refuse(f"malformed IPv6 literal {text!r}")
        try:
            v6 = IPv6Address(text[1:-1])
        except ValueError:
            raise _refuse(f"malformed IPv6 literal {text!r}") from None
        return v6.compressed, normalize_address(v6)
    name = text.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise _refuse("the URL has no host")
    labels = name.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        if len(labels) == 4 and all(_DECIMAL_OCTET.fullmatch(x) for x in labels):
            try:
                v4 = IPv4Address(name)
            except ValueError:
                pass
            else:
                return v4.compressed, v4
        raise _refuse(
            f"host {text!r} is a non-canonical numeric IPv4 address (decimal, octal, hex or "
            f"short forms are refused; write a dotted quad such as 93.184.216.34)"
        )
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _refuse(
            f"host {text!r} is not a valid DNS name (letters, digits and hyphens; "
            f"internationalized names in punycode)"
        )
    return name, None


def parse_media_url(text: str) -> MediaURL:
    """Validate one ``http(s)://`` URL strictly.

    :raises SourceRefused: ``"media URL refused: ..."`` with the rule it breaks.
    """
    if len(text) > MAX_URL_CHARS:
        raise _refuse(f"the URL is {len(text)} characters, more than {MAX_URL_CHARS}")
    for position, ch in enumerate(text):
        if not "!" <= ch <= "~":
            raise _refuse(
                f"character {ch!r} at position {position} (only printable ASCII without "
                f"spaces; percent-encode the path, punycode the host)"
            )
    if "\\" in text:
        raise _refuse("backslashes are not allowed anywhere in a media URL")
    head = _SCHEME.match(text)
    if head is None:
        raise _refuse("expected scheme://host[:port]/path")
    scheme_text = head.group()[:-1]
    scheme = scheme_text.lower()
    if scheme not in _DEFAULT_PORTS:
        raise _refuse(f"scheme {scheme_text!r} is not http or https")
    shape = _SHAPE.fullmatch(text)
    if shape is None:
        raise _refuse("expected scheme://host[:port]/path")
    authority, rest = shape.group(2), shape.group(3) or ""
    if "@" in authority:
        raise _refuse("credentials (userinfo before '@') are not allowed")
    if "%" in authority:
        raise _refuse("percent-encoding is not allowed in the host or port")
    host_text, port_text = authority, None
    if authority.startswith("["):
        close = authority.find("]")
        if close != -1 and close + 1 < len(authority):
            host_text, tail = authority[: close + 1], authority[close + 1 :]
            if not tail.startswith(":"):
                raise _refuse(f"malformed authority {authority!r}")
            port_text = tail[1:]
    elif ":" in authority:
        host_text, _, port_text = authority.partition(":")
    if port_text is not None and (not _PORT.fullmatch(port_text) or int(port_text) > 65535):
        raise _refuse(f"port {port_text!r} is not a decimal number in 1-65535")
    if not host_text:
        raise _refuse("the URL has no host")
    host, literal = _parse_host(host_text)
    port = int(port_text) if port_text is not None else _DEFAULT_PORTS[scheme]
    target = rest.split("#", 1)[0]
    if not target.startswith("/"):
        target = "/" + target
    parsed = MediaURL(
        scheme="https" if scheme == "https" else "http",
        host=host,
        port=port,
        target=target,
        literal=literal,
    )
    _cross_check(text, parsed)
    return parsed


def _cross_check(text: str, parsed: MediaURL) -> None:
    # What httpx would connect to for the same string must be what we validated.
    try:
        theirs = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise _refuse(f"httpx cannot parse it either ({exc})") from None
    their_host = theirs.raw_host.decode("ascii").lower().removesuffix(".")
    if ":" in their_host:
        their_host = IPv6Address(their_host).compressed
    their_port = theirs.port or _DEFAULT_PORTS[parsed.scheme]
    if (theirs.scheme, their_host, their_port) != (parsed.scheme, parsed.host, parsed.port):
        raise _refuse(
            f"URL parsers disagree on the destination ({parsed.host}:{parsed.port} vs "
            f"{their_host}:{their_port})"
        )


def host_allowed(host: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``host`` (normalized) matches an allow-list entry (exact or ``*.suffix``)."""
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False
