"""Typed metadata on the real Elasticsearch (issue 39 item 5): numbers, booleans and dates
filter as their type, a key whose values differ in type still indexes, and an index made
before typed metadata gets the fields (``ensure``) and the values (``index rebuild``)."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Sequence

from elasticsearch import helpers

from index.schema import IGNORE_DYNAMIC_BEYOND_LIMIT, TYPED_METADATA_FIELDS, mapping
from ingest.ops import IngestOp
from ingest.rebuild import rebuild
from ragstream.settings import RetrievalSettings
from tests.integration.ingestkit import Kit
from topics.queries import Filter, QueryRequest, RangeFilter, TermFilter
from workers.retrieval.hybrid import HybridRetriever

Meta = dict[str, str | int | float | bool | None]
TEXT = "# Release notes {n}\n\nThe release notes of version {n} list the changes of that year."


def _ingest(kit: Kit, docs: dict[str, Meta]) -> None:
    ops = [
        IngestOp(
            "acme",
            doc_id,
            data=TEXT.format(n=doc_id).encode(),
            content_type="markdown",
            metadata=dict(meta),
        )
        for doc_id, meta in docs.items()
    ]
    outs = [o[0] for o in kit.pipeline.apply(ops)]
    assert all(o.status == "indexed" for o in outs), outs


def _found(kit: Kit, *filters: Sequence[Filter]) -> list[set[str]]:
    """The documents each filter list lets through (top 50 of both legs: all of them here)."""
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    requests = [
        QueryRequest(
            tenant="acme", query="release notes", deadline=deadline, top_n=50, filters=tuple(f)
        )
        for f in filters
    ]
    retriever = HybridRetriever(kit.es, kit.index.alias, RetrievalSettings())
    results = retriever.search_batch(requests, kit.embedder.embed([r.query for r in requests]))
    return [{c.doc_id for c in cands} for cands in results]


def test_numbers_booleans_and_dates_filter_as_their_type(kit: Kit) -> None:
    _ingest(
        kit,
        {
            "y9": {"year": 9, "draft": True, "published": "2024-05-01"},
            "y10": {"year": 10, "draft": False, "published": "2024-05-31T23:30:00Z"},
            "y100": {"year": 100, "draft": "true", "published": "2024-06-01"},
            "y2.5": {"year": 2.5, "draft": "no", "published": "soon"},
            "text": {"year": "abc"},  # after numbers: a different type must still index
        },
    )
    year = "metadata.year"
    gte9, lte9, draft, may, text_year, num_term = _found(
        kit,
        [RangeFilter(field=year, gte=9)],
        [RangeFilter(field=year, lte=9)],
        [TermFilter(field="metadata.draft", values=(True,))],
        [RangeFilter(field="metadata.published", gte="2024-05-01", lte="2024-05-31")],
        [TermFilter(field=year, values=("abc",))],
        [TermFilter(field=year, values=(10,))],
    )
    assert gte9 == {"y9", "y10", "y100"}
    assert lte9 == {"y9", "y2.5"}
    assert draft == {"y9", "y100"}
    assert may == {"y9", "y10"}
    assert text_year == {"text"}
    assert num_term == {"y10"}


def test_an_index_made_before_typed_metadata_gets_the_fields_then_the_values(kit: Kit) -> None:
    _ingest(kit, {"old9": {"year": 9}, "old2.5": {"year": 2.5}})
    # The index as it was made before: no typed companions, no templates; its chunks too.
    legacy = mapping(kit.index.dims, kit.index.settings, kit.index.model_id)
    for name in TYPED_METADATA_FIELDS:
        del legacy["mappings"]["properties"][name]
    del legacy["mappings"]["dynamic_templates"]
    del legacy["settings"][IGNORE_DYNAMIC_BEYOND_LIMIT]
    old = kit.index.next_physical_name()
    kit.es.indices.create(index=old, **legacy)
    chunks = []
    for hit in helpers.scan(kit.es, index=kit.index.alias, query={"query": {"match_all": {}}}):
        chunk = copy.deepcopy(hit["_source"])
        for name in TYPED_METADATA_FIELDS:
            chunk.pop(name, None)
        chunks.append(chunk)
    assert chunks and not kit.index.bulk_index(chunks, index=old).failed
    kit.es.indices.refresh(index=old)
    kit.index.swap_alias(old)
    [before] = _found(kit, [RangeFilter(field="metadata.year", gte=1)])
    assert before == set()  # nothing typed yet

    assert set(kit.index.add_missing_fields(old)) == set(TYPED_METADATA_FIELDS)
    _ingest(kit, {"new10": {"year": 10}})  # a write into the live index has the fields
    kit.index.refresh()
    [after_ensure] = _found(kit, [RangeFilter(field="metadata.year", gte=1)])
    assert after_ensure == {"new10"}

    report = rebuild(kit.index, kit.embedder)
    assert report.old_index == old
    gte9, lte9 = _found(
        kit,
        [RangeFilter(field="metadata.year", gte=9)],
        [RangeFilter(field="metadata.year", lte=9)],
    )
    assert gte9 == {"old9", "new10"}
    assert lte9 == {"old9", "old2.5"}
