"""Which network addresses an `http` target may reach: a URL is written by whoever can call the
API, so an address that is not public is refused unless `CRONLEDGER_HTTP_ALLOW_NETWORKS` holds
it. Every spelling is judged as the address it is: an IPv6 address carrying an IPv4 one
(mapped, compatible, NAT64, 6to4) is refused when either form is, and a numeric host
(`2852039166`, `0xa9.0xfe.169.254`) is read as the C resolver reads it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence

from cronledger.settings import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_BLOCKED: tuple[tuple[str, str], ...] = (
    ("127.0.0.0/8", "a loopback"),
    ("::1/128", "a loopback"),
    ("169.254.0.0/16", "a link-local (instance metadata lives there)"),
    ("fe80::/10", "a link-local"),
    ("10.0.0.0/8", "a private"),
    ("172.16.0.0/12", "a private"),
    ("192.168.0.0/16", "a private"),
    ("100.64.0.0/10", "a CGNAT (shared address space)"),
    ("fc00::/7", "a unique-local (instance metadata lives there)"),
    ("fec0::/10", "a site-local"),
    ("224.0.0.0/4", "a multicast"),
    ("ff00::/8", "a multicast"),
    ("0.0.0.0/8", "an unspecified"),
    ("::/128", "an unspecified"),
)
BLOCKED: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(cidr), label) for cidr, label in _BLOCKED
)
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
#: What the C library would read as an IPv4 address: dotted parts in decimal, octal or hex.
_NUMERIC_HOST = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)(\.(0[xX][0-9a-fA-F]*|[0-9]+)){0,3}")
LOCALHOST = ipaddress.ip_address("127.0.0.1")


def literal_address(host: str) -> Address | None:
    """The address a URL's host names without asking DNS, in any spelling; None for a name.
    `localhost` (and `*.localhost`, RFC 6761) counts as the loopback address it always is."""
    text = host.strip("[]").split("%", 1)[0]  # an IPv6 zone id does not change the address
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    lowered = text.lower().rstrip(".")
    if lowered == "localhost" or lowered.endswith(".localhost"):
        return LOCALHOST
    return None


def refusal(address: Address, allowed: Iterable[Network]) -> tuple[Address, str] | None:
    """Why `address` may not be reached, as the address judged (the IPv4 address an IPv6 one
    carries, if any) and what it is ("a link-local address"); None if it may be reached."""
    judged = _embedded_ipv4(address) or address
    if any(form in network for form in (address, judged) for network in allowed):
        return None
    for network, label in BLOCKED:
        if judged in network:
            return judged, f"{label} address"
    if not judged.is_global:
        return judged, "a reserved address (not on the public internet)"
    return None


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: where a connection to it would end up."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if (address in _IPV4_COMPATIBLE and int(address) > 1) or any(
        address in prefix for prefix in _NAT64
    ):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def resolve(host: str, port: int) -> Sequence[Address]:
    """Every address the system resolver gives `host` for a TCP connection, in its order."""
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    found = (ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]) for *_, sockaddr in answers)
    return list(dict.fromkeys(found))  # each address once
