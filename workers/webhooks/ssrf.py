"""SSRF guard for webhook URLs: checked at registration and again before every request and
redirect, after DNS resolution.

Refused unless an allowlisted network contains them: every address that is not globally
routable (loopback, private, link-local including the cloud metadata address 169.254.169.254,
CGNAT, multicast, reserved, unspecified), and IPv4-mapped IPv6 addresses by the IPv4 address
they map. Only ``http`` and ``https`` URLs are accepted.

Residual risk: the HTTP client resolves the name again when it connects; a DNS answer that
changes between the check and the connection (rebinding) is not prevented here.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from ragstream.errors import PermanentError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class SsrfBlockedError(PermanentError):
    """The URL points at an address that webhooks may not reach."""

    code = "INVALID_REQUEST"


def parse_networks(cidrs: Sequence[str]) -> list[Network]:
    """``["127.0.0.1/32", ...]`` as network objects."""
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]


def _effective(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address_allowed(ip: IPAddress, allow: Sequence[Network]) -> bool:
    """True if ``ip`` is globally routable or inside an allowlisted network."""
    ip = _effective(ip)
    if any(ip.version == net.version and ip in net for net in allow):
        return True
    return ip.is_global and not ip.is_multicast


def check_url(url: str, allow: Sequence[Network]) -> list[IPAddress]:
    """Resolve ``url``'s host and check every address; return them.

    Raises:
        SsrfBlockedError: bad scheme, no host, unresolvable, or a refused address.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise SsrfBlockedError(f"webhook URL cannot be parsed: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise SsrfBlockedError(f"webhook URL scheme must be http or https, not {parts.scheme!r}")
    host = parts.hostname
    if not host:
        raise SsrfBlockedError("webhook URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        raise SsrfBlockedError(f"cannot resolve webhook host {host!r}: {exc}") from exc
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for ip in addresses:
        if not address_allowed(ip, allow):
            raise SsrfBlockedError(f"webhook host {host!r} resolves to refused address {ip}")
    return addresses
