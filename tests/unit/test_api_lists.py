"""The list endpoints: ``GET /v1/documents``, ``/v1/ingest/jobs`` and ``/v1/queries`` are
tenant-scoped, newest first, and their cursors walk every row exactly once."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import create_key
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import Document, IngestJob, QueryLog
from tests.unit.apikit import settings_for

T0 = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)


@pytest.fixture
def client(tmp_path: Path) -> Any:
    settings = settings_for(tmp_path)
    upgrade_head(settings.database_url)
    sessions = make_session_factory(make_engine(settings.database_url))
    with sessions.begin() as s:
        for tenant, n in (("acme", 7), ("globex", 3)):
            for i in range(n):
                s.add(
                    Document(
                        tenant=tenant, doc_id=f"{tenant}-doc-{i}", version=1 + i % 2,
                        status="failed" if i == 0 else "indexed", chunk_count=i,
                        source="upload" if i % 2 else "manual", content_hash="h",
                    )
                )  # fmt: skip
                # Two jobs and two queries share each timestamp: the cursor's tie-break counts.
                at = T0 + dt.timedelta(minutes=i // 2)
                s.add(
                    IngestJob(id=f"{tenant}-job-{i}", tenant=tenant, status="succeeded",
                              total_documents=i, done_documents=i, created_at=at)
                )  # fmt: skip
                s.add(
                    QueryLog(request_id=f"{tenant}-q-{i}", tenant=tenant,
                             query=f"question {i} of {tenant}", status="answered",
                             trace={"stages": [], "tier": "evidence"}, created_at=at)
                )  # fmt: skip
    keys = {t: create_key(sessions, t, rate_per_minute=0)[0] for t in ("acme", "globex")}
    with TestClient(create_app(settings)) as c:
        c.keys = keys
        yield c


def _walk(client: Any, path: str, tenant: str, id_field: str, **params: Any) -> list[str]:
    """Every item id of ``path``'s pages (2 per page) for ``tenant``'s key."""
    seen: list[str] = []
    cursor = None
    headers = {"Authorization": f"Bearer {client.keys[tenant]}"}
    for _ in range(20):
        query = {"limit": 2, **params, **({"cursor": cursor} if cursor else {})}
        r = client.get(path, params=query, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["items"]) <= 2
        seen += [item[id_field] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the cursor never ended")


@pytest.mark.parametrize(
    ("path", "id_field", "prefix"),
    [
        ("/v1/documents", "doc_id", "doc"),
        ("/v1/ingest/jobs", "job_id", "job"),
        ("/v1/queries", "request_id", "q"),
    ],
)
def test_each_list_pages_through_its_own_tenants_rows_only_once_newest_first(
    client: Any, path: str, id_field: str, prefix: str
) -> None:
    for tenant, n in (("acme", 7), ("globex", 3)):
        seen = _walk(client, path, tenant, id_field)
        assert sorted(seen) == sorted(f"{tenant}-{prefix}-{i}" for i in range(n)), seen
        assert seen[0] == f"{tenant}-{prefix}-{n - 1}"  # newest first


def test_documents_filter_by_status_and_source(client: Any) -> None:
    assert _walk(client, "/v1/documents", "acme", "doc_id", status="failed") == ["acme-doc-0"]
    uploads = _walk(client, "/v1/documents", "acme", "doc_id", source="upload")
    assert sorted(uploads) == ["acme-doc-1", "acme-doc-3", "acme-doc-5"]
    headers = {"Authorization": f"Bearer {client.keys['acme']}"}
    assert client.get("/v1/documents?status=nope", headers=headers).status_code == 422


def test_a_list_item_carries_what_the_console_shows(client: Any) -> None:
    headers = {"Authorization": f"Bearer {client.keys['globex']}"}
    doc = client.get("/v1/documents?limit=1", headers=headers).json()["items"][0]
    assert doc["doc_id"] == "globex-doc-2" and doc["chunk_count"] == 2 and doc["version"] == 1
    assert doc["updated_at"].endswith("Z") or "+00:00" in doc["updated_at"]
    query = client.get("/v1/queries?limit=1", headers=headers).json()["items"][0]
    assert query["query"] == "question 2 of globex" and query["tier"] == "evidence"
    assert query["links"]["self"].endswith("/v1/queries/globex-q-2")
    job = client.get("/v1/ingest/jobs?limit=1", headers=headers).json()["items"][0]
    assert job["total_documents"] == 2 and job["links"]["self"] == "/v1/ingest/jobs/globex-job-2"


def test_a_forged_cursor_is_422_and_lists_need_a_key(client: Any) -> None:
    headers = {"Authorization": f"Bearer {client.keys['acme']}"}
    for path in ("/v1/documents", "/v1/ingest/jobs", "/v1/queries"):
        r = client.get(f"{path}?cursor=bm9wZQ", headers=headers)
        assert r.status_code == 422 and r.json()["error"]["code"] == "INVALID_REQUEST", r.text
        assert client.get(path).status_code == 401


def test_the_lists_are_in_the_openapi_spec(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    for path in ("/v1/documents", "/v1/ingest/jobs", "/v1/queries"):
        op = spec["paths"][path]["get"]
        assert {p["name"] for p in op["parameters"]} >= {"limit", "cursor"}
    params = {p["name"] for p in spec["paths"]["/v1/documents"]["get"]["parameters"]}
    assert {"status", "source"} <= params


def test_retry_needs_the_tenants_finished_job_with_failures(client: Any) -> None:
    acme = {"Authorization": f"Bearer {client.keys['acme']}"}
    r = client.post("/v1/ingest/jobs/acme-job-1/retry", headers=acme)
    assert r.status_code == 409 and r.json()["error"]["code"] == "CONFLICT", r.text
    r = client.post("/v1/ingest/jobs/globex-job-1/retry", headers=acme)
    assert r.status_code == 404, r.text


def test_me_names_the_keys_tenant_and_role(client: Any) -> None:
    r = client.get("/v1/me", headers={"Authorization": f"Bearer {client.keys['globex']}"})
    assert r.status_code == 200 and r.json() == {"tenant": "globex", "role": "user"}


def test_cursor_values_out_of_range_are_refused() -> None:
    from api.errors import ApiError
    from api.pages import decode_cursor, encode_cursor

    assert decode_cursor(encode_cursor([7]), (int,)) == (7,)
    at = dt.datetime(2026, 12, 1, 8, 0)
    assert decode_cursor(encode_cursor([at, "q-1"]), (dt.datetime, str)) == (at, "q-1")
    bad: list[tuple[list[Any], tuple[type, ...]]] = [
        ([2**70], (int,)),
        ([-1], (int,)),
        ([True], (int,)),
        (["x"], (int,)),
        ([at.isoformat(), "a\x00b"], (dt.datetime, str)),
    ]
    for key, kinds in bad:
        with pytest.raises(ApiError):
            decode_cursor(encode_cursor(key), kinds)


def test_every_timestamp_has_an_offset_sqlite_too(client: Any) -> None:
    """RFC 3339 (the spec's ``date-time``) needs the offset that SQLite drops (issue 25)."""
    headers = {"Authorization": f"Bearer {client.keys['acme']}"}
    stamps: list[str] = []
    doc = client.get("/v1/documents/acme-doc-3", headers=headers).json()
    stamps.append(doc["updated_at"])
    for path in ("/v1/documents", "/v1/ingest/jobs", "/v1/queries"):
        for item in client.get(path, headers=headers).json()["items"]:
            stamps += [v for k, v in item.items() if k.endswith("_at") and v is not None]
    stamps += [
        v
        for k, v in client.get("/v1/queries/acme-q-1", headers=headers).json().items()
        if k.endswith("_at") and v is not None
    ]
    assert len(stamps) > 20
    for stamp in stamps:
        assert dt.datetime.fromisoformat(stamp).utcoffset() == dt.timedelta(0), stamp


def test_a_naive_timestamp_is_sent_with_its_utc_offset() -> None:
    from api.models import DocumentOut
    from api.pages import JobSummary

    naive = dt.datetime(2026, 12, 2, 5, 0)
    doc = DocumentOut(doc_id="d", status="indexed", version=1, chunk_count=1, updated_at=naive)
    job = JobSummary(job_id="j", status="succeeded", total_documents=0, done_documents=0,
                     failed_documents=0, chunk_count=0, created_at=naive)  # fmt: skip
    for stamp in (
        doc.model_dump(mode="json")["updated_at"],
        job.model_dump(mode="json")["created_at"],
    ):
        assert dt.datetime.fromisoformat(stamp) == naive.replace(tzinfo=dt.UTC), stamp
