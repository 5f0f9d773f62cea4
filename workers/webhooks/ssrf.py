"""SSRF guard for webhook URLs: checked at registration and again before every request and
redirect, after DNS resolution.

Refused unless an allowlisted network contains them: every address that is not globally
routable (loopback, private, link-local including the cloud metadata address 169.254.169.254,
CGNAT, multicast, reserved, unspecified, IPv6 site-local), and IPv6 addresses that embed an IPv4
address by that address: IPv4-mapped (``::ffff:a.b.c.d``), IPv4-translated
(``::ffff:0:a.b.c.d``, RFC 2765 SIIT: ``[::ffff:0:7f00:1]`` is 127.0.0.1), IPv4-compatible
(``::a.b.c.d``), NAT64 (``64:ff9b::/96``, RFC 6052, and ``64:ff9b:1::/48``, RFC 8215), 6to4
(``2002::/16``, RFC 3056) and Teredo (``2001::/32``, RFC 4380). Only ``http`` and ``https``
URLs are accepted.

A refusal names the setting that allows an address, :data:`ALLOW_SETTING`: it must reach both
the API (checked at registration and for a ``callback_url``) and the webhook workers (checked
before every request).

:func:`check_url` returns the checked addresses; delivery connects to those only, never
resolving the name again (:mod:`workers.webhooks.transport`), so a DNS answer that changes
between the check and the connection (rebinding) is never connected to.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from ragstream.errors import PermanentError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


#: The environment variable of ``webhooks.allow_networks`` (a JSON list of CIDRs).
ALLOW_SETTING = "RAGSTREAM_WEBHOOKS__ALLOW_NETWORKS"


class SsrfBlockedError(PermanentError):
    """The URL points at an address that webhooks may not reach."""

    code = "INVALID_REQUEST"


def parse_networks(cidrs: Sequence[str]) -> list[Network]:
    """``["127.0.0.1/32", ...]`` as network objects."""
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")
_V4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 section 2.1


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (see the module docstring); ``[]`` if none."""
    found: list[ipaddress.IPv4Address] = []
    value = int(ip)
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip in _V4_TRANSLATED:
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    if ip in _V4_COMPATIBLE and value > 1:  # ``::`` and ``::1`` are not IPv4 forms
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    if any(ip in net for net in _NAT64):
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    if ip in _SIXTOFOUR:
        found.append(ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF))
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def _one_allowed(ip: IPAddress, allow: Sequence[Network]) -> bool:
    if any(ip.version == net.version and ip in net for net in allow):
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return False
    return ip.is_global and not ip.is_multicast


def address_allowed(ip: IPAddress, allow: Sequence[Network]) -> bool:
    """True if ``ip`` is globally routable or inside an allowlisted network, and so is every
    IPv4 address it embeds."""
    if any(ip.version == net.version and ip in net for net in allow):
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = embedded_ipv4(ip)
        if embedded:
            return all(_one_allowed(v4, allow) for v4 in embedded)
    return _one_allowed(ip, allow)


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
            raise SsrfBlockedError(
                f"webhook host {host!r} resolves to refused address {ip} (not globally "
                f"routable); to allow it, add its network to {ALLOW_SETTING} (e.g. "
                f"'[\"{_example_cidr(ip)}\"]') for the API and the webhook workers"
            )
    return addresses


def _example_cidr(ip: IPAddress) -> str:
    """The single-address network of ``ip`` (``127.0.0.1/32``), for a refusal's message."""
    return f"{ip}/{ip.max_prefixlen}"
