"""The write path on the real model, Elasticsearch, Redis and SQL: incremental semantics."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.ops import IngestOp
from tests.integration.ingestkit import Kit

PY_HTML = Path("/usr/share/doc/python3.11/html")
PG_HTML = Path("/usr/share/doc/postgresql-doc-15/html")

DOC_V1 = b"""# Storage

## Heap files
Rows live in heap files made of 8 kB pages. Each page holds tuples and a line pointer array.

## Write-ahead log
Every change is written to the WAL before the data file; recovery replays it after a crash.

## Vacuum
VACUUM reclaims space held by dead tuples and updates the visibility map.
"""


def _op(doc_id: str, data: bytes, **kw: object) -> IngestOp:
    return IngestOp("acme", doc_id, data=data, content_type="markdown", **kw)  # type: ignore[arg-type]


def test_unchanged_reingest_writes_nothing_and_embeds_nothing(kit: Kit) -> None:
    [[first]] = kit.pipeline.apply([_op("storage", DOC_V1)])
    assert first.status == "indexed" and first.version == 1 and first.chunk_count >= 3
    writes, embedded, cache_lookups = kit.index_total(), kit.counting.sent, kit.embedder.requested
    [[again]] = kit.pipeline.apply([_op("storage", DOC_V1)])
    assert again.status == "unchanged" and again.version == 1
    assert kit.index_total() == writes  # no ES write at all
    assert kit.counting.sent == embedded  # nothing sent to the model
    assert kit.embedder.requested == cache_lookups  # not even a cache lookup


def test_edited_document_leaves_exactly_its_new_chunks(kit: Kit) -> None:
    kit.pipeline.apply([_op("storage", DOC_V1)])
    before = kit.counting.sent
    edited = DOC_V1.replace(b"8 kB pages", b"8 kB pages (BLCKSZ)")
    [[out]] = kit.pipeline.apply([_op("storage", edited)])
    assert out.status == "indexed" and out.version == 2
    chunks = kit.chunks("acme", "storage")
    assert len(chunks) == out.chunk_count
    assert {c["version"] for c in chunks} == {2}
    assert any("BLCKSZ" in c["text"] for c in chunks)
    # Only the edited section's chunk needed the model; the rest came from the cache.
    assert kit.counting.sent - before == 1
    assert kit.embedder.hits >= out.chunk_count - 1


def test_deleted_document_is_gone_from_bm25_and_knn(kit: Kit) -> None:
    kit.pipeline.apply(
        [_op("storage", DOC_V1), _op("other", b"# Other\n\nUnrelated text about cats.")]
    )
    query_vec = kit.embedder.embed(["write-ahead log replay after a crash"])[0]
    [[deleted]] = kit.pipeline.apply([IngestOp("acme", "storage", "delete")])
    assert deleted.status == "deleted"
    bm25 = kit.es.search(index=kit.index.alias, query={"match": {"text": "write-ahead log"}})
    assert bm25["hits"]["hits"] == []
    knn = kit.es.search(
        index=kit.index.alias,
        knn={
            "field": "embedding",
            "query_vector": [float(x) for x in query_vec],
            "k": 10,
            "num_candidates": 100,
            "filter": {"term": {"tenant": "acme"}},
        },
        source_excludes=["embedding"],
    )
    assert {h["_source"]["doc_id"] for h in knn["hits"]["hits"]} == {"other"}
    # Deleting again is idempotent.
    assert kit.pipeline.apply([IngestOp("acme", "storage", "delete")])[0][0].status == "deleted"


def test_one_bad_bulk_item_fails_only_its_document(kit: Kit) -> None:
    # A keyword term over 32766 bytes is refused by Elasticsearch for that item alone.
    immense = "s" * 40_000
    outs = kit.pipeline.apply(
        [
            _op("good-1", b"# A\n\nfirst good document"),
            _op("bad", b"# B\n\nthis one has an immense source", source=immense),
            _op("good-2", b"# C\n\nsecond good document"),
        ]
    )
    status = {o[0].doc_id: o[0] for o in outs}
    assert status["good-1"].status == "indexed" and status["good-2"].status == "indexed"
    assert status["bad"].status == "failed"
    assert "failed to parse field [source]" in (status["bad"].error or "")
    assert kit.chunks("acme", "bad") == []
    assert len(kit.chunks("acme", "good-1")) == 1


def test_corrupt_file_fails_only_itself(kit: Kit) -> None:
    outs = kit.pipeline.apply(
        [
            _op("good", b"# Fine\n\nA fine document."),
            IngestOp(
                "acme", "broken.pdf", data=b"%PDF-1.7\n garbage \x00\x01", filename="broken.pdf"
            ),
            IngestOp("acme", "empty.txt", data=b"   \n", filename="empty.txt"),
        ]
    )
    by_id = {o[0].doc_id: o[0] for o in outs}
    assert by_id["good"].status == "indexed"
    assert by_id["broken.pdf"].status == "failed" and by_id["broken.pdf"].error
    assert by_id["empty.txt"].status == "failed" and "empty" in (by_id["empty.txt"].error or "")


def test_cjk_and_emoji_are_chunked_within_the_limit_and_found(kit: Kit) -> None:
    cjk = "数据库系统使用预写式日志来保证崩溃后的恢复。" * 120  # ~2,600 chars, no spaces
    text = f"# 日志 📚\n\n{cjk}\n\nمرحبا بالعالم 👋🏽 emoji survive.\n".encode()
    [[out]] = kit.pipeline.apply([_op("cjk", text)])
    assert out.status == "indexed" and out.chunk_count > 1
    chunks = kit.chunks("acme", "cjk")
    assert len(chunks) == out.chunk_count
    joined = "".join(c["text"] for c in chunks)
    assert "👋🏽" in joined and "مرحبا" in joined
    for c in chunks:
        assert (
            kit.pipeline.chunker.count_tokens(
                [  # type: ignore[attr-defined]
                    (c["embed_title"] + "\n" + c["text"]) if c["embed_title"] else c["text"]
                ]
            )[0]
            <= 256
        )
    vec = kit.embedder.embed(["预写式日志 崩溃 恢复"])[0]
    hits = kit.es.search(
        index=kit.index.alias,
        knn={
            "field": "embedding",
            "query_vector": [float(x) for x in vec],
            "k": 3,
            "num_candidates": 50,
        },
        source_excludes=["embedding"],
    )
    assert hits["hits"]["hits"][0]["_source"]["doc_id"] == "cjk"


def test_updates_of_one_document_in_one_batch_apply_in_order(kit: Kit) -> None:
    outs = kit.pipeline.apply(
        [
            _op("d", b"# V\n\nversion one"),
            _op("d", b"# V\n\nversion two"),
            IngestOp("acme", "d", "delete"),
            _op("d", b"# V\n\nversion three"),
        ]
    )
    assert [o[0].status for o in outs] == ["indexed", "indexed", "deleted", "indexed"]
    chunks = kit.chunks("acme", "d")
    assert [c["text"] for c in chunks] == ["version three"]


@pytest.mark.skipif(not PY_HTML.is_dir() or not PG_HTML.is_dir(), reason="manuals not installed")
def test_a_slice_of_the_real_manuals(kit: Kit) -> None:
    pages = [PY_HTML / "library" / "functions.html", PY_HTML / "tutorial" / "datastructures.html",
             PG_HTML / "runtime-config-locks.html", PG_HTML / "limits.html"]  # fmt: skip
    ops = [
        IngestOp("acme", str(p), data=p.read_bytes(), filename=str(p), source=str(p)) for p in pages
    ]
    outs = [o[0] for o in kit.pipeline.apply(ops)]
    assert all(o.status == "indexed" for o in outs), outs
    res = kit.es.search(
        index=kit.index.alias,
        query={"match": {"text": "deadlock_timeout"}},
        source_excludes=["embedding"],
    )
    assert res["hits"]["hits"][0]["_source"]["doc_id"].endswith("runtime-config-locks.html")
    nav = kit.es.search(index=kit.index.alias, query={"match_phrase": {"text": "Quick search"}})
    assert nav["hits"]["hits"] == []


def test_records_file_reupsert_and_delete_leave_no_orphans(kit: Kit) -> None:
    three = (
        b'{"id": "a", "text": "alpha record"}\n'
        b'{"id": "b", "text": "beta record"}\n'
        b'{"id": "c", "text": "gamma record"}\n'
    )
    [outs] = kit.pipeline.apply([IngestOp("acme", "recs", data=three, content_type="jsonl")])
    assert sorted(o.doc_id for o in outs) == ["recs#a", "recs#b", "recs#c"]
    one = b'{"id": "b", "text": "beta record, edited"}\n'
    [outs] = kit.pipeline.apply([IngestOp("acme", "recs", data=one, content_type="jsonl")])
    statuses = {o.doc_id: o.status for o in outs}
    assert statuses == {"recs#b": "indexed", "recs#a": "deleted", "recs#c": "deleted"}
    assert kit.chunks("acme", "recs#a") == [] and kit.chunks("acme", "recs#c") == []
    assert [c["text"] for c in kit.chunks("acme", "recs#b")] == ["beta record, edited"]
    [outs] = kit.pipeline.apply([IngestOp("acme", "recs", "delete")])
    assert {o.doc_id for o in outs if o.status == "deleted"} >= {"recs", "recs#b"}
    assert kit.chunks("acme", "recs#b") == []


def test_a_record_id_with_a_lone_surrogate_fails_alone_on_the_real_stores(kit: Kit) -> None:
    """Issue 26: the id reached SQL and Elasticsearch and every batch it was in raised
    ``UnicodeEncodeError``; now that record fails with its reason, the rest is searchable."""
    records = (
        b'{"id": "j-1", "text": "Part 100 is a hex bolt."}\n'
        b'{"id": "j-\\ud83d", "text": "Part 200 is a washer."}\n'
        b'{"id": "j-3", "text": "Part 300 is a nut."}\n'
    )
    recs, other = kit.pipeline.apply(
        [
            IngestOp("acme", "recs", data=records, content_type="jsonl"),
            _op("other", DOC_V1),
        ]
    )
    statuses = {o.doc_id: o.status for o in recs}
    assert statuses == {"recs#j-1": "indexed", "recs#j-3": "indexed", "recs#j-\\ud83d": "failed"}
    assert other[0].status == "indexed"
    assert [c["text"] for c in kit.chunks("acme", "recs#j-3")] == ["Part 300 is a nut."]
    from ingest.registry import DocumentRegistry

    row = DocumentRegistry(kit.sessions).get_many([("acme", "recs#j-\\ud83d")])
    assert "lone surrogate U+D83D" in (row[("acme", "recs#j-\\ud83d")].error or "")


def test_a_300_row_table_is_indexed_in_whole_rows_under_its_header(kit: Kit) -> None:
    header = "| part | price |\n|---|---:|"
    rows = [f"| P-{i:04d} | {10 + i * 0.17:.2f} |" for i in range(300)]
    page = f"# Prices\n\n{header}\n" + "\n".join(rows) + "\n"
    [outs] = kit.pipeline.apply([_op("prices", page.encode())])
    assert outs[0].status == "indexed" and outs[0].chunk_count > 2
    chunks = sorted(kit.chunks("acme", "prices"), key=lambda c: c["chunk_no"])
    for chunk in chunks:
        assert chunk["text"].startswith(header + "\n| P-")
        assert all(line in rows for line in chunk["text"].split("\n")[2:])
