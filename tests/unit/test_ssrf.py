"""The SSRF guard refuses every form of a non-global address, embedded IPv4 forms included
(issue 15, item 12), and still lets global addresses through."""

from __future__ import annotations

import ipaddress

import pytest

from workers.webhooks.ssrf import SsrfBlockedError, address_allowed, check_url, parse_networks


@pytest.mark.parametrize(
    "address",
    [
        "::127.0.0.1",  # IPv4-compatible loopback
        "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address 169.254.169.254
        "64:ff9b:1::a00:1",  # local-use NAT64 of 10.0.0.1
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "fec0::1",  # IPv6 site-local
        "::ffff:10.0.0.1",  # IPv4-mapped private
        "::ffff:0:7f00:1",  # IPv4-translated (RFC 2765 SIIT) loopback 127.0.0.1
        "::ffff:0:a9fe:a9fe",  # IPv4-translated metadata address
        "64:ff9b::7f00:1",  # NAT64 (RFC 6052 well-known prefix) of 127.0.0.1
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo, client 192.0.2.45 (documentation)
        "127.0.0.1",
        "169.254.169.254",
        "::1",
    ],
)
def test_non_global_forms_are_refused(address: str) -> None:
    assert not address_allowed(ipaddress.ip_address(address), [])


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1", "::ffff:0:808:808"],
)
def test_global_addresses_pass(address: str) -> None:
    assert address_allowed(ipaddress.ip_address(address), [])


def test_an_allowlisted_network_lets_its_embedded_form_through() -> None:
    allow = parse_networks(["127.0.0.0/8"])
    assert address_allowed(ipaddress.ip_address("::127.0.0.1"), allow)


def test_urls_with_bracketed_forms_are_refused_before_any_request() -> None:
    for url in (
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fec0::1]/",
        "http://[::ffff:0:7f00:1]/",
    ):
        with pytest.raises(SsrfBlockedError, match="refused address"):
            check_url(url, [])


def test_a_refusal_names_the_setting_that_allows_the_address() -> None:
    with pytest.raises(SsrfBlockedError) as caught:
        check_url("http://127.0.0.1:9/hook", [])
    message = str(caught.value)
    assert "RAGSTREAM_WEBHOOKS__ALLOW_NETWORKS" in message and "127.0.0.1/32" in message
    assert "webhook workers" in message


def test_an_allowlisted_network_lets_its_translated_form_through() -> None:
    allow = parse_networks(["127.0.0.0/8"])
    assert address_allowed(ipaddress.ip_address("::ffff:0:7f00:1"), allow)
    assert not address_allowed(ipaddress.ip_address("::ffff:0:a00:1"), allow)
