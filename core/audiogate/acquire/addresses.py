"""Which IP addresses a media URL may reach: public ones (mlxcel ``is_public_address``).

A deny-list of named ranges, written out here rather than taken from ``ipaddress``'s
``is_private``/``is_global`` (whose tables change between Python versions):

* IPv4: mlxcel's list (``src/server/media_net.rs``) — unspecified ``0/8``, private
  ``10/8``, ``172.16/12``, ``192.168/16``, CGNAT ``100.64/10``, loopback ``127/8``,
  link-local ``169.254/16`` (cloud metadata), ``192.0.0/24``, the three documentation
  nets, benchmarking ``198.18/15``, multicast ``224/4``, reserved ``240/4`` and broadcast.
* IPv6: mlxcel's list — ``::``, ``::1``, IPv4-compatible ``::/96``, unique-local
  ``fc00::/7``, link-local ``fe80::/10``, multicast ``ff00::/8``, documentation
  ``2001:db8::/32`` — plus deprecated site-local ``fec0::/10``, discard-only ``100::/64``,
  Teredo ``2001::/32`` (tunnels to an obfuscated IPv4 address we cannot judge), the
  local-use NAT64 prefix ``64:ff9b:1::/48`` and documentation ``3fff::/20`` (RFC 9637).
* Embedded IPv4 is judged as IPv4: IPv4-mapped ``::ffff:0:0/96`` (and dialled as plain
  IPv4), the well-known NAT64 prefix ``64:ff9b::/96`` (a NAT64 gateway forwards to the
  embedded address) and 6to4 ``2002::/16`` (a relay forwards to the embedded address).
  So ``64:ff9b::a9fe:a9fe`` is refused like ``169.254.169.254``, and
  ``64:ff9b::808:808`` is public like ``8.8.8.8``.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Final

from audiogate.acquire.policy import IPAddress

__all__ = [
    "REFUSED_IPV4",
    "REFUSED_IPV6",
    "embedded_ipv4",
    "normalize_address",
    "refusal",
]

#: Refused IPv4 ranges and why, most specific first.
REFUSED_IPV4: Final[tuple[tuple[IPv4Network, str], ...]] = tuple(
    (IPv4Network(net), why)
    for net, why in (
        ("255.255.255.255/32", "broadcast"),
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    )
)

#: Refused IPv6 ranges and why, most specific first (embedded IPv4 is handled apart).
REFUSED_IPV6: Final[tuple[tuple[IPv6Network, str], ...]] = tuple(
    (IPv6Network(net), why)
    for net, why in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/32", "Teredo"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

_NAT64: Final = IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR: Final = IPv6Network("2002::/16")


def normalize_address(address: IPAddress | str) -> IPAddress:
    """Parse ``address``; an IPv4-mapped IPv6 address becomes the IPv4 address it maps.

    A scope (``fe80::1%eth0``) is dropped: it does not change which range it is in.
    """
    if isinstance(address, str):
        address = ip_address(address.split("%", 1)[0])
    if isinstance(address, IPv6Address):
        if address.scope_id is not None:
            address = IPv6Address(address.packed)
        mapped = address.ipv4_mapped
        if mapped is not None:
            return mapped
    return address


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address a NAT64 (``64:ff9b::/96``) or 6to4 (``2002::/16``) address reaches."""
    if address in _NAT64:
        return IPv4Address(address.packed[12:])
    if address in _SIX_TO_FOUR:
        return IPv4Address(address.packed[2:6])
    return None


def _refusal_v4(address: IPv4Address) -> str | None:
    for network, why in REFUSED_IPV4:
        if address in network:
            return f"{why} {network}"
    return None


def refusal(address: IPAddress | str) -> str | None:
    """Why ``address`` is not public (a range name and prefix), or ``None`` if it is."""
    address = normalize_address(address)
    if isinstance(address, IPv4Address):
        return _refusal_v4(address)
    for network, why in REFUSED_IPV6:
        if address in network:
            return f"{why} {network}"
    inner = embedded_ipv4(address)
    if inner is not None:
        why_inner = _refusal_v4(inner)
        if why_inner is not None:
            return f"embeds {inner}, {why_inner}"
    return None
