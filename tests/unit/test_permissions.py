"""Document permissions, the logic: principals, the Elasticsearch and SQL filters, cache keys,
the ``acl`` op's contract, key principals, and the readers route's refusal."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

from api.auth import Principal, key_principals, reads_as
from api.deps import principal
from index.schema import CHUNKS_ONLY
from ingest.ops import op_from_request
from ingest.registry import DocumentRegistry
from ragstream.db.acl import from_column, to_column
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import Document
from ragstream.settings import IngestSettings, RetrievalSettings
from tests.unit.apikit import answered, make_app
from topics.acl import PrincipalError, may_read, normalise, normalise_readers
from topics.ingest import IngestRequest
from topics.queries import QueryRequest
from workers.caches import CacheKeys, exact_key
from workers.retrieval.hybrid import HybridRetriever
from workers.retrieval.query import acl_clause, es_filters

EXISTS_NOT = {"bool": {"must_not": [{"exists": {"field": "principals"}}]}}


def _q(principals: tuple[str, ...] | None, text: str = "What is the code?") -> QueryRequest:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    return QueryRequest(tenant="t", query=text, deadline=deadline, principals=principals)


@pytest.mark.parametrize(
    "bad", ["bob", "user:", "admin:x", "group:a,b", "user:a b", "*", "group:" + "x" * 129]
)
def test_a_principal_is_user_or_group_with_an_id(bad: str) -> None:
    with pytest.raises(PrincipalError, match="unknown principal"):
        normalise([bad])
    with pytest.raises(ValidationError):
        IngestRequest(tenant="t", doc_id="d", op="acl", principals=(bad,))


def test_principals_are_sorted_and_unique_and_readers_are_never_empty() -> None:
    assert normalise([" user:b", "group:a", "user:b"]) == ("group:a", "user:b")
    assert normalise_readers(None) is None
    with pytest.raises(PrincipalError, match="at least one"):
        normalise_readers([])
    with pytest.raises(ValidationError):
        IngestRequest(tenant="t", doc_id="d", op="acl", principals=())


def test_the_acl_op_carries_no_payload_and_a_delete_no_readers() -> None:
    with pytest.raises(ValidationError, match="an acl carries neither text"):
        IngestRequest(tenant="t", doc_id="d", op="acl", text="x", principals=("user:a",))
    with pytest.raises(ValidationError, match="no principals"):
        IngestRequest(tenant="t", doc_id="d", op="delete", principals=("user:a",))
    event = IngestRequest(tenant="t", doc_id="d", op="acl", principals=("user:b", "group:a"))
    op = op_from_request(event, IngestSettings())
    assert (op.op, op.principals, op.data) == ("acl", ("group:a", "user:b"), b"")
    public = op_from_request(IngestRequest(tenant="t", doc_id="d", op="acl"), IngestSettings())
    assert public.op == "acl" and public.principals is None


def test_the_es_filter_admits_unrestricted_documents_and_those_of_a_principal() -> None:
    assert acl_clause(None) is None
    assert acl_clause(()) == {"bool": {"should": [EXISTS_NOT], "minimum_should_match": 1}}
    clause = acl_clause(("user:b", "group:a", "user:b"))
    assert clause == {
        "bool": {
            "should": [{"terms": {"principals": ["group:a", "user:b"]}}, EXISTS_NOT],
            "minimum_should_match": 1,
        }
    }
    filters = es_filters("t", [], ("group:a",))
    assert filters[0] == {"term": {"tenant": {"value": "t"}}} and filters[1] == acl_clause(
        ("group:a",)
    )
    # no principals: the tenant, then chunks only (no definition entry)
    assert es_filters("t", []) == [{"term": {"tenant": {"value": "t"}}}, CHUNKS_ONLY]


def test_bm25_and_knn_both_filter_on_the_askers_principals() -> None:
    retriever = HybridRetriever(object(), "alias", RetrievalSettings())  # type: ignore[arg-type]
    searches = retriever._searches([_q(("group:eng",))], np.ones((1, 4), dtype=np.float32))
    bodies = [s for s in searches if "index" not in s]
    acl = acl_clause(("group:eng",))
    assert len(bodies) == 2
    for body in bodies:
        text = repr(body)
        assert repr(acl) in text, body  # in the BM25 bool filter and inside kNN's filter
    knn = next(b for b in bodies if "knn" in b)
    assert acl in knn["knn"]["filter"]["bool"]["filter"]


def test_the_answer_cache_keys_on_the_principal_set() -> None:
    keys = CacheKeys("cfg")
    eng, sales = _q(("group:eng",)), _q(("group:sales",))
    assert keys.of(eng, 1) != keys.of(sales, 1)
    assert keys.of(eng, 1).semantic != keys.of(sales, 1).semantic
    assert keys.of(_q(None), 1) != keys.of(_q(()), 1)  # a tenant-wide key vs no principal
    both = keys.of(_q(("user:a", "group:eng")), 1)
    assert both == keys.of(_q(("group:eng", "user:a")), 1)  # the order does not matter
    # A request without principals keeps the key it had before permissions existed.
    assert exact_key(_q(None), 1, "cfg") == keys.of(_q(None), 1).exact


def test_keys_read_as_their_principals_or_everything() -> None:
    assert key_principals([]) is None and reads_as(None) == ()
    assert reads_as(key_principals(["*"])) is None
    assert reads_as(key_principals(["user:b", "group:a"])) == ("group:a", "user:b")
    with pytest.raises(PrincipalError, match="alone"):
        key_principals(["*", "user:a"])
    with pytest.raises(PrincipalError, match="unknown principal"):
        key_principals(["alice"])


def test_may_read_is_the_same_rule_as_the_filters() -> None:
    assert may_read(None, ("group:a",)) and may_read((), None)
    assert may_read(("group:a", "user:x"), ("group:a",))
    assert not may_read((), ("group:a",)) and not may_read(("user:x",), ("group:a",))


def test_the_sql_registry_lists_only_what_the_asker_may_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    registry = DocumentRegistry(sessions)
    registry.record("t", "public")
    registry.record("t", "eng", readers=to_column(("group:eng",)))
    registry.record("t", "under", readers=to_column(("group:a_b",)))  # LIKE's _ is escaped
    registry.record("t", "both", readers=to_column(("group:eng", "user:ada")))

    def names(principals: tuple[str, ...] | None) -> set[str]:
        return {r.doc_id for r in registry.page("t", limit=10, principals=principals)}

    assert names(None) == {"public", "eng", "under", "both"}
    assert names(()) == {"public"}
    assert names(("group:eng",)) == {"public", "eng", "both"}
    assert names(("user:ada",)) == {"public", "both"}
    assert names(("group:aXb",)) == {"public"}
    with sessions() as session:
        row = session.scalars(select(Document).where(Document.doc_id == "both")).one()
        assert from_column(row.readers) == ("group:eng", "user:ada")


def test_only_a_tenant_wide_key_changes_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import api.routes.permissions as route

    produced: list[Any] = []

    async def produce(request: Any, event: Any) -> None:
        produced.append(event)

    monkeypatch.setattr(route, "produce_ingest", produce)
    app, _ = make_app(tmp_path, answered)
    app.dependency_overrides[principal] = lambda: Principal(1, "acme", principals=("group:a",))
    with TestClient(app) as client:
        r = client.put("/v1/readers/d1", json={"readers": ["group:a"]})
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"
        app.dependency_overrides[principal] = lambda: Principal(1, "acme", principals=None)
        r = client.put("/v1/readers/d1", json={"readers": ["alice"]})
        assert r.status_code == 422, r.text
        r = client.put("/v1/readers/d1", json={"readers": []})
        assert r.status_code == 422, r.text
        r = client.put("/v1/readers/a/b.md", json={"readers": ["user:b", "group:a"]})
        assert r.status_code == 202 and r.json()["op"] == "acl"
        r = client.put("/v1/readers/d2", json={"readers": None})
        assert r.status_code == 202
    assert [(e.doc_id, e.op, e.principals) for e in produced] == [
        ("a/b.md", "acl", ("group:a", "user:b")),
        ("d2", "acl", None),
    ]


def test_a_query_carries_the_keys_principals(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, answered)
    app.dependency_overrides[principal] = lambda: Principal(1, "acme", principals=("group:a",))
    with TestClient(app) as client:
        assert client.post("/v1/query", json={"query": "q?"}).status_code == 200
    assert fake.asked[-1].principals == ("group:a",)


def test_the_query_log_shows_a_query_only_to_askers_with_the_same_principals(
    tmp_path: Path,
) -> None:
    """An answer holds what its asker could read: another key reads it only if it reads the
    same documents (same principal set) or every document (a tenant-wide key)."""
    from ragstream.db.models import QueryLog
    from workers import query_log

    url = f"sqlite:///{tmp_path / 'q.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    eng = _q(("group:eng",))
    query_log.log_pending(sessions, eng.model_copy(update={"tenant": "acme"}))
    plain = _q(()).model_copy(update={"tenant": "acme"})
    query_log.log_pending(sessions, plain)
    with sessions.begin() as session:  # a row logged before permissions existed
        session.add(QueryLog(request_id="old", tenant="acme", query="q"))

    def visible(asker: tuple[str, ...] | None) -> set[str]:
        rows = query_log.page(sessions, "acme", limit=10, asker=asker)
        return {r["request_id"] for r in rows}

    assert visible(None) == {eng.request_id, plain.request_id, "old"}
    assert visible(("group:eng",)) == {eng.request_id}
    assert visible(("group:eng", "user:x")) == set()
    assert visible(()) == {plain.request_id, "old"}
    assert query_log.read(sessions, "acme", eng.request_id, ("group:sales",)) is None
    assert query_log.read(sessions, "acme", eng.request_id, ()) is None
    assert query_log.read(sessions, "acme", eng.request_id, ("group:eng",)) is not None
    assert query_log.read(sessions, "acme", eng.request_id) is not None  # operators, the CLI


def test_a_request_may_act_as_fewer_principals_never_more() -> None:
    from api.auth import ActAsError, act_as

    wide = Principal(1, "acme", principals=None)
    assert act_as(wide, "user:ada, group:eng").principals == ("group:eng", "user:ada")
    assert act_as(wide, "").principals == ()  # documents without readers only
    limited = Principal(2, "acme", principals=("group:eng", "user:ada"))
    assert act_as(limited, "user:ada").principals == ("user:ada",)
    with pytest.raises(ActAsError, match="group:sales"):
        act_as(limited, "user:ada,group:sales")
    with pytest.raises(PrincipalError, match="unknown principal"):
        act_as(wide, "alice")


def test_a_bulk_job_gives_its_readers_to_every_document(tmp_path: Path) -> None:
    from ingest import jobs
    from ingest.ops import op_from_item
    from ingest.sources import SourceFile
    from ragstream.db.models import IngestJobItem

    url = f"sqlite:///{tmp_path / 'j.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    doc = tmp_path / "a.txt"
    doc.write_text("alpha")
    files = [SourceFile(path=str(doc), doc_id="a")]
    job = jobs.create_job(sessions, "t", files, readers=("group:eng", "user:ada"))
    plain = jobs.create_job(sessions, "t", files)
    assert jobs.job_readers(sessions, job) == ("group:eng", "user:ada")
    assert jobs.job_readers(sessions, plain) is None
    with sessions() as session:
        item = session.scalars(select(IngestJobItem).where(IngestJobItem.job_id == job)).one()
    settings = IngestSettings(allowed_roots=[tmp_path], upload_root=tmp_path)
    op = op_from_item("t", item, settings, jobs.job_readers(sessions, job))
    assert op.principals == ("group:eng", "user:ada") and op.data == b"alpha"


def test_the_upload_forms_take_comma_separated_readers() -> None:
    from api.uploads import DocumentForm, JobForm

    form = DocumentForm(readers="user:ada, group:eng")
    assert form.readers_tuple() == ("group:eng", "user:ada")
    assert DocumentForm().readers_tuple() is None
    assert JobForm(readers="group:ops").readers_tuple() == ("group:ops",)
    with pytest.raises(ValidationError, match="unknown principal 'ada'"):
        DocumentForm(readers="ada")
    with pytest.raises(ValidationError, match="at least one"):
        JobForm(readers=" , ")
