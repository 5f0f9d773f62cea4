"""The stream path: ingest events on Kafka through the ingest pool to results; index rebuild."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from kafka import KafkaProducer

from api.routes.documents import _document_out
from ingest.rebuild import rebuild
from ragstream.settings import PoolSettings, Settings
from tests.integration.ingestkit import Kit
from tests.integration.kafkakit import consume_all
from topics.admin import ensure_topics, make_admin
from topics.ingest import IngestRequest, IngestResult
from topics.producer import EventProducer, make_producer
from topics.registry import INGEST, INGEST_RESULTS, TopicRegistry
from topics.serde import decode, encode
from workers.pools.ingest import ingest_handler
from workers.runtime.runner import PoolRunner


def test_ingest_events_become_one_result_per_document(
    settings: Settings, kit: Kit, unique_name: Callable[[str], str]
) -> None:
    registry = TopicRegistry(unique_name("st") + ".")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    pool = PoolSettings(max_batch=8, max_wait_ms=200)
    handler = ingest_handler(kit.pipeline, settings.ingest, pool, group=unique_name("g"))
    runner = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=EventProducer(make_producer(settings.kafka)),
        registry=registry,
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    events = [
        IngestRequest(
            tenant="acme",
            doc_id="a",
            op="upsert",
            text="# A\n\nalpha document",
            content_type="markdown",
        ),
        IngestRequest(tenant="acme", doc_id="b", op="upsert", source_path="/etc/passwd"),
        IngestRequest(
            tenant="acme",
            doc_id="pg-locks",
            op="upsert",
            source_path="/usr/share/doc/postgresql-doc-15/html/runtime-config-locks.html",
        ),
        IngestRequest(
            tenant="acme",
            doc_id="a",
            op="upsert",
            text="# A\n\nalpha document",
            content_type="markdown",
        ),
        IngestRequest(tenant="acme", doc_id="a", op="delete"),
    ]
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    for e in events:
        producer.send(registry.name(INGEST), key=e.key(), value=encode(e))
    producer.flush()
    producer.close()
    records = consume_all(
        settings, registry.name(INGEST_RESULTS), lambda r: len(r) >= 5, timeout_s=90
    )
    runner.stop()
    thread.join(timeout=60)
    results = [decode(IngestResult, r.value) for r in records]
    by_request = {r.request_event_id: r for r in results}
    assert len(results) == 5
    status = [by_request[e.event_id].status for e in events]
    assert status == ["indexed", "failed", "indexed", "unchanged", "deleted"]
    assert "outside the allowed roots" in (by_request[events[1].event_id].error or "")
    assert by_request[events[2].event_id].chunk_count > 0
    assert kit.chunks("acme", "a") == []
    assert len(kit.chunks("acme", "pg-locks")) == by_request[events[2].event_id].chunk_count


def test_poison_ingest_events_fail_alone_with_their_reason(
    settings: Settings, kit: Kit, unique_name: Callable[[str], str]
) -> None:
    """Issue 26: a records file whose one record id holds a lone surrogate made its batch raise
    on every retry until it was dead-lettered, its good records with it. Now that record gets
    a ``failed`` result with the reason and the rest is indexed; an event whose own field holds
    one is schema-invalid (pydantic refuses the string) and is dead-lettered at once, naming
    the field, while the events around it are served."""
    import json

    from topics.dlq import dead_letter_context

    registry = TopicRegistry(unique_name("sp") + ".")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    pool = PoolSettings(max_batch=8, max_wait_ms=200)
    handler = ingest_handler(kit.pipeline, settings.ingest, pool, group=unique_name("g"))
    runner = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=EventProducer(make_producer(settings.kafka)),
        registry=registry,
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    records = '{"id": "j-1", "text": "Part 100 is a bolt."}\n{"id": "j-\\ud83d", "text": "x"}\n'
    events = [
        IngestRequest(tenant="acme", doc_id="d-x", op="upsert", text="a washer"),
        IngestRequest(
            tenant="acme", doc_id="recs", op="upsert", text=records, content_type="jsonl"
        ),
        IngestRequest(tenant="acme", doc_id="good", op="upsert", text="a good page"),
    ]
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    for n, e in enumerate(events):
        raw = json.loads(encode(e))
        if n == 0:
            raw["doc_id"] = "d-\ud83d"  # a producer's JSON escape carries it: "d-\\ud83d"
        producer.send(registry.name(INGEST), key=f"k{n}".encode(), value=json.dumps(raw).encode())
    producer.flush()
    producer.close()
    found = consume_all(
        settings, registry.name(INGEST_RESULTS), lambda r: len(r) >= 3, timeout_s=90
    )
    dead = consume_all(settings, registry.dlq(INGEST), lambda r: len(r) >= 1, timeout_s=30)
    runner.stop()
    thread.join(timeout=60)
    results = {r.doc_id: r for r in (decode(IngestResult, x.value) for x in found)}
    assert {d: r.status for d, r in results.items()} == {
        "recs#j-1": "indexed",
        "recs#j-\\ud83d": "failed",
        "good": "indexed",
    }
    assert "lone surrogate U+D83D" in (results["recs#j-\\ud83d"].error or "")
    assert [c["text"] for c in kit.chunks("acme", "recs#j-1")] == ["Part 100 is a bolt."]
    [letter] = dead
    assert "doc_id" in dead_letter_context(letter.headers)["error.message"]


def test_index_rebuild_swaps_the_alias_and_keeps_every_chunk(kit: Kit) -> None:
    from ingest.ops import IngestOp

    ops = [
        IngestOp(
            "acme",
            f"d{i}",
            data=f"# Doc {i}\n\nbody of document number {i}".encode(),
            content_type="markdown",
        )
        for i in range(5)
    ]
    kit.pipeline.apply(ops)
    old = kit.index.physical_index()
    before = int(kit.es.count(index=kit.index.alias)["count"])
    embedded = kit.counting.sent
    report = rebuild(kit.index, kit.embedder)
    assert report.old_index == old and report.new_index != old
    assert kit.index.physical_index() == report.new_index
    assert report.copied == before == int(kit.es.count(index=kit.index.alias)["count"])
    assert kit.counting.sent == embedded  # same model: every vector came from the cache
    hit = kit.es.search(index=kit.index.alias, query={"match": {"text": "number 3"}}, size=1)
    assert hit["hits"]["hits"][0]["_source"]["doc_id"] == "d3"


def _start_ingest_pool(
    settings: Settings, kit: Kit, unique_name: Callable[[str], str], tag: str
) -> tuple[TopicRegistry, PoolRunner[IngestRequest], threading.Thread]:
    """An ingest pool on topics of its own, one event a batch (each its own apply)."""
    registry = TopicRegistry(unique_name(tag) + ".")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    pool = PoolSettings(max_batch=1, max_wait_ms=50)
    handler = ingest_handler(kit.pipeline, settings.ingest, pool, group=unique_name("g"))
    runner = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=EventProducer(make_producer(settings.kafka)),
        registry=registry,
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    return registry, runner, thread


def _produce_and_collect(
    settings: Settings, registry: TopicRegistry, sends: list[tuple[bytes, bytes]]
) -> dict[str, list[IngestResult]]:
    """Produce ``(key, value)`` records to the ingest topic in order; each document's results,
    in the order of its results partition (results of different documents have no order
    between them: they are keyed by doc_id, so they sit in different partitions)."""
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    for key, value in sends:
        producer.send(registry.name(INGEST), key=key, value=value).get(timeout=30)
    producer.flush()
    producer.close()
    records = consume_all(
        settings, registry.name(INGEST_RESULTS), lambda r: len(r) >= len(sends), timeout_s=120
    )
    by_doc: dict[str, list[IngestResult]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        result = decode(IngestResult, r.value)
        by_doc.setdefault(result.doc_id, []).append(result)
    return by_doc


def test_a_copy_of_an_applied_event_is_a_duplicate(
    settings: Settings, kit: Kit, unique_name: Callable[[str], str]
) -> None:
    """Order by the write path: upsert v1, upsert v2, delete, then a copy of v2 (a DLQ replay
    re-publishes the same bytes) leaves the document deleted; a copy of w1 after w2 leaves w2.
    Each document's results are compared in its own partition's order."""
    registry, runner, thread = _start_ingest_pool(settings, kit, unique_name, "vg")

    def upsert(doc_id: str, words: str) -> IngestRequest:
        return IngestRequest(
            tenant="acme",
            doc_id=doc_id,
            op="upsert",
            text=f"# T\n\n{words}",
            content_type="markdown",
        )

    v1, v2 = upsert("a", "first version alpha"), upsert("a", "second version beta")
    gone = IngestRequest(tenant="acme", doc_id="a", op="delete")
    w1, w2 = upsert("b", "first version gamma"), upsert("b", "second version delta")
    sends = [v1, v2, gone, v2, w1, w2, w1]
    by_doc = _produce_and_collect(settings, registry, [(e.key(), encode(e)) for e in sends])
    runner.stop()
    thread.join(timeout=60)
    assert [r.status for r in by_doc["a"]] == ["indexed", "indexed", "deleted", "duplicate"]
    assert [r.status for r in by_doc["b"]] == ["indexed", "indexed", "duplicate"]
    late = by_doc["a"][3]
    assert late.request_event_id == v2.event_id and "applied already" in (late.error or "")
    assert kit.chunks("acme", "a") == []
    rows = kit.pipeline.registry.get_many([("acme", "a"), ("acme", "b")])
    assert (rows[("acme", "a")].status, rows[("acme", "a")].sequence) == ("deleted", 3)
    assert rows[("acme", "b")].version == 2
    # each document's record names the copy it did not apply (GET /v1/documents' last_rejected)
    for doc, copy in (("a", v2), ("b", w1)):
        rejected = _document_out(rows[("acme", doc)]).last_rejected
        assert rejected is not None, doc
        assert (rejected.event_id, rejected.status) == (copy.event_id, "duplicate")
        assert "applied already" in rejected.reason
    texts = " ".join(str(c) for c in kit.chunks("acme", "b"))
    assert "delta" in texts and "gamma" not in texts


def test_a_copy_of_a_record_without_created_at_or_event_id_stays_a_copy(
    settings: Settings, kit: Kit, unique_name: Callable[[str], str]
) -> None:
    """Records produced by hand with neither ``created_at`` nor ``event_id`` (each gets the
    Kafka record's timestamp, which a re-send renews): v1, v2, delete, then v2's bytes again.
    The document stays deleted: the copy is the same event (identified by its content)."""
    registry, runner, thread = _start_ingest_pool(settings, kit, unique_name, "nc")

    def raw(**fields: str) -> bytes:
        return json.dumps({"tenant": "acme", "doc_id": "c", **fields}).encode()

    v1 = raw(op="upsert", text="# T\n\nfirst version epsilon", content_type="markdown")
    v2 = raw(op="upsert", text="# T\n\nsecond version zeta", content_type="markdown")
    sends = [(b"c", v1), (b"c", v2), (b"c", raw(op="delete")), (b"c", v2)]
    by_doc = _produce_and_collect(settings, registry, sends)
    runner.stop()
    thread.join(timeout=60)
    assert [r.status for r in by_doc["c"]] == ["indexed", "indexed", "deleted", "duplicate"]
    assert kit.chunks("acme", "c") == []
    row = kit.pipeline.registry.get_many([("acme", "c")])[("acme", "c")]
    assert (row.status, row.sequence) == ("deleted", 3)
