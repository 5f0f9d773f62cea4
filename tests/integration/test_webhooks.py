"""Webhooks to a local receiver that verifies Standard Webhooks signatures; retries; SSRF."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import WebhookAttempt, WebhookDelivery
from tests.integration.hookkit import SECRET, Receiver
from workers.webhooks.delivery import enqueue, run_attempt
from workers.webhooks.ssrf import SsrfBlockedError, address_allowed, check_url, parse_networks

LOOPBACK = parse_networks(["127.0.0.1/32"])


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[Any]:
    url = f"sqlite:///{tmp_path / 'hooks.db'}"
    upgrade_head(url)
    engine = make_engine(url)
    yield make_session_factory(engine)
    engine.dispose()


def _enqueue(sessions: Any, webhook_id: str, url: str, payload: dict[str, Any]) -> int | None:
    return enqueue(
        sessions,
        webhook_id=webhook_id,
        tenant="acme",
        event_type="query.answered",
        url=url,
        payload=payload,
    )


def _deliver_until_final(sessions: Any, delivery_id: int, max_attempts: int = 5) -> str:
    status = "retry"
    while status == "retry":
        status, _ = run_attempt(
            sessions,
            delivery_id,
            secret=SECRET,
            allow=LOOPBACK,
            max_attempts=max_attempts,
            timeout_s=5,
        )
    return status


def test_500_then_200_is_one_delivery_succeeded_on_attempt_2(sessions: Any) -> None:
    receiver = Receiver([500, 200])
    try:
        payload = {"request_id": "r1", "answer": "5432"}
        first = _enqueue(sessions, "msg_r1", receiver.url, payload)
        again = _enqueue(sessions, "msg_r1", receiver.url, payload)
        assert first is not None and again is None  # a replayed answer: still one delivery
        assert _deliver_until_final(sessions, first) == "succeeded"
        assert receiver.verified == 2
        assert [r.webhook_id for r in receiver.received] == ["msg_r1", "msg_r1"]  # stable id
        assert receiver.received[-1].payload == payload
        with sessions() as s:
            (row,) = s.scalars(select(WebhookDelivery)).all()
            attempts = s.scalars(select(WebhookAttempt).order_by(WebhookAttempt.attempt)).all()
            assert row.status == "succeeded" and row.attempt_count == 2
            assert [(a.attempt, a.status_code) for a in attempts] == [(1, 500), (2, 200)]
        # Delivering a finished delivery again changes nothing.
        assert (
            run_attempt(
                sessions, first, secret=SECRET, allow=LOOPBACK, max_attempts=5, timeout_s=5
            )[1]
            is None
        )
    finally:
        receiver.close()


def test_delivery_fails_for_good_after_max_attempts(sessions: Any) -> None:
    receiver = Receiver([503] * 10)
    try:
        delivery = _enqueue(sessions, "msg_r2", receiver.url, {})
        assert delivery is not None
        assert _deliver_until_final(sessions, delivery, max_attempts=3) == "failed"
        with sessions() as s:
            assert s.get(WebhookDelivery, delivery).attempt_count == 3
    finally:
        receiver.close()


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]:8080/",
        "http://[::1]/hook",
        "http://192.168.1.10/",
        "http://100.64.0.1/",
        "http://localhost:9/",
        "ftp://example.com/",
        "http:///nohost",
        "http://[::1/unclosed-bracket",
        "http://127.0.0.1:99999/bad-port",
    ],
)
def test_ssrf_targets_are_refused(url: str) -> None:
    with pytest.raises(SsrfBlockedError):
        check_url(url, [])


def test_allowlist_and_ipv4_mapped_addresses() -> None:
    assert check_url("http://127.0.0.1:1/x", LOOPBACK)
    assert address_allowed(ipaddress.ip_address("::ffff:127.0.0.1"), LOOPBACK)
    assert not address_allowed(ipaddress.ip_address("::ffff:10.0.0.1"), LOOPBACK)
    assert address_allowed(ipaddress.ip_address("93.184.216.34"), [])


def test_redirect_to_a_refused_address_is_not_followed(sessions: Any) -> None:
    receiver = Receiver([], redirect_to="http://169.254.169.254/latest/meta-data/")
    try:
        delivery = _enqueue(sessions, "msg_r3", receiver.url, {"x": 1})
        assert delivery is not None
        assert _deliver_until_final(sessions, delivery) == "failed"
        with sessions() as s:
            (attempt,) = s.scalars(select(WebhookAttempt)).all()
            assert "refused address 169.254.169.254" in (attempt.error or "")
        assert json.dumps(receiver.received[0].payload) == '{"x": 1}'
    finally:
        receiver.close()
