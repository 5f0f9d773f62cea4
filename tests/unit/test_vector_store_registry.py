"""The vector-store registry on SQLite (api/vector_stores/registry.py): an attached file's
status is its ingest event's outcome in the document registry, stores and files are a
tenant's own, lists page by creation, and deletes detach."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.vector_stores.registry import VectorStoreRegistry, doc_id_of, file_id_of
from ingest.registry import DocumentRegistry
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import AppliedIngestEvent


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    url = f"sqlite:///{tmp_path / 'vs.db'}"
    upgrade_head(url)
    return make_session_factory(make_engine(url))


def _file(reg: VectorStoreRegistry, tenant: str = "t") -> str:
    row = reg.create_file(
        tenant, filename="a.md", bytes=12, purpose="assistants", content_type="markdown",
        path="/x/a.md",
    )  # fmt: skip
    return row.id


def test_a_files_status_follows_its_ingest_event(sessions: sessionmaker[Session]) -> None:
    reg = VectorStoreRegistry(sessions)
    store = reg.create_store("t", "kb", {})
    done, broken, waiting = _file(reg), _file(reg), _file(reg)
    rows = [
        reg.attach("t", store.id, done, "ev-done", {"year": 2021}),
        reg.attach("t", store.id, broken, "ev-broken", {}),
        reg.attach("t", store.id, waiting, "ev-waiting", {}),
    ]
    with sessions.begin() as s:
        s.add(
            AppliedIngestEvent(
                tenant="t", event_id="ev-done", doc_id=doc_id_of(store.id, done), sequence=1,
                status="indexed",
            )
        )  # fmt: skip
    DocumentRegistry(sessions).record_failures(
        [("t", doc_id_of(store.id, broken), "the embedder is down")]
    )
    states = reg.states("t", rows)
    assert states[done].status == "completed" and states[done].usage_bytes == 12
    assert states[broken].status == "failed" and states[broken].error == "the embedder is down"
    assert states[waiting].status == "in_progress" and states[waiting].error is None
    assert reg.searchable("t", store.id) and not reg.searchable("other", store.id)
    # attached again after the failure: in progress with the new event
    again = reg.attach("t", store.id, broken, "ev-again", {})
    assert reg.states("t", [again])[broken].status == "in_progress"


def test_a_tenant_sees_only_its_own(sessions: sessionmaker[Session]) -> None:
    reg = VectorStoreRegistry(sessions)
    store = reg.create_store("t", "kb", {"a": "b"})
    file_id = _file(reg)
    assert reg.store("other", store.id) is None and reg.file("other", file_id) is None
    assert reg.delete_store("other", store.id) is None and reg.delete_file("other", file_id) is None
    assert reg.store("t", store.id) is not None


def test_lists_page_by_creation_both_ways(sessions: sessionmaker[Session]) -> None:
    reg = VectorStoreRegistry(sessions)
    made = {reg.create_store("t", f"s{i}", {}).id for i in range(5)}
    ascending = reg.stores("t", limit=10, order="asc", after=None, before=None)
    ids = [r.id for r in ascending.rows]  # by creation time, then id
    assert set(ids) == made and not ascending.has_more
    first = reg.stores("t", limit=2, order="desc", after=None, before=None)
    assert [r.id for r in first.rows] == ids[::-1][:2] and first.has_more
    second = reg.stores("t", limit=2, order="desc", after=first.rows[-1].id, before=None)
    assert [r.id for r in second.rows] == ids[::-1][2:4] and second.has_more
    back = reg.stores("t", limit=2, order="desc", after=None, before=second.rows[0].id)
    assert [r.id for r in back.rows] == [r.id for r in first.rows]
    up = reg.stores("t", limit=2, order="asc", after=ids[1], before=None)
    assert [r.id for r in up.rows] == ids[2:4]


def test_deletes_detach_and_name_the_documents(sessions: sessionmaker[Session]) -> None:
    reg = VectorStoreRegistry(sessions)
    one, two = reg.create_store("t", "one", {}), reg.create_store("t", "two", {})
    file_id = _file(reg)
    other = _file(reg)
    for store in (one, two):
        reg.attach("t", store.id, file_id, f"ev-{store.id}", {})
    reg.attach("t", two.id, other, "ev-other", {})
    assert reg.detach("t", one.id, other) is None  # not attached there
    assert sorted(reg.delete_file("t", file_id) or []) == sorted(
        [doc_id_of(one.id, file_id), doc_id_of(two.id, file_id)]
    )
    assert reg.file("t", file_id) is None and reg.attachment("t", two.id, file_id) is None
    assert reg.delete_store("t", two.id) == [doc_id_of(two.id, other)]
    assert reg.store("t", two.id) is None and reg.delete_store("t", two.id) is None
    assert file_id_of(doc_id_of(two.id, other) + "#record-1") == other
