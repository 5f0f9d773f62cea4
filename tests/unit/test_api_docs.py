"""Self-hosted API docs: Swagger UI from the app's own assets, a bearer scheme, typed
responses (SSE, errors, Prometheus text) in the spec."""

from __future__ import annotations

import re
from pathlib import Path

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
