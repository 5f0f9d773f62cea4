"""The pipeline embeds in groups of whole documents and writes each group while the next one is
embedded: every chunk keeps its own vector, a group's write overlaps the next group's embedding,
a failed document fails alone, and an error mid-call leaves nothing it wrote behind."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ingest.index import BulkReport
from ingest.pipeline import IngestOp, IngestPipeline, embed_groups
from ingest.types import Chunk, ParsedDocument

#: A guard against a hang, never a measurement: the overlap test fails instead of blocking.
GUARD_S = 10.0


@dataclass
class Doc:
    chunks: list[str]


def test_groups_hold_whole_documents_of_at_least_min_chunks() -> None:
    docs = [Doc(["a"] * n) for n in (3, 0, 2, 5, 1, 1)]
    groups = embed_groups(docs, 4)
    assert [[len(d.chunks) for d in g] for g in groups] == [[3, 0, 2], [5], [1, 1]]
    assert [d for g in groups for d in g] == docs  # every document once, in order
    assert embed_groups(docs, 100) == [docs]
    assert embed_groups([], 4) == []
    with pytest.raises(ValueError, match="min_chunks"):
        embed_groups(docs, 0)


class Lines:
    """One chunk per line of the document's text."""

    def chunk(self, parsed: ParsedDocument) -> list[Chunk]:
        lines = [x for x in parsed.text.splitlines() if x.strip()]
        return [Chunk(i, parsed.title, x, x, 3) for i, x in enumerate(lines)]


def vector_of(text: str) -> list[float]:
    """A vector that identifies its text (so a misaligned row is caught)."""
    return [float(len(text)), float(sum(map(ord, text)) % 997), 1.0, 0.0]


@dataclass
class Embedder:
    calls: list[list[str]] = field(default_factory=list)
    second_call: threading.Event = field(default_factory=threading.Event)
    fail_on_call: int | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls.append(list(texts))
        if len(self.calls) == 2:
            self.second_call.set()
        if self.fail_on_call == len(self.calls):
            raise RuntimeError("model crashed")
        return np.asarray([vector_of(t) for t in texts], dtype=np.float32)


@dataclass
class Index:
    embedder: Embedder
    wait_for_next_embed: bool = False
    fail_text: str | None = None
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    overlapped: list[bool] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def bulk_index(self, docs: Sequence[dict[str, Any]], index: str | None = None) -> BulkReport:
        if self.wait_for_next_embed and not self.overlapped:
            # The first group's write waits until the second group's embedding has begun: it
            # can only begin if this write runs beside it.
            self.overlapped.append(self.embedder.second_call.wait(GUARD_S))
        report = BulkReport()
        for d in docs:
            if d["text"] == self.fail_text:
                report.failed[d["chunk_id"]] = "mapper_parsing_exception"
            else:
                self.docs[d["chunk_id"]] = d
                report.succeeded.append(d["chunk_id"])
        self.events.append(f"bulk {len(docs)}")
        return report

    def delete_ids(self, ids: Iterable[str]) -> BulkReport:
        ids = list(ids)
        for i in ids:
            self.docs.pop(i, None)
        self.events.append(f"delete {len(ids)}")
        return BulkReport(succeeded=ids)

    def refresh(self) -> None:
        self.events.append("refresh")

    def chunk_ids_of(self, tenant: str, doc_id: str) -> list[str]:
        return []


class Registry:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, dict[str, Any]]] = []
        self.failures: list[tuple[str, str, str]] = []

    def get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Any]:
        list(keys)
        return {}

    def children(self, tenant: str, parent: str) -> list[Any]:
        return []

    def record_many(self, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.rows.extend(rows)

    def record_failures(self, failures: list[tuple[str, str, str]]) -> None:
        self.failures.extend(failures)


def _ops(n_docs: int, lines: int) -> list[IngestOp]:
    def text(i: int) -> bytes:
        return "\n\n".join(f"doc {i} line {j}." for j in range(lines)).encode()

    return [IngestOp("t", f"d{i}", data=text(i), content_type="text") for i in range(n_docs)]


def _pipeline(group: int, **index_kw: Any) -> tuple[IngestPipeline, Embedder, Index, Registry]:
    embedder = Embedder()
    index = Index(embedder, **index_kw)
    registry = Registry()
    pipeline = IngestPipeline(
        Lines(),
        embedder,
        index,  # type: ignore[arg-type]
        registry,  # type: ignore[arg-type]
        embed_group_chunks=group,
    )
    return pipeline, embedder, index, registry


def test_every_chunk_gets_its_own_vector_across_groups() -> None:
    pipeline, embedder, index, registry = _pipeline(group=5)
    results = pipeline.apply(_ops(6, 3))
    assert [o.status for outs in results for o in outs] == ["indexed"] * 6
    assert [len(c) for c in embedder.calls] == [6, 6, 6]  # whole documents, >= 5 chunks
    assert len(index.docs) == 3 * 6
    for body in index.docs.values():
        assert body["embedding"] == vector_of(body["text"])
    timings = results[0][0].timings_ms
    assert {"embed", "index", "index_wait", "settle", "refresh"} <= set(timings)
    assert len(registry.rows) == 6


def test_a_groups_write_runs_while_the_next_group_is_embedded() -> None:
    pipeline, embedder, index, _ = _pipeline(group=3, wait_for_next_embed=True)
    results = pipeline.apply(_ops(3, 3))
    assert index.overlapped == [True]
    assert len(embedder.calls) == 3
    assert [o.status for outs in results for o in outs] == ["indexed"] * 3


def test_a_failed_chunk_fails_its_document_alone_in_any_group() -> None:
    pipeline, _, index, registry = _pipeline(group=3, fail_text="doc 2 line 1.")
    results = pipeline.apply(_ops(3, 3))
    assert [outs[0].status for outs in results] == ["indexed", "indexed", "failed"]
    assert "mapper_parsing_exception" in (results[2][0].error or "")
    assert sorted({d["doc_id"] for d in index.docs.values()}) == ["d0", "d1"]  # d2 rolled back
    assert [r[1] for r in registry.rows] == ["d0", "d1"]
    assert [f[1] for f in registry.failures] == ["d2"]


def test_an_embedding_error_mid_call_removes_what_the_call_wrote() -> None:
    pipeline, embedder, index, registry = _pipeline(group=3)
    embedder.fail_on_call = 2
    with pytest.raises(RuntimeError, match="model crashed"):
        pipeline.apply(_ops(3, 3))
    assert index.events[0] == "bulk 3"  # the first group was written...
    assert index.docs == {}  # ...and removed again
    assert "refresh" not in index.events
    assert registry.rows == [] and registry.failures == []
