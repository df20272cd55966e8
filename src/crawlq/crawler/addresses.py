"""Which IP addresses the crawler may connect to: the SSRF guard.

An address is refused when it lies in a block of IANA's special-purpose address
registries (IPv4 and IPv6: loopback, private, shared/CGNAT, link-local, documentation,
benchmarking, protocol assignments, reserved...), is multicast or broadcast, or is an
IPv6 address outside global unicast (2000::/3). IPv6 forms that carry an IPv4 address
(IPv4-mapped, NAT64, 6to4) are judged by that IPv4 address, so
``::ffff:169.254.169.254`` or ``2002:a9fe:a9fe::1`` are refused like 169.254.169.254;
Teredo and the other forms the IPv6 registry marks as not globally reachable are
refused outright.

Why a table of our own rather than ``ipaddress``'s ``is_global``: the standard
library's tables were corrected in later patch releases (CVE-2024-4032), so its answer
depends on the Python a machine has, and it does not look inside 6to4 or NAT64
addresses; the guard must mean the same everywhere. The blocks are data from the registries
(https://www.iana.org/assignments/iana-ipv4-special-registry,
https://www.iana.org/assignments/iana-ipv6-special-registry); ``ipaddress`` parses.
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4_BLOCKED: Final = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8",          # "this network"
    "10.0.0.0/8",         # private
    "100.64.0.0/10",      # shared address space (CGNAT; cloud metadata services)
    "127.0.0.0/8",        # loopback
    "169.254.0.0/16",     # link-local (cloud metadata at 169.254.169.254)
    "172.16.0.0/12",      # private
    "192.0.0.0/24",       # IETF protocol assignments
    "192.0.2.0/24",       # documentation (TEST-NET-1)
    "192.31.196.0/24",    # AS112-v4
    "192.52.193.0/24",    # AMT
    "192.88.99.0/24",     # deprecated 6to4 relay anycast
    "192.168.0.0/16",     # private
    "192.175.48.0/24",    # direct delegation AS112 service
    "198.18.0.0/15",      # benchmarking
    "198.51.100.0/24",    # documentation (TEST-NET-2)
    "203.0.113.0/24",     # documentation (TEST-NET-3)
    "224.0.0.0/4",        # multicast
    "240.0.0.0/4",        # reserved, and 255.255.255.255 (limited broadcast)
))

_V6_GLOBAL_UNICAST: Final = ipaddress.IPv6Network("2000::/3")

_V6_BLOCKED: Final = tuple(ipaddress.IPv6Network(n) for n in (
    "2001::/23",          # IETF protocol assignments (Teredo 2001::/32, benchmarking,
                          # AMT, AS112, ORCHID, drone DET...)
    "2001:db8::/32",      # documentation
    "2620:4f:8000::/48",  # direct delegation AS112 service
    "3fff::/20",          # documentation
))

_V4_MAPPED: Final = ipaddress.IPv6Network("::ffff:0:0/96")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known NAT64 prefix
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(specs: list[str] | tuple[str, ...]) -> tuple[Network, ...]:
    """Parse addresses or CIDR blocks (``10.1.0.0/16``, ``127.0.0.1``); ValueError
    names the one that is not."""
    out: list[Network] = []
    for spec in specs:
        try:
            out.append(ipaddress.ip_network(spec.strip(), strict=False))
        except ValueError:
            raise ValueError(f"not an IP address or CIDR block: {spec!r}") from None
    return tuple(out)


def refusal(address: str | IPAddress, allowed: tuple[Network, ...] = ()) -> str | None:
    """Why the crawler must not connect to ``address`` (an IP address, IPv6 with or
    without brackets and zone), or None when it may. Raises ValueError for something
    that is not an IP address. ``allowed`` blocks are never refused (a crawl of an
    intranet, or of a test server on loopback)."""
    a = address if not isinstance(address, str) else _parse(address)
    if any(a in net for net in allowed if net.version == a.version):
        return None
    if isinstance(a, ipaddress.IPv4Address):
        return _v4_refusal(a)
    embedded = _embedded_v4(a)
    if embedded is not None:
        why = _v4_refusal(embedded)
        return None if why is None else f"{why} (carried in {a.compressed})"
    if a not in _V6_GLOBAL_UNICAST:
        return f"{a.compressed} is not a global unicast IPv6 address"
    for net in _V6_BLOCKED:
        if a in net:
            return f"{a.compressed} is in the special-purpose block {net}"
    return None


def _parse(text: str) -> IPAddress:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    a = ipaddress.ip_address(text)
    if isinstance(a, ipaddress.IPv6Address) and a.scope_id:
        a = ipaddress.IPv6Address(text.partition("%")[0])  # a zone only narrows the link
    return a


def _v4_refusal(a: ipaddress.IPv4Address) -> str | None:
    for net in _V4_BLOCKED:
        if a in net:
            return f"{a} is in the special-purpose block {net}"
    return None


def _embedded_v4(a: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, NAT64 or 6to4 address stands for."""
    if a in _V4_MAPPED or a in _NAT64:
        return ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)
    if a in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(a) >> 80) & 0xFFFFFFFF)
    return None
