"""Hybrid retrieval on the real model and Elasticsearch: recall of each leg, batching, filters,
tenant isolation and deletes."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from ingest.ops import IngestOp
from ragstream.settings import KafkaSettings, RetrievalSettings
from tests.integration.ingestkit import Kit
from topics.queries import Filter, QueryRequest, RangeFilter, TermFilter
from topics.retrieved import Candidate, RetrievedCandidates
from topics.serde import encode
from workers.retrieval.hybrid import HybridRetriever, QueryRejectedError

DOCS: dict[str, tuple[str, dict[str, str | int]]] = {
    "wal": (
        "# Durability\n\nEvery change is first appended to the write-ahead log and flushed to "
        "stable storage before the data pages are modified. After a power loss, recovery "
        "replays the log so committed transactions survive.",
        {"team": "db", "year": 2019},
    ),
    "vacuum": (
        "# Space reclamation\n\nVACUUM reclaims storage occupied by dead tuples and updates "
        "the visibility map so index-only scans can skip heap fetches.",
        {"team": "db", "year": 2021},
    ),
    "frob": (
        "# Legacy switches\n\nSetting FROBNICATOR_ZQX9 to on enables the legacy path of the "
        "scheduler. It is kept for compatibility only.",
        {"team": "infra", "year": 2023},
    ),
    "cats": (
        "# Pets\n\nCats sleep for most of the day and groom themselves with their rough tongues.",
        {"team": "zoo", "year": 2020},
    ),
    "tls": (
        "# Encryption\n\nConnections can be encrypted with TLS certificates signed by a "
        "trusted authority; clients verify the server's host name.",
        {"team": "infra", "year": 2022},
    ),
}


def _ingest(kit: Kit, tenant: str, docs: dict[str, tuple[str, dict[str, str | int]]]) -> None:
    ops = [
        IngestOp(
            tenant,
            doc_id,
            data=text.encode(),
            content_type="markdown",
            source=f"kb://{tenant}/{doc_id}",
            metadata=dict(meta),
        )
        for doc_id, (text, meta) in docs.items()
    ]
    outs = [o[0] for o in kit.pipeline.apply(ops)]
    assert all(o.status == "indexed" for o in outs), outs


def _request(text: str, tenant: str = "acme", filters: Sequence[Filter] = ()) -> QueryRequest:
    return QueryRequest(
        tenant=tenant,
        query=text,
        deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1),
        top_n=10,
        filters=tuple(filters),
    )


def _search(kit: Kit, requests: Sequence[QueryRequest]) -> list[list[Candidate]]:
    retriever = HybridRetriever(kit.es, kit.index.alias, RetrievalSettings())
    vectors = kit.embedder.embed([r.query for r in requests])
    return retriever.search_batch(requests, vectors)


def _docs(cands: Sequence[Candidate]) -> list[str]:
    return [c.doc_id for c in cands]


@pytest.fixture
def acme(kit: Kit) -> Kit:
    _ingest(kit, "acme", DOCS)
    return kit


def test_paraphrase_found_by_knn_and_rare_term_by_bm25(acme: Kit) -> None:
    paraphrase = _request("how do committed transactions survive when the power goes out?")
    rare = _request("FROBNICATOR_ZQX9")
    semantic, exact = _search(acme, [paraphrase, rare])
    assert "wal" in _docs(semantic[:3])
    top_wal = next(c for c in semantic if c.doc_id == "wal")
    assert top_wal.knn_rank == 1
    assert "frob" in _docs(exact[:3])
    top_frob = next(c for c in exact if c.doc_id == "frob")
    assert top_frob.bm25_rank == 1
    assert top_frob.title and top_frob.source == "kb://acme/frob"
    assert top_frob.metadata == {}  # no stage after retrieval reads it (CANDIDATE_EXCLUDES)
    assert all(a.score >= b.score for a, b in itertools.pairwise(exact))


def test_sixteen_queries_are_one_msearch(acme: Kit) -> None:
    questions = ["write-ahead log", "dead tuples", "TLS host name", "cats grooming"] * 4
    requests = [_request(q) for q in questions]
    retriever = HybridRetriever(acme.es, acme.index.alias, RetrievalSettings())
    results = retriever.search_batch(requests, acme.embedder.embed(questions))
    assert retriever.msearch_calls == 1
    assert len(results) == 16
    assert [r[0].doc_id for r in results[:4]] == ["wal", "vacuum", "tls", "cats"]
    assert all(len(r) <= 10 for r in results)


HOSTILE_FILTERS: list[list[Filter]] = [
    [TermFilter(field="doc_id", values=("secret",))],
    [TermFilter(field="doc_id", values=("*", "secret*", "a OR tenant:globex", '\\" }'))],
    [TermFilter(field="metadata.team", values=("*", "?", "globex*", '{"match_all":{}}'))],
    [RangeFilter(field="doc_id", gte="", lte="\uffff")],
    [RangeFilter(field="metadata.year", gte="0", lte="9999")],
    [RangeFilter(field="source", gte="kb://", lte="kb://~")],
    [],
]


@pytest.mark.parametrize("filters", HOSTILE_FILTERS)
def test_tenant_isolation_under_hostile_filters(kit: Kit, filters: list[Filter]) -> None:
    _ingest(kit, "acme", DOCS)
    globex = {**DOCS, "secret": ("# Secret\n\nGlobex payroll: write-ahead log of salaries.", {})}
    _ingest(kit, "globex", {k: (t.replace("#", "# Globex", 1), m) for k, (t, m) in globex.items()})
    globex_ids = {c["chunk_id"] for d in globex for c in kit.chunks("globex", d)}
    acme_ids = {c["chunk_id"] for d in DOCS for c in kit.chunks("acme", d)}
    assert globex_ids and acme_ids and not globex_ids & acme_ids
    questions = ["Globex payroll salaries secret", "write-ahead log", "*", "tenant:globex"]
    results = _search(kit, [_request(q, filters=filters) for q in questions])
    for cands in results:
        found = {c.chunk_id for c in cands}
        assert not found & globex_ids
        assert found <= acme_ids


def test_metadata_term_and_range_filters(acme: Kit) -> None:
    q = "database storage and logs"
    by_team, by_year, both = _search(
        acme,
        [
            _request(q, filters=[TermFilter(field="metadata.team", values=("infra",))]),
            _request(q, filters=[RangeFilter(field="metadata.year", gte="2021", lte="2022")]),
            _request(
                q,
                filters=[
                    TermFilter(field="metadata.team", values=("db", "zoo")),
                    RangeFilter(field="metadata.year", lte="2020"),
                ],
            ),
        ],
    )
    assert set(_docs(by_team)) == {"frob", "tls"}
    assert set(_docs(by_year)) == {"vacuum", "tls"}
    assert set(_docs(both)) == {"wal", "cats"}


def test_deleted_document_never_appears(acme: Kit) -> None:
    [[out]] = acme.pipeline.apply([IngestOp("acme", "wal", "delete")])
    assert out.status == "deleted"
    [cands] = _search(acme, [_request("write-ahead log replay after power loss")])
    assert cands and "wal" not in _docs(cands)


def test_a_search_elasticsearch_refuses_names_its_request(acme: Kit) -> None:
    good, bad = _request("cats"), _request("dogs")
    retriever = HybridRetriever(acme.es, acme.index.alias, RetrievalSettings())
    vectors = np.zeros((2, 7), dtype=np.float32)  # wrong dimension: ES answers 400 per search
    with pytest.raises(QueryRejectedError, match=good.request_id) as info:
        retriever.search_batch([good, bad], vectors)
    assert info.value.position == 0 and retriever.msearch_calls == 1


def test_optimize_merges_the_index_into_one_segment(
    acme: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from ingest.cli import index_app
    from ingest.index import segment_stats
    from ragstream.settings import get_settings

    _ingest(acme, "acme", {"extra": ("# Extra\n\nA second segment after a refresh.", {})})
    acme.pipeline.apply([IngestOp("acme", "wal", "delete")])
    acme.index.refresh()
    before = segment_stats(acme.es, acme.index.alias)
    assert before["segments"] >= 2 and before["deleted_docs"] >= 1  # something to merge
    monkeypatch.setenv("RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS", acme.index.alias)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(index_app, ["optimize"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    after = segment_stats(acme.es, acme.index.alias)
    assert after["segments"] == 1 and after["docs"] == before["docs"]
    # Soft deletes younger than the shard's retention lease (seconds here) survive a merge;
    # the manuals' 20k deletes, hours old, all went (docs/operations.md, Ingest jobs and the index).
    assert after["deleted_docs"] <= before["deleted_docs"]
    assert f"-> {after['segments']} segments" in " ".join(result.output.split())
    [cands] = _search(acme, [_request("write-ahead log replay after power loss")])
    assert cands and "wal" not in _docs(cands)
    assert segment_stats(acme.es, "no-such-alias-anywhere") == {}


def test_no_index_yet_is_no_model_mismatch(kit: Kit, unique_name: Callable[[str], str]) -> None:
    # A fresh deployment starts the retrieval pool before the first ingest creates the index.
    retriever = HybridRetriever(kit.es, unique_name("noindex"), RetrievalSettings())
    retriever.check_model("all-MiniLM-L6-v2@x", 384)  # no error: nothing to compare with


def test_a_chunk_inside_a_definition_carries_the_part_before_it_from_the_term(kit: Kit) -> None:
    sentences = " ".join(
        f"Workload {i} of the scheduler keeps its queue in memory until the budget is spent."
        for i in range(40)
    )
    text = f"# Memory\n\nMemory budget (integer)\n\n{sentences} The default is 64 megabytes."
    _ingest(kit, "acme", {"budget": (text, {"team": "db"})})
    chunks = {c["chunk_id"]: c for c in kit.chunks("acme", "budget")}
    assert len(chunks) >= 3  # the description runs over several chunks
    [found] = _search(kit, [_request("What is the default memory budget of the scheduler?")])
    no = {c.chunk_id: chunks[c.chunk_id]["chunk_no"] for c in found}
    assert sorted(no.values())[:3] == [0, 1, 2]
    second = next(c for c in found if no[c.chunk_id] == 1)
    p = second.preceding
    assert p is not None
    before = chunks[p.chunk_id]
    assert before["chunk_no"] == 0
    assert before["text"][p.start : p.start + len(p.text)] == p.text
    assert p.text.startswith("Memory budget (integer)")
    rest = before["text"][p.start + len(p.text) :].rstrip()
    assert len(rest) == p.overlap and second.text.lstrip().startswith(rest)
    # The chunk before the third holds no term: the third is read as it is.
    assert all(c.preceding is None for c in found if no[c.chunk_id] != 1)


def test_candidates_of_documents_with_large_metadata_fit_on_the_retrieved_topic(kit: Kit) -> None:
    # Four documents whose metadata is 400 KB each: candidates that carried it would make a
    # rag.retrieved event of 1.6 MB, over the producer's max_request_size (1 MiB).
    big: dict[str, str | int] = {f"note{k}": "x" * 10_000 for k in range(40)}
    big["team"] = "audit"
    docs = {
        f"big{i}": (f"# Big {i}\n\nThe quarterly zebra audit report number {i}.", big)
        for i in range(4)
    }
    _ingest(kit, "acme", docs)
    [cands] = _search(kit, [_request("zebra audit report")])
    assert {c.doc_id for c in cands} >= set(docs)
    assert all(c.metadata == {} for c in cands)
    event = RetrievedCandidates(
        tenant="acme", request=_request("zebra audit report"), candidates=tuple(cands)
    )
    assert len(encode(event)) < KafkaSettings().max_request_size
    # Filters still read the metadata, in Elasticsearch.
    team = TermFilter(field="metadata.team", values=("audit",))
    [audited] = _search(kit, [_request("zebra audit report", filters=[team])])
    assert {c.doc_id for c in audited} == set(docs)
