"""Self-hosted API docs: Swagger UI from the app's own assets, a bearer scheme, typed
responses (SSE, errors, Prometheus text) in the spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.unit.apikit import answered, make_app


def test_docs_use_only_local_assets_and_they_are_served(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        html = client.get("/docs")
        assert html.status_code == 200
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
        urls = re.findall(r"""url:\s*['"]([^'"]+)['"]""", html.text)
        assert assets and all(a.startswith("/") for a in assets + urls), assets + urls
        assert "cdn" not in html.text.lower()
        for asset in assets:
            r = client.get(asset)
            assert r.status_code == 200 and r.content, asset
        assert "swagger-ui-bundle.js" in " ".join(assets)


def test_spec_has_the_bearer_scheme_sse_errors_and_prometheus_text(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <key>`",
    }  # fmt: skip
    assert schemes["apiKey"]["in"] == "header" and schemes["apiKey"]["name"] == "X-API-Key"
    query = spec["paths"]["/v1/query"]["post"]
    assert {"bearer": []} in query["security"]
    assert "text/event-stream" in query["responses"]["200"]["content"]
    assert "application/json" in query["responses"]["200"]["content"]
    chat = spec["paths"]["/v1/chat/completions"]["post"]
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    for status in ("401", "415", "422", "429", "503"):
        ref = query["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorEnvelope")
    assert "security" not in spec["paths"]["/healthz"]["get"]
    metrics = spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]  # Prometheus text, not JSON


def _spec(tmp_path: Path) -> dict[str, Any]:
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        return client.get("/openapi.json").json()  # type: ignore[no-any-return]


def test_every_operation_with_a_body_documents_the_unreadable_body_400(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    with_body = [
        (path, method)
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if "requestBody" in op
    ]
    assert len(with_body) >= 6
    for path, method in with_body:
        assert "400" in spec["paths"][path][method]["responses"], (method, path)
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        r = client.post(
            "/v1/query", content=b"\xff\xfe{", headers={"content-type": "application/json"}
        )
    assert r.status_code in (400, 422) and r.json()["error"]["code"] == "INVALID_REQUEST"


def test_created_resources_link_to_the_operations_on_them(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    ids = {
        op["operationId"]: (method, path)
        for path, item in spec["paths"].items()
        for method, op in item.items()
    }
    links = spec["paths"]["/v1/webhooks"]["post"]["responses"]["201"]["links"]
    assert {ids[link["operationId"]] for link in links.values()} == {
        ("get", "/v1/webhooks/{endpoint_id}"),
        ("delete", "/v1/webhooks/{endpoint_id}"),
        ("post", "/v1/webhooks/{endpoint_id}/rotate-secret"),
    }
    doc = spec["paths"]["/v1/documents"]["post"]["responses"]["202"]["links"]
    assert doc["GetDocument"]["parameters"] == {"doc_id": "$response.body#/doc_id"}
    query = spec["paths"]["/v1/query"]["post"]["responses"]["202"]["links"]["GetQuery"]
    assert ids[query["operationId"]] == ("get", "/v1/queries/{request_id}")
    assert "links" in spec["paths"]["/v1/ingest/jobs"]["post"]["responses"]["202"]


def test_sse_events_have_a_schema(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    native = spec["paths"]["/v1/query"]["post"]["responses"]["200"]["content"]
    event = native["text/event-stream"]["schema"]
    assert event["required"] == ["event", "data"]
    assert "replace" in event["properties"]["event"]["enum"]
    chat = spec["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert chat["text/event-stream"]["schema"]["required"] == ["data"]


def test_the_query_example_of_the_spec_is_answered(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    body = spec["paths"]["/v1/query"]["post"]["requestBody"]["content"]["application/json"]
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        r = client.post("/v1/query", json=body["example"])
    assert r.status_code == 200, r.text


def test_a_405_allows_every_method_of_the_path(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        hook = client.options("/v1/webhooks/wh_1")
        doc = client.options("/v1/documents/handbook")
        docs = client.options("/v1/documents")
        secret = client.options("/v1/webhooks/callback-secret")
    assert hook.status_code == 405
    assert set(hook.headers["allow"].split(", ")) == {"GET", "DELETE"}
    assert set(doc.headers["allow"].split(", ")) == {"GET", "DELETE"}
    assert set(docs.headers["allow"].split(", ")) == {"GET", "POST"}
    assert secret.headers["allow"] == "POST"  # not /v1/webhooks/{endpoint_id}'s GET, DELETE


def test_schema_constraints_match_what_the_server_refuses(tmp_path: Path) -> None:
    import jsonschema_rs

    spec = _spec(tmp_path)
    schemas = spec["components"]["schemas"]
    registry_spec = {"components": {"schemas": schemas}}

    def valid(name: str, body: dict[str, Any]) -> bool:
        schema = {**schemas[name], "components": registry_spec["components"]}
        return bool(jsonschema_rs.validator_for(schema).is_valid(body))

    tool_only = {"messages": [{"role": "tool", "content": "x"}]}
    assert not valid("ChatBody", tool_only)
    assert valid("ChatBody", {"messages": [{"role": "user", "content": "What is VACUUM?"}]})
    assert not valid("ChatBody", {"messages": [{"role": "user", "content": " "}]})
    assert not valid("QueryBody", {"query": "x", "callback_url": ""})
    assert valid("QueryBody", {"query": "x", "callback_url": "https://hooks.example.com/a"})
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        assert client.post("/v1/chat/completions", json=tool_only).status_code == 400
        r = client.post("/v1/query", json={"query": "x", "callback_url": ""})
        assert r.status_code == 422
        assert client.get("/v1/documents/a%01b").status_code == 422
