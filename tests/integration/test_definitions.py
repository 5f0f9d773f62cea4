"""The definition index on real Elasticsearch, the real embedder and real manual pages: an entry
per markup kind, verification of proposed names, and the entries' lifecycle with their document
(new version, readers, delete)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

import infra
from index.schema import definition_keys
from infra.llm_service import LlmService
from ingest.ops import IngestOp
from ragstream.settings import Settings
from tests.integration.ingestkit import Kit
from topics.queries import QueryRequest
from workers.pools import components
from workers.pools.components import (
    build_definition_search,
    build_proposer,
    definition_candidates,
)
from workers.retrieval.definitions import DefinitionIndex
from workers.retrieval.hybrid import HybridRetriever
from workers.retrieval.propose import PROPOSALS, NameProposer
from workers.retrieval.query import bm25_query, es_filters

PY_HTML = Path("/usr/share/doc/python3.11/html")
PG_HTML = Path("/usr/share/doc/postgresql-doc-15/html")
PAGES = {
    "itertools": PY_HTML / "library/itertools.html",  # Sphinx dl.py.function
    "cmdline": PY_HTML / "using/cmdline.html",  # Sphinx std cmdoption / envvar
    "createindex": PG_HTML / "sql-createindex.html",  # refnamediv + varlistentry
    "resource": PG_HTML / "runtime-config-resource.html",  # varlistentry (settings)
    "strings": PG_HTML / "functions-string.html",  # function table rows
}
GLOSSARY = b"""# Plant glossary

## GX-5531 \xe2\x80\x94 the backup generator of hall B

Its fuel tank holds 400 litres.

## Terms

Cold start
: Starting the generator after more than 24 hours at rest; it takes 90 seconds.

Load bank
: A resistor array the generator is tested against every month.
"""

pytestmark = pytest.mark.skipif(
    not all(p.exists() for p in PAGES.values()), reason="the manuals are not installed (make docs)"
)


def _page(name: str) -> IngestOp:
    path = PAGES[name]
    return IngestOp("acme", name, data=path.read_bytes(), filename=path.name, source=path.name)


def _glossary(data: bytes = GLOSSARY) -> IngestOp:
    return IngestOp("acme", "glossary", data=data, content_type="markdown")


@pytest.fixture
def indexed(kit: Kit) -> Kit:
    outcomes = kit.pipeline.apply([_page(n) for n in PAGES] + [_glossary()])
    assert [o.status for [o] in outcomes] == ["indexed"] * (len(PAGES) + 1)
    kit.index.refresh()
    return kit


def test_every_markup_kind_yields_its_entries(indexed: Kit) -> None:
    def entry(doc_id: str, name: str) -> dict[str, object]:
        found = [e for e in indexed.definitions("acme", doc_id) if e["title"] == name]
        assert found, f"no entry {name!r} in {doc_id}"
        return found[0]["definition"]  # type: ignore[no-any-return]

    pairwise = entry("itertools", "itertools.pairwise")
    assert pairwise["kind"] == "function" and pairwise["anchor"] == "itertools.pairwise"
    assert pairwise["signature"] == "itertools.pairwise(iterable)"
    assert (
        pairwise["summary"] == "Return successive overlapping pairs taken from the input iterable."
    )
    assert entry("cmdline", "-m")["kind"] == "option"
    assert entry("cmdline", "PYTHONPATH")["kind"] == "envvar"
    command = entry("createindex", "CREATE INDEX")
    assert command["kind"] == "command" and command["summary"] == "define a new index"
    assert "CONCURRENTLY" in str(command["signature"])
    assert "without taking any locks" in str(entry("createindex", "CONCURRENTLY")["summary"])
    buffers = entry("resource", "shared_buffers")
    assert buffers["kind"] == "setting" and buffers["anchor"] == "GUC-SHARED-BUFFERS"
    assert buffers["signature"] == "shared_buffers (integer)"
    split_part = entry("strings", "split_part")
    assert split_part["kind"] == "function" and "→ def" in str(split_part["example"])
    assert entry("glossary", "GX-5531")["summary"] == "the backup generator of hall B"
    assert "90 seconds" in str(entry("glossary", "Cold start")["summary"])
    # The registry keeps chunks and entries; the outcome counts chunks only.
    [[again]] = indexed.pipeline.apply([_page("itertools")])
    assert again.status == "unchanged"
    assert again.chunk_count == len(indexed.chunks("acme", "itertools"))


def test_verify_keeps_only_names_the_documents_define(indexed: Kit) -> None:
    lookup = DefinitionIndex(indexed.es, indexed.index.alias)
    found = lookup.verify(
        "acme", ["itertools.pairwise", "pairwise()", "itertools.zip_pairs", "shared_buffers", ""]
    )
    assert [h.name for h in found["itertools.pairwise"]][:1] == ["itertools.pairwise"]
    assert found["itertools.pairwise"][0].exact
    assert found["itertools.pairwise"][0].page == "itertools.html#itertools.pairwise"
    assert [h.name for h in found["pairwise()"]][:1] == ["itertools.pairwise"]
    assert found["itertools.zip_pairs"] == []  # proposed, not documented: never shown
    assert found["shared_buffers"][0].doc_id == "resource"
    assert found[""] == []
    assert lookup.verify("other-tenant", ["itertools.pairwise"]) == {"itertools.pairwise": []}


def test_search_finds_the_entry_a_task_question_needs(indexed: Kit) -> None:
    lookup = DefinitionIndex(indexed.es, indexed.index.alias)
    question = "How do I build an index without locking out writes on the table?"
    vector = indexed.embedder.embed([question])[0]
    names = [h.name for h in lookup.search("acme", question, [float(x) for x in vector])]
    assert "CONCURRENTLY" in names[:3], names
    names = [h.name for h in lookup.search("acme", "get successive overlapping pairs", None)]
    assert names[0] == "itertools.pairwise", names


def test_passage_searches_never_return_a_definition_entry(indexed: Kit) -> None:
    body = bm25_query("itertools.pairwise overlapping pairs", es_filters("acme", []), 50)
    hits = indexed.es.search(index=indexed.index.alias, **body)["hits"]["hits"]
    assert hits and all("entry" not in h["_source"] for h in hits)


def test_entries_follow_their_document_version_readers_and_delete(indexed: Kit) -> None:
    lookup = DefinitionIndex(indexed.es, indexed.index.alias)
    edited = GLOSSARY.replace(b"Load bank\n: A resistor", b"Load test\n: A resistor")
    [[v2]] = indexed.pipeline.apply([_glossary(edited)])
    indexed.index.refresh()
    assert v2.status == "indexed" and v2.version == 2
    entries = indexed.definitions("acme", "glossary")
    assert {e["version"] for e in entries} == {2}
    assert lookup.verify("acme", ["Load bank"])["Load bank"] == []
    assert lookup.verify("acme", ["load test"])["load test"][0].name == "Load test"

    [[granted]] = indexed.pipeline.apply(
        [IngestOp("acme", "glossary", "acl", principals=("group:ops",))]
    )
    indexed.index.refresh()
    assert granted.status == "acl"
    assert lookup.verify("acme", ["Cold start"], ["group:sales"])["Cold start"] == []
    assert lookup.verify("acme", ["Cold start"], ["group:ops"])["Cold start"]

    [[deleted]] = indexed.pipeline.apply([IngestOp("acme", "glossary", "delete")])
    indexed.index.refresh()
    assert deleted.status == "deleted"
    assert indexed.definitions("acme", "glossary") == []
    assert lookup.verify("acme", ["Cold start"])["Cold start"] == []


def test_definitions_off_indexes_chunks_only(indexed: Kit) -> None:
    indexed.pipeline.definitions = False
    [[out]] = indexed.pipeline.apply([_page("itertools")])
    indexed.index.refresh()
    assert out.status == "indexed" and out.version == 2  # the hash no longer covers them
    assert indexed.definitions("acme", "itertools") == []
    assert len(indexed.chunks("acme", "itertools")) == out.chunk_count


def test_propose_and_verify_against_the_real_llm_server(indexed: Kit) -> None:
    """The serving LLM proposes in the OpenAI chat shape; whatever it names, only entries the
    tenant's documents define come back, marked proposed; an unknown name never does."""
    settings = Settings()
    healthy, _ = LlmService(settings).probe(2.0)
    if not healthy:
        infra.up(settings, only=["llm"])
    proposer = NameProposer(settings.llm.base_url, settings.llm.model, timeout_s=60)
    question = "How do I iterate over overlapping pairs of a list?"
    before = PROPOSALS.labels("proposed")._value.get()
    [names] = proposer.propose([question])
    assert PROPOSALS.labels("proposed")._value.get() == before + 1  # answered, not failed
    lookup = DefinitionIndex(indexed.es, indexed.index.alias)
    request = QueryRequest(
        tenant="acme", query=question, deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    )
    vector = indexed.embedder.embed([question])
    [found] = definition_candidates(lookup, [request], vector, 5, proposer)
    defined = {n for n, hits in lookup.verify("acme", names).items() if hits}
    for c in found:
        if c.metadata["proposed"]:
            assert {k for k in definition_keys(str(c.metadata["name"]))} & {
                k for n in defined for k in definition_keys(n)
            }, c.metadata
    proposer.close()

    class Fixed:
        def propose(self, questions: list[str]) -> list[list[str]]:
            return [["itertools.zip_pairs", "pairwise()"] for _ in questions]

    [found] = definition_candidates(lookup, [request], vector, 5, Fixed())  # type: ignore[arg-type]
    proposed = [c.metadata["name"] for c in found if c.metadata["proposed"]]
    assert proposed == ["itertools.pairwise"]  # the unknown name is dropped, the other verified
    [found] = definition_candidates(lookup, [request], vector, 5, Fixed(), shed=True)  # type: ignore[arg-type]
    assert not any(c.metadata["proposed"] for c in found)  # shed: searched entries only


def test_a_batch_that_waited_past_its_bound_is_answered_without_proposals(
    indexed: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retrieval pool's definition search with the real LLM server as proposer: a fresh
    batch asks it, a batch whose oldest question waited past ``propose_shed_after_s`` does not
    (searched entries only, the ``shed`` counter, and the flag that makes the answer say
    ``degraded``); a question that asks for no name is never marked."""
    settings = Settings()
    healthy, _ = LlmService(settings).probe(2.0)
    if not healthy:
        infra.up(settings, only=["llm"])
    retrieval = settings.retrieval.model_copy(
        update={
            "propose_url": settings.llm.base_url,
            "propose_model": settings.llm.model,
            "propose_timeout_s": 60.0,
            "propose_shed_after_s": 1.0,
        }
    )
    tuned = settings.model_copy(update={"retrieval": retrieval})
    made: list[NameProposer] = []  # the pool's proposer, closed after the test

    def keep(s: Settings) -> NameProposer | None:
        proposer = build_proposer(s)
        made.extend([proposer] if proposer is not None else [])
        return proposer

    monkeypatch.setattr(components, "build_proposer", keep)
    search = build_definition_search(
        tuned, HybridRetriever(indexed.es, indexed.index.alias, retrieval)
    )
    assert search is not None
    now = dt.datetime.now(dt.UTC)
    task = "How do I iterate over overlapping pairs of a list?"
    plain = "Is the backup generator tested every month?"

    def batch(age_s: float) -> list[QueryRequest]:
        made = now - dt.timedelta(seconds=age_s)
        return [
            QueryRequest(
                tenant="acme", query=q, created_at=made, deadline=now + dt.timedelta(minutes=1)
            )
            for q in (task, plain)
        ]

    vectors = indexed.embedder.embed([task, plain])
    asked, shed = (PROPOSALS.labels(o)._value.get() for o in ("proposed", "shed"))
    [found, _], flags = search(batch(0.0), vectors)
    assert flags == [False, False]
    assert PROPOSALS.labels("proposed")._value.get() == asked + 1  # the task question only
    [found, _], flags = search(batch(5.0), vectors)
    assert flags == [True, False]  # the plain question lost nothing
    assert PROPOSALS.labels("proposed")._value.get() == asked + 1  # the server was not asked
    assert PROPOSALS.labels("shed")._value.get() == shed + 1
    assert found and not any(c.metadata["proposed"] for c in found)  # searched entries only
    assert len(made) == 1
    made[0].close()
