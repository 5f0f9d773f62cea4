"""OpenAI's vector-store surface, driven end to end by the real ``openai`` client against an
API server and a real ingest pool (real Kafka, Elasticsearch, SQL): files are uploaded,
attached (ingested through ``rag.ingest``) and polled to ``completed``, then searched with a
string and a list query, a compound filter over typed attributes, a score threshold and a
second page; a detached file is gone from later searches; a filter the index cannot apply is
OpenAI's 400; another tenant's store is a 404."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from elasticsearch import Elasticsearch
from openai import OpenAI

from tests.integration.stack import Stack, get_json, make_stack, wait_for

pytestmark = pytest.mark.integration
TENANT = "vsa"
OTHER = "vsb"
DOCS: dict[str, tuple[str, dict[str, str | float | bool]]] = {
    "generator.md": (
        "# Backup generator\n\nThe backup generator serial number is GX-5531. The generator "
        "runs a weekly self-test every Monday at 04:00 and holds 200 litres of diesel.",
        {"team": "ops", "year": 2021, "reviewed": True},
    ),
    "pump.md": (
        "# Coolant pump\n\nThe coolant pump model is CP-77. The pump moves 40 litres of coolant "
        "per minute and its bearings are replaced every 2,000 hours.",
        {"team": "ops", "year": 2023, "reviewed": False},
    ),
    "cafeteria.md": (
        "# Cafeteria\n\nThe cafeteria serves lunch from 11:30 to 14:00. Soup of the day is on "
        "the board by the entrance; the generator room is not open to visitors.",
        {"team": "food", "year": 2019, "reviewed": True},
    ),
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp: Path = tmp_path_factory.mktemp("vstores")
    root = tmp / "root"
    root.mkdir()
    s = make_stack(
        tmp,
        "vstores",
        RAGSTREAM_INGEST__ALLOWED_ROOTS=json.dumps([str(root)]),
        RAGSTREAM_INGEST__UPLOAD_ROOT=str(root),
    )
    s.start_pools(("ingest",))
    try:
        s.wait_ready()
        s.api()
        s.keys[TENANT] = s.key(TENANT, principals=["*"], rate_per_minute=0)
        s.keys[OTHER] = s.key(OTHER, principals=["*"], rate_per_minute=0)
        yield s
    finally:
        s.close()


def _chunks(s: Stack, doc_id: str) -> int:
    """How many chunks of ``doc_id`` the index holds."""
    alias = s.settings.elasticsearch.index_alias
    es = Elasticsearch(s.settings.elasticsearch.url)
    try:
        es.indices.refresh(index=alias)
        return int(es.count(index=alias, query={"term": {"doc_id": doc_id}})["count"])
    finally:
        es.close()


def _client(s: Stack, tenant: str = TENANT) -> OpenAI:
    return OpenAI(base_url=f"{s.apis[0].url}/v1", api_key=s.keys[tenant], max_retries=0)


@pytest.fixture(scope="module")
def store(stack: Stack) -> dict[str, Any]:
    """A store with the three files attached and ``completed``: ``{"id", "files": {name:
    file id}}``."""
    client = _client(stack)
    vs = client.vector_stores.create(name="plant manuals", metadata={"site": "north"})
    assert vs.object == "vector_store" and vs.id.startswith("vs_") and vs.name == "plant manuals"
    files: dict[str, str] = {}
    for name, (text, attributes) in DOCS.items():
        uploaded = client.files.create(file=(name, text.encode()), purpose="assistants")
        assert uploaded.object == "file" and uploaded.id.startswith("file-")
        assert uploaded.filename == name and uploaded.bytes == len(text.encode())
        assert client.files.retrieve(uploaded.id).id == uploaded.id
        attached = client.vector_stores.files.create_and_poll(
            vector_store_id=vs.id, file_id=uploaded.id, attributes=attributes,
            poll_interval_ms=250,
        )  # fmt: skip
        assert attached.status == "completed", attached
        assert attached.object == "vector_store.file" and attached.vector_store_id == vs.id
        assert attached.attributes == attributes and attached.usage_bytes > 0
        files[name] = uploaded.id
    got = client.vector_stores.retrieve(vs.id)
    assert got.status == "completed" and got.file_counts.completed == 3
    assert got.file_counts.total == 3 and got.metadata == {"site": "north"}
    listed = client.vector_stores.files.list(vector_store_id=vs.id)
    assert {f.id for f in listed.data} == set(files.values())
    assert vs.id in {v.id for v in client.vector_stores.list().data}
    return {"id": vs.id, "files": files}


def test_a_string_query_finds_the_file_with_its_name_attributes_and_text(
    stack: Stack, store: dict[str, Any]
) -> None:
    page = _client(stack).vector_stores.search(
        vector_store_id=store["id"], query="What is the serial number of the backup generator?"
    )
    top = page.data[0]
    assert top.file_id == store["files"]["generator.md"] and top.filename == "generator.md"
    assert "GX-5531" in top.content[0].text and top.content[0].type == "text"
    assert top.attributes == DOCS["generator.md"][1]
    assert all(0 < r.score <= 1 for r in page.data)
    assert [r.score for r in page.data] == sorted((r.score for r in page.data), reverse=True)


def test_a_list_query_finds_each_querys_file(stack: Stack, store: dict[str, Any]) -> None:
    page = _client(stack).vector_stores.search(
        vector_store_id=store["id"],
        query=["backup generator serial number", "coolant pump model"],
        max_num_results=5,
    )
    found = {r.file_id for r in page.data}
    assert {store["files"]["generator.md"], store["files"]["pump.md"]} <= found
    assert page.search_query == ["backup generator serial number", "coolant pump model"]  # type: ignore[attr-defined]


def test_a_compound_filter_compares_typed_attributes(stack: Stack, store: dict[str, Any]) -> None:
    client = _client(stack)
    both = {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "team", "value": "ops"},
            {"type": "gt", "key": "year", "value": 2021},
        ],
    }
    page = client.vector_stores.search(
        vector_store_id=store["id"],
        query="litres",
        filters=both,  # type: ignore[arg-type]
    )
    assert {r.file_id for r in page.data} == {store["files"]["pump.md"]}
    either = {
        "type": "or",
        "filters": [
            {"type": "eq", "key": "team", "value": "food"},
            {"type": "in", "key": "team", "value": ["nobody"]},
        ],
    }
    page = client.vector_stores.search(
        vector_store_id=store["id"],
        query="generator",
        filters=either,  # type: ignore[arg-type]
    )
    assert {r.file_id for r in page.data} == {store["files"]["cafeteria.md"]}
    flag = {"type": "eq", "key": "reviewed", "value": False}
    page = client.vector_stores.search(
        vector_store_id=store["id"],
        query="litres",
        filters=flag,  # type: ignore[arg-type]
    )
    assert {r.file_id for r in page.data} == {store["files"]["pump.md"]}


def test_a_filter_the_index_cannot_apply_is_openais_400(
    stack: Stack, store: dict[str, Any]
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _client(stack).vector_stores.search(
            vector_store_id=store["id"],
            query="generator",
            filters={"type": "ne", "key": "team", "value": "ops"},
        )
    assert caught.value.code == "invalid_value" and caught.value.param == "filters"
    assert "never exclude" in caught.value.message


def test_a_score_threshold_leaves_out_lower_scores(stack: Stack, store: dict[str, Any]) -> None:
    client = _client(stack)
    everything = client.vector_stores.search(
        vector_store_id=store["id"], query="generator", max_num_results=20
    )
    scores = [r.score for r in everything.data]
    assert len(set(scores)) > 1, scores
    threshold = (scores[0] + scores[-1]) / 2
    kept = client.vector_stores.search(
        vector_store_id=store["id"], query="generator", max_num_results=20,
        ranking_options={"ranker": "auto", "score_threshold": threshold},
    )  # fmt: skip
    assert kept.data and len(kept.data) < len(everything.data)
    assert all(r.score >= threshold for r in kept.data)
    assert [r.score for r in kept.data] == [s for s in scores if s >= threshold]


def test_pages_follow_next_page_without_repeats(stack: Stack, store: dict[str, Any]) -> None:
    client = _client(stack)
    whole = client.vector_stores.search(
        vector_store_id=store["id"], query="litres of diesel or coolant", max_num_results=4
    )
    assert len(whole.data) >= 3
    first = client.vector_stores.search(
        vector_store_id=store["id"], query="litres of diesel or coolant", max_num_results=2
    )
    extra = first.model_extra or {}
    assert extra["has_more"] is True and extra["next_page"]
    second = client.vector_stores.search(
        vector_store_id=store["id"], query="litres of diesel or coolant", max_num_results=2,
        extra_body={"next_page": extra["next_page"]},
    )  # fmt: skip
    texts = [r.content[0].text for r in (*first.data, *second.data)]
    assert texts == [r.content[0].text for r in whole.data][: len(texts)]
    with pytest.raises(openai.BadRequestError) as caught:  # a cursor of another search
        client.vector_stores.search(
            vector_store_id=store["id"], query="pump", max_num_results=2,
            extra_body={"next_page": extra["next_page"]},
        )  # fmt: skip
    assert caught.value.param == "next_page"


def test_search_mode_keyword_and_vector_rank_alone(stack: Stack, store: dict[str, Any]) -> None:
    client = _client(stack)
    for mode in ("keyword", "vector"):
        page = client.vector_stores.search(
            vector_store_id=store["id"], query="coolant pump model CP-77",
            extra_body={"search_mode": mode},
        )  # fmt: skip
        assert page.data[0].file_id == store["files"]["pump.md"], mode


def test_a_file_the_ingest_pool_cannot_read_fails_with_its_reason(
    stack: Stack, store: dict[str, Any]
) -> None:
    client = _client(stack)
    text = "# Boiler\n\nThe boiler's relief valve opens at 3 bar."
    uploaded = client.files.create(file=("boiler.md", text.encode()), purpose="assistants")
    root = stack.settings.ingest.upload_root
    for stored in (root / TENANT / "_uploads" / "documents").iterdir():
        if stored.read_bytes() == text.encode():
            stored.unlink()  # lost after the upload: the pool cannot read it
    vs = client.vector_stores.create(name="broken")
    attached = client.vector_stores.files.create_and_poll(
        vector_store_id=vs.id, file_id=uploaded.id, poll_interval_ms=250
    )
    assert attached.status == "failed" and attached.last_error is not None, attached
    assert "ingest failed" in attached.last_error.message, attached.last_error
    counted = client.vector_stores.retrieve(vs.id)
    assert counted.file_counts.failed == 1 and counted.status == "completed"
    assert client.vector_stores.search(vector_store_id=vs.id, query="boiler").data == []


def test_another_tenant_sees_no_store(stack: Stack, store: dict[str, Any]) -> None:
    other = _client(stack, OTHER)
    with pytest.raises(openai.NotFoundError):
        other.vector_stores.retrieve(store["id"])
    with pytest.raises(openai.NotFoundError):
        other.vector_stores.search(vector_store_id=store["id"], query="generator")
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(store["files"]["pump.md"])


def test_a_store_and_a_files_attributes_are_updated(stack: Stack, store: dict[str, Any]) -> None:
    client = _client(stack)
    renamed = client.vector_stores.update(store["id"], name="plant", metadata={"site": "south"})
    assert renamed.name == "plant" and renamed.metadata == {"site": "south"}
    cafeteria = store["files"]["cafeteria.md"]
    attributes = {**DOCS["cafeteria.md"][1], "floor": 2}
    updated = client.vector_stores.files.update(
        file_id=cafeteria, vector_store_id=store["id"], attributes=attributes
    )
    assert updated.attributes == attributes
    done = client.vector_stores.files.poll(
        cafeteria, vector_store_id=store["id"], poll_interval_ms=250
    )
    assert done.status == "completed"
    page = client.vector_stores.search(
        vector_store_id=store["id"], query="lunch",
        filters={"type": "gte", "key": "floor", "value": 2},
    )  # fmt: skip
    assert [r.file_id for r in page.data] == [cafeteria] * len(page.data) and page.data
    assert page.data[0].attributes == attributes
    listed = {f.id for f in client.files.list(purpose="assistants")}
    assert set(store["files"].values()) <= listed


def test_a_detached_file_is_gone_from_later_searches(stack: Stack, store: dict[str, Any]) -> None:
    # Last in this module: it changes the store.
    client = _client(stack)
    generator = store["files"]["generator.md"]
    query = "What is the serial number of the backup generator?"
    before = client.vector_stores.search(vector_store_id=store["id"], query=query)
    assert _chunks(stack, f"{store['id']}/{generator}") > 0
    assert before.data[0].file_id == generator
    gone = client.vector_stores.files.delete(vector_store_id=store["id"], file_id=generator)
    assert gone.deleted and gone.id == generator
    after = client.vector_stores.search(vector_store_id=store["id"], query=query)
    assert generator not in {r.file_id for r in after.data}
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.files.retrieve(vector_store_id=store["id"], file_id=generator)
    # ... and its document is deleted by the ingest pool: gone from BM25 and kNN
    doc = f"{stack.apis[0].url}/v1/documents/{store['id']}/{generator}"
    wait_for(lambda: get_json(doc, stack.keys[TENANT])[0] == 404, 60, what="document deleted")
    assert _chunks(stack, f"{store['id']}/{generator}") == 0
    assert client.files.retrieve(generator).id == generator  # the file itself stays
    assert client.files.delete(generator).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(generator)
    assert client.vector_stores.delete(store["id"]).deleted
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve(store["id"])
