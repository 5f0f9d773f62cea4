"""Webhooks to a local receiver that verifies Standard Webhooks signatures; retries; SSRF;
a signing key per endpoint and per tenant, rotated with an overlap (issue 15, item 10)."""

from __future__ import annotations

import base64
import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ragstream import __version__
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import WebhookAttempt, WebhookDelivery
from tests.integration.hookkit import Receiver
from workers.webhooks import endpoints, signing
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


def _enqueue(
    sessions: Any,
    webhook_id: str,
    url: str,
    payload: dict[str, Any],
    endpoint_id: str | None = None,
    tenant: str = "acme",
) -> int | None:
    return enqueue(
        sessions,
        webhook_id=webhook_id,
        tenant=tenant,
        event_type="query.answered",
        url=url,
        payload=payload,
        endpoint_id=endpoint_id,
    )


def _acme_key(sessions: Any) -> list[str]:
    """acme's callback key, created as ``POST /v1/webhooks/callback-secret`` does."""
    key = signing.create_tenant_secret(sessions, "acme")
    assert key is not None
    return [key]


def _deliver_until_final(sessions: Any, delivery_id: int, max_attempts: int = 5) -> str:
    status = "retry"
    while status == "retry":
        status, _ = run_attempt(
            sessions,
            delivery_id,
            allow=LOOPBACK,
            max_attempts=max_attempts,
            timeout_s=5,
        )
    return status


def test_500_then_200_is_one_delivery_succeeded_on_attempt_2(sessions: Any) -> None:
    receiver = Receiver([500, 200], keys=_acme_key(sessions))
    try:
        payload = {"request_id": "r1", "answer": "5432"}
        first = _enqueue(sessions, "msg_r1", receiver.url, payload)
        again = _enqueue(sessions, "msg_r1", receiver.url, payload)
        assert first is not None and again is None  # a replayed answer: still one delivery
        assert _deliver_until_final(sessions, first) == "succeeded"
        assert receiver.verified == 2
        assert [r.webhook_id for r in receiver.received] == ["msg_r1", "msg_r1"]  # stable id
        assert receiver.received[-1].payload == payload
        assert {r.user_agent for r in receiver.received} == {f"ragstream-webhooks/{__version__}"}
        with sessions() as s:
            (row,) = s.scalars(select(WebhookDelivery)).all()
            attempts = s.scalars(select(WebhookAttempt).order_by(WebhookAttempt.attempt)).all()
            assert row.status == "succeeded" and row.attempt_count == 2
            assert [(a.attempt, a.status_code) for a in attempts] == [(1, 500), (2, 200)]
        # Delivering a finished delivery again changes nothing.
        assert run_attempt(sessions, first, allow=LOOPBACK, max_attempts=5, timeout_s=5)[1] is None
    finally:
        receiver.close()


def test_delivery_fails_for_good_after_max_attempts(sessions: Any) -> None:
    receiver = Receiver([503] * 10, keys=_acme_key(sessions))
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
    receiver = Receiver(
        [], redirect_to="http://169.254.169.254/latest/meta-data/", keys=_acme_key(sessions)
    )
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


def _deliver_once(sessions: Any, delivery_id: int | None) -> tuple[str, Any]:
    assert delivery_id is not None
    return run_attempt(sessions, delivery_id, allow=LOOPBACK, max_attempts=1, timeout_s=5)


def test_each_endpoint_signs_with_its_own_key(sessions: Any) -> None:
    """Another tenant's receiver cannot verify (so cannot forge) acme's deliveries."""
    acme_hook, globex_hook = Receiver(), Receiver()
    try:
        acme = endpoints.register(sessions, "acme", acme_hook.url, ["*"], allow=LOOPBACK)
        globex = endpoints.register(sessions, "globex", globex_hook.url, ["*"], allow=LOOPBACK)
        assert acme.secret and globex.secret and acme.secret != globex.secret
        assert acme.secret.startswith("whsec_")
        assert 24 <= len(base64.b64decode(acme.secret.removeprefix("whsec_"))) <= 64
        assert endpoints.get_endpoint(sessions, "acme", acme.id).secret is None  # shown once
        acme_hook.keys, globex_hook.keys = [globex.secret], [globex.secret]
        d1 = _enqueue(sessions, "msg_k1", acme_hook.url, {"n": 1}, acme.id)
        assert _deliver_once(sessions, d1)[0] == "failed"  # 401: globex's key does not verify
        assert acme_hook.rejected == 1 and acme_hook.verified == 0
        acme_hook.keys = [acme.secret]
        d2 = _enqueue(sessions, "msg_k2", acme_hook.url, {"n": 2}, acme.id)
        assert _deliver_once(sessions, d2)[0] == "succeeded"
        d3 = _enqueue(sessions, "msg_k3", globex_hook.url, {"n": 3}, globex.id, "globex")
        assert _deliver_once(sessions, d3)[0] == "succeeded"
        assert acme_hook.verified == globex_hook.verified == 1
    finally:
        acme_hook.close()
        globex_hook.close()


def test_rotation_signs_with_both_keys_during_the_overlap_only(sessions: Any) -> None:
    old_only, new_only = Receiver(), Receiver()
    try:
        hooks = [old_only, new_only]
        created = [
            endpoints.register(sessions, "acme", r.url, ["*"], allow=LOOPBACK) for r in hooks
        ]
        for receiver, endpoint in zip(hooks, created, strict=True):
            assert endpoint.secret is not None
            receiver.keys = [endpoint.secret]
        rotated = [
            signing.rotate_endpoint_secret(sessions, "acme", e.id, overlap_s=3600) for e in created
        ]
        assert rotated[0] is not None and rotated[1] is not None
        assert rotated[0].secret != created[0].secret
        assert rotated[0].previous_valid_until is not None
        new_only.keys = [rotated[1].secret]
        for i, (receiver, endpoint) in enumerate(zip(hooks, created, strict=True)):
            d = _enqueue(sessions, f"msg_rot{i}", receiver.url, {"i": i}, endpoint.id)
            assert _deliver_once(sessions, d)[0] == "succeeded"
        # Both receivers verified: every delivery carried the old and the new signature.
        assert [len(r.received[0].signature.split(" ")) for r in hooks] == [2, 2]
        assert all(sig.startswith("v1,") for sig in old_only.received[0].signature.split(" "))
        # After the window (overlap 0 s) only the newest key signs: the old one is refused.
        again = signing.rotate_endpoint_secret(sessions, "acme", created[0].id, overlap_s=0)
        assert again is not None
        old_only.keys = [rotated[0].secret]  # the key now replaced, its window already over
        d = _enqueue(sessions, "msg_rot_late", old_only.url, {}, created[0].id)
        assert _deliver_once(sessions, d)[0] == "failed" and old_only.rejected == 1
        assert signing.rotate_endpoint_secret(sessions, "globex", created[0].id, 60) is None
    finally:
        old_only.close()
        new_only.close()


def test_callback_deliveries_use_the_tenants_key_created_on_first_use(sessions: Any) -> None:
    receiver = Receiver()
    try:
        d = _enqueue(sessions, "msg_cb", receiver.url, {"cb": 1})
        assert _deliver_once(sessions, d)[0] == "failed"  # the key was made now; nobody holds it
        assert signing.create_tenant_secret(sessions, "acme") is None  # exists: shown once
        rotated = signing.rotate_tenant_secret(sessions, "acme", overlap_s=3600)
        receiver.keys = [rotated.secret]
        d = _enqueue(sessions, "msg_cb2", receiver.url, {"cb": 2})
        assert _deliver_once(sessions, d)[0] == "succeeded"
        assert len(receiver.received[0].signature.split(" ")) == 2  # old key within its window
        globex = signing.rotate_tenant_secret(sessions, "globex", overlap_s=3600)
        assert globex.previous_valid_until is None and globex.secret != rotated.secret
    finally:
        receiver.close()


def test_a_pending_delivery_of_a_deleted_endpoint_fails_unsent(sessions: Any) -> None:
    receiver = Receiver()
    try:
        endpoint = endpoints.register(sessions, "acme", receiver.url, ["*"], allow=LOOPBACK)
        assert endpoint.secret is not None
        receiver.keys = [endpoint.secret]
        d = _enqueue(sessions, "msg_gone", receiver.url, {}, endpoint.id)
        assert endpoints.delete_endpoint(sessions, "acme", endpoint.id)
        status, result = _deliver_once(sessions, d)
        assert status == "failed" and result.error == "webhook endpoint deleted"
        assert receiver.received == [] and receiver.rejected == 0
    finally:
        receiver.close()
