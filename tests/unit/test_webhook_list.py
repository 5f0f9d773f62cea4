"""``GET /v1/webhooks`` is a list like every other (issue 39): ``{"items", "next_cursor"}``,
``limit`` and ``cursor``, oldest first, keyset pages that never repeat or skip an endpoint; the
app over a migrated SQLite database (:mod:`tests.unit.apikit`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import WebhookEndpoint
from tests.unit.apikit import answered, make_app

T0 = dt.datetime(2026, 12, 5, 9, tzinfo=dt.UTC)


def _endpoint(endpoint_id: str, tenant: str, minute: int, **extra: Any) -> WebhookEndpoint:
    return WebhookEndpoint(
        id=endpoint_id,
        tenant=tenant,
        url=f"https://hooks.example.com/{endpoint_id}",
        event_types=["*"],
        created_at=T0 + dt.timedelta(minutes=minute),
        secret="whsec_" + "x" * 32,
        **extra,
    )


def _client(tmp_path: Path) -> TestClient:
    app, fake = make_app(tmp_path, answered)
    url = fake.settings.database.url
    assert url is not None
    upgrade_head(url)
    fake.sessions = make_session_factory(make_engine(url))
    with fake.sessions.begin() as session:
        session.add_all(
            [
                _endpoint("e3", "acme", 2),
                _endpoint("e1", "acme", 0),
                _endpoint("e2b", "acme", 1),  # same instant as e2a: the id breaks the tie
                _endpoint("e2a", "acme", 1),
                _endpoint("e4", "acme", 3),
                _endpoint("gone", "acme", 4, disabled_at=T0),
                _endpoint("other", "globex", 0),
            ]
        )
    return TestClient(app)


def test_the_webhook_list_has_the_shape_of_every_list(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        body = client.get("/v1/webhooks").json()
    assert set(body) == {"items", "next_cursor"} and body["next_cursor"] is None
    assert [e["id"] for e in body["items"]] == ["e1", "e2a", "e2b", "e3", "e4"]
    assert body["items"][0]["url"] == "https://hooks.example.com/e1"
    assert "secret" not in body["items"][0]


def test_pages_follow_the_cursor_without_repeats_or_gaps(tmp_path: Path) -> None:
    seen: list[str] = []
    with _client(tmp_path) as client:
        page = client.get("/v1/webhooks", params={"limit": 2}).json()
        pages = 1
        seen += [e["id"] for e in page["items"]]
        while page["next_cursor"] is not None:
            page = client.get(
                "/v1/webhooks", params={"limit": 2, "cursor": page["next_cursor"]}
            ).json()
            pages += 1
            seen += [e["id"] for e in page["items"]]
        exact = client.get("/v1/webhooks", params={"limit": 5}).json()
    assert seen == ["e1", "e2a", "e2b", "e3", "e4"] and pages == 3
    assert exact["next_cursor"] is None and len(exact["items"]) == 5


def test_a_bad_limit_or_cursor_is_the_lists_422(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        bad_cursor = client.get("/v1/webhooks", params={"cursor": "not-a-cursor"})
        zero = client.get("/v1/webhooks", params={"limit": 0})
        too_many = client.get("/v1/webhooks", params={"limit": 201})
    for r in (bad_cursor, zero, too_many):
        assert r.status_code == 422 and r.json()["error"]["code"] == "INVALID_REQUEST", r.text


def test_the_spec_declares_the_page_shape_and_its_parameters(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/webhooks"]["get"]
    assert {p["name"] for p in op["parameters"]} == {"limit", "cursor"}
    schema = spec["components"]["schemas"]["EndpointList"]
    assert set(schema["properties"]) == {"items", "next_cursor"}
