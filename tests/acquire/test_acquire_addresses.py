"""The address policy: every refused range, its edges, and the public neighbours around it."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest

from audiogate.acquire import refusal
from audiogate.acquire.addresses import (
    IANA_IPV4,
    IANA_IPV6,
    JUDGED_BY_EMBEDDED_IPV4,
    REFUSED_IPV4,
    REFUSED_IPV6,
    embedded_ipv4,
    normalize_address,
)

ALL_REFUSED = [net for net, _ in REFUSED_IPV4] + [net for net, _ in REFUSED_IPV6]
# Prefixes whose neighbours are all refused themselves or beyond the address space.
WALLED_IN = {
    "240.0.0.0/4",
    "255.255.255.255/32",
    "::/128",
    "::1/128",
    "fec0::/10",  # between link-local fe80::/10 and multicast ff00::/8
    "ff00::/8",
}


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "CGNAT"),
        ("100.127.255.255", "CGNAT"),
        ("192.0.0.170", "IETF"),
        ("192.0.2.1", "TEST-NET-1"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("198.51.100.7", "TEST-NET-2"),
        ("203.0.113.9", "TEST-NET-3"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.255", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("::2", "IPv4-compatible"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("::8.8.8.8", "IPv4-compatible"),
        ("ff02::1", "multicast"),
        ("ff0e::1", "multicast"),
        ("fc00::1", "unique-local"),
        ("fdff:ffff::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("febf::1", "link-local"),
        ("fec0::1", "site-local"),
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("2001::1", "Teredo"),
        ("100::1", "discard-only"),
        ("64:ff9b:1::1", "local-use NAT64"),
        # Embedded IPv4 is judged as IPv4.
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:7f00:1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::ffff:10.1.2.3", "private"),
        ("64:ff9b::a9fe:a9fe", "embeds 169.254.169.254"),
        ("64:ff9b::7f00:1", "embeds 127.0.0.1"),
        ("2002:c0a8:101::1", "embeds 192.168.1.1"),
        ("2002:7f00:1::", "embeds 127.0.0.1"),
        ("fe80::1%eth0", "link-local"),
    ],
)
def test_non_public_addresses_are_refused_with_their_range(address, why):
    reason = refusal(address)
    assert reason is not None
    assert why in reason


@pytest.mark.parametrize(
    "address",
    [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.216.34",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",  # NAT64 to a public address
        "2002:808:808::1",  # 6to4 of a public address
    ],
)
def test_ordinary_public_addresses_pass(address):
    assert refusal(address) is None


def _neighbours(net):
    low = int(net.network_address) - 1
    high = int(net.broadcast_address) + 1
    kind = IPv4Address if net.version == 4 else IPv6Address
    limit = 2**32 if net.version == 4 else 2**128
    return [kind(v) for v in (low, high) if 0 <= v < limit]


def _covered(address):
    return any(address in net for net in ALL_REFUSED if net.version == address.version)


@pytest.mark.parametrize("net", ALL_REFUSED, ids=str)
def test_each_prefix_is_refused_at_both_edges_and_its_neighbours_are_public(net):
    assert refusal(net.network_address) is not None
    assert refusal(net.broadcast_address) is not None
    checked = 0
    for neighbour in _neighbours(net):
        if _covered(neighbour):
            continue  # inside another refused prefix (e.g. ::2 after ::1)
        # A v6 neighbour may embed IPv4 (6to4 / NAT64); judge it by that address then.
        inner = embedded_ipv4(neighbour) if neighbour.version == 6 else None
        if inner is not None and _covered(inner):
            continue
        assert refusal(neighbour) is None, f"{neighbour} next to {net} must be public"
        checked += 1
    if str(net) not in WALLED_IN:
        assert checked, f"no public neighbour checked for {net}"


@pytest.mark.parametrize(
    "address",
    [
        # mlxcel's neighbour list (src/server/media_net_tests.rs), spelled out.
        "1.0.0.0",
        "9.255.255.255",
        "11.0.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "191.255.255.255",
        "192.0.1.0",
        "192.0.3.0",
        "192.167.255.255",
        "192.169.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "198.51.99.255",
        "198.51.101.0",
        "203.0.112.255",
        "203.0.114.0",
        "223.255.255.255",
        "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "fe00::",
        "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:db9::",
        "fe7f:ffff::",
    ],
)
def test_mlxcels_neighbours_are_public(address):
    assert refusal(address) is None


def test_mapped_addresses_normalize_to_ipv4_and_scopes_are_dropped():
    assert normalize_address("::ffff:127.0.0.1") == IPv4Address("127.0.0.1")
    assert normalize_address(ip_address("::ffff:808:808")) == IPv4Address("8.8.8.8")
    assert normalize_address("fe80::1%eth0") == IPv6Address("fe80::1")
    assert normalize_address("2001:4860::1") == IPv6Address("2001:4860::1")
    assert embedded_ipv4(IPv6Address("64:ff9b::a9fe:a9fe")) == IPv4Address("169.254.169.254")
    assert embedded_ipv4(IPv6Address("2002:a9fe:a9fe::1")) == IPv4Address("169.254.169.254")
    assert embedded_ipv4(IPv6Address("2001:4860::1")) is None


# --- IANA's special-purpose registries: every entry and its verdict -----------------------

#: The three prefixes the issue (#21) found public before the registries were the table.
NEWLY_REFUSED = ["2001:2::/48", "2001:10::/28", "2001:20::/28"]


def _verdict(prefix: str) -> str:
    """``refused`` when both edges of ``prefix`` are refused, ``embedded`` for a prefix
    judged by the IPv4 address it embeds (refused for a private one, public for a public
    one), ``public`` otherwise."""
    net = ip_network(prefix)
    edges = [refusal(net.network_address), refusal(net.broadcast_address)]
    if str(net) in JUDGED_BY_EMBEDDED_IPV4:
        offset = {"::ffff:0:0/96": 0, "64:ff9b::/96": 0, "2002::/16": 80}[str(net)]
        public = IPv6Address(int(net.network_address) | (0x08080808 << offset))
        private = IPv6Address(int(net.network_address) | (0x7F000001 << offset))
        return "embedded" if refusal(public) is None and refusal(private) else "wrong"
    return "refused" if all(edges) else "public"


def test_the_tables_hold_every_registry_entry() -> None:
    assert len(IANA_IPV4) == 26
    assert len(IANA_IPV6) == 25
    assert {prefix for prefix, _, _ in IANA_IPV6} >= JUDGED_BY_EMBEDDED_IPV4
    for prefix in NEWLY_REFUSED:
        assert prefix in {p for p, _, _ in IANA_IPV6}


@pytest.mark.parametrize(
    ("prefix", "name"),
    [(prefix, name) for prefix, name, _ in IANA_IPV4 + IANA_IPV6],
    ids=[prefix for prefix, _, _ in IANA_IPV4 + IANA_IPV6],
)
def test_every_registry_entry_is_refused_or_judged_by_its_embedded_ipv4(prefix, name) -> None:
    expected = "embedded" if prefix in JUDGED_BY_EMBEDDED_IPV4 else "refused"
    assert _verdict(prefix) == expected, f"{prefix} ({name})"


@pytest.mark.parametrize("prefix", NEWLY_REFUSED)
def test_benchmarking_and_orchid_blocks_are_refused(prefix) -> None:
    net = ip_network(prefix)
    middle = IPv6Address(int(net.network_address) + net.num_addresses // 2)
    for address in (net.network_address, middle, net.broadcast_address):
        assert refusal(address) is not None
