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
* Every entry of IANA's IPv4 and IPv6 special-purpose address registries
  (:data:`IANA_IPV4`, :data:`IANA_IPV6`) is refused, whatever its "globally reachable"
  column says (anycast PCP/TURN, AS112 DNS sinks, AMT relays, ORCHIDv2 and DET
  identifiers are no media servers), except the two prefixes whose embedded IPv4 address
  is judged instead (``64:ff9b::/96``, ``2002::/16``). Hence also AS112
  ``192.31.196/24``, ``192.175.48/24``, ``2001:4:112::/48``, ``2620:4f:8000::/48``, AMT
  ``192.52.193/24``, the deprecated 6to4 relay anycast ``192.88.99/24``, the dummy
  prefix ``100:0:0:1::/64``, ``2001::/23`` (benchmarking ``2001:2::/48``, ORCHID
  ``2001:10::/28``, ORCHIDv2 ``2001:20::/28``, DETs ``2001:30::/28``, ...) and SRv6 SIDs
  ``5f00::/16``.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Final

from audiogate.acquire.policy import IPAddress

__all__ = [
    "IANA_IPV4",
    "IANA_IPV6",
    "JUDGED_BY_EMBEDDED_IPV4",
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
        ("192.31.196.0/24", "AS112-v4"),
        ("192.52.193.0/24", "AMT"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("192.168.0.0/16", "private"),
        ("192.175.48.0/24", "AS112 direct delegation"),
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
        ("100:0:0:1::/64", "dummy prefix"),
        ("2001::/32", "Teredo"),
        ("2001::/23", "IETF protocol assignments"),
        ("2001:db8::/32", "documentation"),
        ("2620:4f:8000::/48", "AS112 direct delegation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "SRv6 SIDs"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

#: IANA's IPv4 Special-Purpose Address Registry, every entry (prefix, name, RFC):
#: https://www.iana.org/assignments/iana-ipv4-special-registry (docs/provenance.md).
IANA_IPV4: Final[tuple[tuple[str, str, str], ...]] = (
    ("0.0.0.0/8", "This network", "RFC 791"),
    ("0.0.0.0/32", "This host on this network", "RFC 1122"),
    ("10.0.0.0/8", "Private-Use", "RFC 1918"),
    ("100.64.0.0/10", "Shared Address Space", "RFC 6598"),
    ("127.0.0.0/8", "Loopback", "RFC 1122"),
    ("169.254.0.0/16", "Link Local", "RFC 3927"),
    ("172.16.0.0/12", "Private-Use", "RFC 1918"),
    ("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890"),
    ("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335"),
    ("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    ("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723"),
    ("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155"),
    ("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 7050"),
    ("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 7050"),
    ("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737"),
    ("192.31.196.0/24", "AS112-v4", "RFC 7535"),
    ("192.52.193.0/24", "AMT", "RFC 7450"),
    ("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526"),
    ("192.88.99.2/32", "6a44-relay anycast address", "RFC 6751"),
    ("192.168.0.0/16", "Private-Use", "RFC 1918"),
    ("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534"),
    ("198.18.0.0/15", "Benchmarking", "RFC 2544"),
    ("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737"),
    ("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737"),
    ("240.0.0.0/4", "Reserved", "RFC 1112"),
    ("255.255.255.255/32", "Limited Broadcast", "RFC 8190"),
)

#: IANA's IPv6 Special-Purpose Address Registry, every entry (prefix, name, RFC):
#: https://www.iana.org/assignments/iana-ipv6-special-registry (docs/provenance.md).
IANA_IPV6: Final[tuple[tuple[str, str, str], ...]] = (
    ("::1/128", "Loopback Address", "RFC 4291"),
    ("::/128", "Unspecified Address", "RFC 4291"),
    ("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291"),
    ("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052"),
    ("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215"),
    ("100::/64", "Discard-Only Address Block", "RFC 6666"),
    ("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780"),
    ("2001::/23", "IETF Protocol Assignments", "RFC 2928"),
    ("2001::/32", "TEREDO", "RFC 4380"),
    ("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723"),
    ("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155"),
    ("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665"),
    ("2001:2::/48", "Benchmarking", "RFC 5180"),
    ("2001:3::/32", "AMT", "RFC 7450"),
    ("2001:4:112::/48", "AS112-v6", "RFC 7535"),
    ("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843"),
    ("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    ("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374"),
    ("2001:db8::/32", "Documentation", "RFC 3849"),
    ("2002::/16", "6to4", "RFC 3056"),
    ("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534"),
    ("3fff::/20", "Documentation", "RFC 9637"),
    ("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602"),
    ("fc00::/7", "Unique-Local", "RFC 4193"),
    ("fe80::/10", "Link-Local Unicast", "RFC 4291"),
)

#: Registry entries judged by the IPv4 address they embed, not refused outright.
JUDGED_BY_EMBEDDED_IPV4: Final = frozenset({"::ffff:0:0/96", "64:ff9b::/96", "2002::/16"})

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
