"""Order by the write path, through the API and a real ingest pool process (real Kafka,
Elasticsearch, SQL): one producer's clock an hour ahead freezes nothing. Its event is refused
with a reason on ``rag.ingest.results`` and in the document's ``last_rejected``; the API's own
readers change and delete then apply, and the document's record says which change it is at.
A copy of an applied event shows in ``last_rejected`` as a ``duplicate``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch
from kafka import KafkaProducer

from tests.integration.kafkakit import consume_all
from tests.integration.stack import Stack, get_json, index_document, make_stack, wait_for
from topics.ingest import IngestResult
from topics.registry import INGEST, INGEST_RESULTS, TopicRegistry
from topics.serde import decode

pytestmark = pytest.mark.integration
TENANT = "clocks"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("order"), "order")
    s.start_pools(("ingest",))
    try:
        s.wait_ready()
        s.api()
        s.keys[TENANT] = s.key(TENANT, principals=["*"], rate_per_minute=0)
        yield s
    finally:
        s.close()


def _call(s: Stack, method: str, path: str, **kw: Any) -> httpx.Response:
    auth = {"Authorization": f"Bearer {s.keys[TENANT]}"}
    return httpx.request(method, f"{s.apis[0].url}{path}", headers=auth, timeout=30, **kw)


def _results(s: Stack, doc_id: str, n: int) -> list[IngestResult]:
    """The first ``n`` results of ``doc_id``, in its results partition's order."""
    topic = TopicRegistry(s.settings.kafka.topic_prefix).name(INGEST_RESULTS)

    def mine(records: list[Any]) -> list[IngestResult]:
        ordered = sorted(records, key=lambda r: (r.partition, r.offset))
        return [x for r in ordered if (x := decode(IngestResult, r.value)).doc_id == doc_id]

    records = consume_all(s.settings, topic, lambda r: len(mine(r)) >= n, timeout_s=120)
    return mine(records)


def test_a_clock_an_hour_ahead_is_refused_and_the_apis_revoke_and_delete_apply(
    stack: Stack,
) -> None:
    doc = "generator"
    text = "# Generator\n\nThe backup generator serial number is GX-5531."
    first = index_document(stack.apis[0].url, stack.keys[TENANT], doc, text)
    assert first["sequence"] == 1 and first["last_event_id"]
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    value = {
        "tenant": TENANT,
        "doc_id": doc,
        "op": "upsert",
        "text": "# Generator\n\nThe serial number is written an hour from now.",
        "content_type": "markdown",
        "created_at": ahead.isoformat(),
    }
    producer = KafkaProducer(bootstrap_servers=stack.settings.kafka.bootstrap_servers, acks="all")
    topic = TopicRegistry(stack.settings.kafka.topic_prefix).name(INGEST)
    producer.send(topic, key=doc.encode(), value=json.dumps(value).encode()).get(timeout=30)
    producer.close()
    refused = _results(stack, doc, 2)[1]
    assert refused.status == "refused" and "ahead of the write path's clock" in (
        refused.error or ""
    )
    assert refused.version == 1  # what is still served
    status, record = get_json(f"{stack.apis[0].url}/v1/documents/{doc}", stack.keys[TENANT])
    assert status == 200 and record["sequence"] == 1  # the document did not change ...
    rejected = record["last_rejected"]  # ... and its record says what was not applied
    assert rejected["status"] == "refused" and rejected["event_id"] == refused.request_event_id
    assert "ahead of the write path's clock" in rejected["reason"] and rejected["at"]

    r = _call(stack, "PUT", f"/v1/readers/{doc}", json={"readers": ["user:ada"]})
    assert r.status_code == 202, r.text
    revoke_id = r.json()["event_id"]
    record = wait_for(
        lambda: (
            (d := get_json(f"{stack.apis[0].url}/v1/documents/{doc}", stack.keys[TENANT])[1])
            .get("readers") == ["user:ada"] and d
        ),
        timeout_s=60,
        what="the readers change applied",
    )  # fmt: skip
    assert record["sequence"] == 2 and record["last_event_id"] == revoke_id
    assert record["last_rejected"] == rejected  # the last rejection is kept as history

    r = _call(stack, "DELETE", f"/v1/documents/{doc}")
    assert r.status_code == 202, r.text
    gone = wait_for(  # a deleted document is a 404 whose details hold its tombstone
        lambda: (
            (g := get_json(f"{stack.apis[0].url}/v1/documents/{doc}", stack.keys[TENANT]))[0]
            == 404 and g[1]
        ),
        timeout_s=60,
        what="the delete applied",
    )  # fmt: skip
    record = gone["error"]["details"][0]
    assert record["status"] == "deleted"
    assert record["sequence"] == 3 and record["last_event_id"] == r.json()["event_id"]
    assert record["last_rejected"] == rejected
    assert [x.status for x in _results(stack, doc, 4)] == ["indexed", "refused", "acl", "deleted"]
    es = Elasticsearch(stack.settings.elasticsearch.hosts)
    es.indices.refresh(index=stack.settings.elasticsearch.index_alias)
    hits = es.count(
        index=stack.settings.elasticsearch.index_alias,
        query={"bool": {"filter": [{"term": {"tenant": TENANT}}, {"term": {"doc_id": doc}}]}},
    )
    es.close()
    assert hits["count"] == 0


def test_a_copy_of_an_applied_api_write_shows_as_the_documents_last_rejected(
    stack: Stack,
) -> None:
    """A re-send of the event a ``POST /v1/documents`` made (same ``event_id``, as a producer's
    retry or a dead-letter replay sends it) is a ``duplicate``: the document is unchanged and
    ``GET /v1/documents/{id}`` names the copy in ``last_rejected``."""
    doc = "pump"
    text = "# Pump\n\nThe sump pump runs every six hours."
    first = index_document(stack.apis[0].url, stack.keys[TENANT], doc, text)
    assert first["sequence"] == 1 and first["last_rejected"] is None
    copy = {
        "event_id": first["last_event_id"],
        "tenant": TENANT,
        "doc_id": doc,
        "op": "upsert",
        "text": "# Pump\n\nA copy with other text is still the same event.",
        "content_type": "markdown",
    }
    producer = KafkaProducer(bootstrap_servers=stack.settings.kafka.bootstrap_servers, acks="all")
    topic = TopicRegistry(stack.settings.kafka.topic_prefix).name(INGEST)
    producer.send(topic, key=doc.encode(), value=json.dumps(copy).encode()).get(timeout=30)
    producer.close()
    assert [x.status for x in _results(stack, doc, 2)] == ["indexed", "duplicate"]
    status, record = get_json(f"{stack.apis[0].url}/v1/documents/{doc}", stack.keys[TENANT])
    assert status == 200
    assert (record["sequence"], record["version"]) == (1, 1)
    rejected = record["last_rejected"]
    assert rejected["status"] == "duplicate" and rejected["event_id"] == first["last_event_id"]
    assert "applied already as change 1" in rejected["reason"]
