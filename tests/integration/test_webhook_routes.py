"""``/v1/webhooks`` routes on a small app: SSRF refusals, tenant scoping, typed errors."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.auth import create_key
from api.deps import Services
from api.errors import install_error_handlers
from api.routes import webhooks
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import DatabaseSettings, Settings, WebhookSettings
from tests.integration.hookkit import Receiver
from workers.webhooks.delivery import enqueue, run_attempt
from workers.webhooks.ssrf import parse_networks


@dataclass
class Api:
    client: TestClient
    sessions: Any
    keys: dict[str, dict[str, str]]  # tenant -> auth headers

    def as_(self, tenant: str) -> dict[str, str]:
        return self.keys[tenant]


def _app(settings: Settings, sessions: Any, client: redis.Redis) -> FastAPI:
    app = FastAPI()
    app.include_router(webhooks.router)
    install_error_handlers(app)
    app.state.services = Services(settings, sessions, client)
    return app


@pytest.fixture
def make_api(settings: Settings, tmp_path: Path) -> Iterator[Callable[..., Api]]:
    """``make(allow_networks=[], max_endpoints=20)`` -> an :class:`Api` on a private store."""
    url = f"sqlite:///{tmp_path / 'api.db'}"
    upgrade_head(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    client = redis.Redis.from_url(settings.redis.url)
    keys = {t: create_key(sessions, t)[0] for t in ("acme", "globex")}
    opened: list[TestClient] = []

    def make(allow_networks: list[str] | None = None, max_endpoints: int = 20) -> Api:
        s = settings.model_copy(
            update={
                "database": DatabaseSettings(url=url),
                "webhooks": WebhookSettings(
                    allow_networks=allow_networks or [], max_endpoints_per_tenant=max_endpoints
                ),
            }
        )
        tc = TestClient(_app(s, sessions, client))
        opened.append(tc)
        headers = {t: {"Authorization": f"Bearer {k}"} for t, k in keys.items()}
        return Api(tc, sessions, headers)

    yield make
    for tc in opened:
        tc.close()
    client.close()
    engine.dispose()


def _error(resp: Any, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error"]["code"] == code, body
    return str(body["error"]["message"])


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://localhost/",
        "http://127.0.0.1:8080/hook",
    ],
)
def test_ssrf_targets_are_refused_at_registration(make_api: Callable[..., Api], url: str) -> None:
    api = make_api()
    resp = api.client.post(
        "/v1/webhooks",
        json={"url": url, "event_types": ["query.completed"]},
        headers=api.as_("acme"),
    )
    assert "refused address" in _error(resp, 422, "INVALID_REQUEST")
    empty = {"items": [], "next_cursor": None}
    assert api.client.get("/v1/webhooks", headers=api.as_("acme")).json() == empty


def test_loopback_is_allowed_only_through_the_allowlist(make_api: Callable[..., Api]) -> None:
    api = make_api(allow_networks=["127.0.0.1/32"])
    body = {"url": "http://127.0.0.1:8080/hook", "event_types": ["*", "query.completed"]}
    resp = api.client.post("/v1/webhooks", json=body, headers=api.as_("acme"))
    assert resp.status_code == 201, resp.text
    created = resp.json()
    assert created["url"] == body["url"] and created["event_types"] == ["*"]
    # The allowlist names 127.0.0.1 only: other private ranges stay refused.
    other = {"url": "http://10.0.0.1/", "event_types": ["query.completed"]}
    _error(
        api.client.post("/v1/webhooks", json=other, headers=api.as_("acme")), 422, "INVALID_REQUEST"
    )


def test_endpoints_are_scoped_to_their_tenant(make_api: Callable[..., Api]) -> None:
    api = make_api(allow_networks=["127.0.0.1/32"])
    body = {
        "url": "http://127.0.0.1:9000/acme",
        "event_types": ["ingest.job.completed"],
        "description": "acme's hook",
    }
    created = api.client.post("/v1/webhooks", json=body, headers=api.as_("acme")).json()
    ep = created["id"]
    empty = {"items": [], "next_cursor": None}
    assert api.client.get("/v1/webhooks", headers=api.as_("globex")).json() == empty
    _error(api.client.get(f"/v1/webhooks/{ep}", headers=api.as_("globex")), 404, "NOT_FOUND")
    _error(api.client.delete(f"/v1/webhooks/{ep}", headers=api.as_("globex")), 404, "NOT_FOUND")
    mine = api.client.get(f"/v1/webhooks/{ep}", headers=api.as_("acme")).json()
    assert created["secret"].startswith("whsec_") and "secret" not in mine  # shown once
    assert mine == {k: v for k, v in created.items() if k != "secret"}
    assert mine["description"] == "acme's hook"
    _error(
        api.client.post(f"/v1/webhooks/{ep}/rotate-secret", headers=api.as_("globex")),
        404,
        "NOT_FOUND",
    )
    assert [
        e["id"] for e in api.client.get("/v1/webhooks", headers=api.as_("acme")).json()["items"]
    ] == [ep]
    deleted = api.client.delete(f"/v1/webhooks/{ep}", headers=api.as_("acme"))
    assert deleted.status_code == 204 and deleted.content == b""
    _error(api.client.get(f"/v1/webhooks/{ep}", headers=api.as_("acme")), 404, "NOT_FOUND")
    _error(api.client.delete(f"/v1/webhooks/{ep}", headers=api.as_("acme")), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    "body",
    [
        {"url": "http://127.0.0.1/", "event_types": ["query.answered"]},
        {"url": "http://127.0.0.1/", "event_types": []},
        {"url": "http://127.0.0.1/\x00", "event_types": ["*"]},
        {"url": "http://127.0.0.1/", "event_types": ["*"], "description": "a\nb"},
        {"url": "http://127.0.0.1/", "event_types": ["*"], "secret": "x"},
        {"url": "http://127.0.0.1/" + "a" * 2048, "event_types": ["*"]},
        {"url": "ftp://127.0.0.1/", "event_types": ["*"]},
        {"url": "http://[::1/", "event_types": ["*"]},
        {"url": "http://no-such-host.invalid/", "event_types": ["*"]},
        {"event_types": ["*"]},
    ],
)
def test_invalid_registrations_are_typed_422s(
    make_api: Callable[..., Api], body: dict[str, Any]
) -> None:
    api = make_api(allow_networks=["127.0.0.1/32"])
    resp = api.client.post("/v1/webhooks", json=body, headers=api.as_("acme"))
    _error(resp, 422, "INVALID_REQUEST")


def test_endpoint_limit_per_tenant_is_a_409(make_api: Callable[..., Api]) -> None:
    api = make_api(allow_networks=["127.0.0.1/32"], max_endpoints=2)
    for i in range(2):
        body = {"url": f"http://127.0.0.1:900{i}/", "event_types": ["*"]}
        assert (
            api.client.post("/v1/webhooks", json=body, headers=api.as_("acme")).status_code == 201
        )
    third = {"url": "http://127.0.0.1:9009/", "event_types": ["*"]}
    assert "limit 2" in _error(
        api.client.post("/v1/webhooks", json=third, headers=api.as_("acme")), 409, "CONFLICT"
    )
    # Another tenant has its own quota.
    assert api.client.post("/v1/webhooks", json=third, headers=api.as_("globex")).status_code == 201


def test_routes_need_an_api_key(make_api: Callable[..., Api]) -> None:
    api = make_api()
    _error(api.client.get("/v1/webhooks"), 401, "UNAUTHENTICATED")
    _error(
        api.client.get("/v1/webhooks", headers={"Authorization": "Bearer rsk_nope"}),
        401,
        "UNAUTHENTICATED",
    )


def test_delivery_status_lists_every_attempt_for_its_tenant_only(
    make_api: Callable[..., Api],
) -> None:
    api = make_api()
    made = api.client.post("/v1/webhooks/callback-secret", headers=api.as_("acme"))
    assert made.status_code == 201, made.text
    receiver = Receiver([503, 200], keys=[made.json()["secret"]])
    try:
        delivery = enqueue(
            api.sessions,
            webhook_id="msg_routes_1",
            tenant="acme",
            event_type="query.completed",
            url=receiver.url,
            payload={"type": "query.completed", "data": {}},
        )
        assert delivery is not None
        for _ in range(2):
            run_attempt(
                api.sessions,
                delivery,
                allow=parse_networks(["127.0.0.1/32"]),
                max_attempts=5,
                timeout_s=5,
            )
        resp = api.client.get("/v1/webhooks/deliveries/msg_routes_1", headers=api.as_("acme"))
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert (body["status"], body["attempt_count"], body["event_type"]) == (
            "succeeded",
            2,
            "query.completed",
        )
        assert [(a["attempt"], a["status_code"]) for a in body["attempts"]] == [(1, 503), (2, 200)]
        assert body["attempts"][0]["error"] == "HTTP 503" and body["finished_at"] is not None
        _error(
            api.client.get("/v1/webhooks/deliveries/msg_routes_1", headers=api.as_("globex")),
            404,
            "NOT_FOUND",
        )
        _error(
            api.client.get("/v1/webhooks/deliveries/msg_nope", headers=api.as_("acme")),
            404,
            "NOT_FOUND",
        )
    finally:
        receiver.close()


def test_registration_shows_a_fresh_key_once_and_rotation_returns_a_new_one(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(allow_networks=["127.0.0.1/32"])
    body = {"url": "http://127.0.0.1:9000/hook", "event_types": ["*"]}
    first = api.client.post("/v1/webhooks", json=body, headers=api.as_("acme")).json()
    second = api.client.post("/v1/webhooks", json=body, headers=api.as_("acme")).json()
    assert first["secret"] != second["secret"]
    assert len(base64.b64decode(first["secret"].removeprefix("whsec_"))) == 32
    listed = api.client.get("/v1/webhooks", headers=api.as_("acme")).json()["items"]
    assert all("secret" not in e for e in listed)
    resp = api.client.post(f"/v1/webhooks/{first['id']}/rotate-secret", headers=api.as_("acme"))
    assert resp.status_code == 200, resp.text
    rotated = resp.json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != first["secret"]
    until = dt.datetime.fromisoformat(rotated["previous_valid_until"])
    left = until - dt.datetime.now(dt.UTC)
    assert dt.timedelta(hours=23) < left <= dt.timedelta(hours=24)  # the 24 h default overlap
    _error(
        api.client.post("/v1/webhooks/nope/rotate-secret", headers=api.as_("acme")),
        404,
        "NOT_FOUND",
    )


def test_the_tenants_callback_key_is_shown_once_then_only_rotated(
    make_api: Callable[..., Api],
) -> None:
    api = make_api()
    made = api.client.post("/v1/webhooks/callback-secret", headers=api.as_("acme"))
    assert made.status_code == 201 and made.json()["secret"].startswith("whsec_")
    again = api.client.post("/v1/webhooks/callback-secret", headers=api.as_("acme"))
    assert "rotate" in _error(again, 409, "CONFLICT")
    rotated = api.client.post("/v1/webhooks/callback-secret/rotate", headers=api.as_("acme"))
    assert rotated.status_code == 200
    assert rotated.json()["secret"] != made.json()["secret"]
    assert rotated.json()["previous_valid_until"] is not None
    other = api.client.post("/v1/webhooks/callback-secret", headers=api.as_("globex"))
    assert other.status_code == 201  # each tenant its own key
    assert other.json()["secret"] not in (made.json()["secret"], rotated.json()["secret"])
    _error(api.client.post("/v1/webhooks/callback-secret"), 401, "UNAUTHENTICATED")
