"""Context expansion: a chunk that starts inside a definition's description is read with the part
of the chunk before it from the term on (``continued_definition`` finds it, retrieval fetches it
in one ``_mget``, the evidence selector reads it and quotes every unit from its own chunk)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from elasticsearch import ApiError

from index.schema import chunk_id
from ragstream.errors import TransientError
from ragstream.settings import RetrievalSettings
from tests.unit.test_evidence_defaults import CACHE_HEAD, CACHE_NEXT, CACHE_TAIL, CACHE_TERM, SERVED
from tests.unit.test_retrieval_query import _query
from topics.retrieved import Candidate, Preceding
from workers.evidence import select
from workers.evidence.answer import AnswerPolicy, compose
from workers.evidence.segment import continued_definition
from workers.evidence.select import EvidenceSelector
from workers.retrieval.hybrid import HybridRetriever

#: The chunk before: another definition, then the start of effective_cache_size's, whose last
#: sentences (CACHE_TAIL) the next chunk starts with (the chunker's overlap).
BEFORE = "shared_buffers (integer)\n\nSets the amount of memory for shared buffers.\n\n"
PREVIOUS = BEFORE + CACHE_TERM + CACHE_HEAD + CACHE_TAIL
NEXT = CACHE_TAIL + CACHE_NEXT


def test_the_part_a_chunk_continues_runs_from_the_last_term_before_it() -> None:
    part = continued_definition(PREVIOUS, "  " + NEXT, 1200)
    assert part is not None
    assert PREVIOUS[part.start : part.end] == CACHE_TERM + CACHE_HEAD
    assert part.overlap == len(CACHE_TAIL.rstrip())
    assert NEXT.startswith(PREVIOUS[part.end :][: part.overlap])


@pytest.mark.parametrize(
    ("previous", "text", "max_chars"),
    [
        (PREVIOUS, NEXT, 40),  # the part is longer than allowed
        (PREVIOUS, "The default is 4 gigabytes (4GB), whatever the chunk before says.", 1200),
        (PREVIOUS, CACHE_TAIL[:30], 1200),  # too short to be found for sure
        (BEFORE + CACHE_TERM + CACHE_HEAD, CACHE_TERM + CACHE_HEAD, 1200),  # starts with a term
        (CACHE_HEAD + CACHE_TAIL, NEXT, 1200),  # no term before it
        ("The basic usage is:\n\npsql -X -f dumpfile postgres\n\n" + CACHE_TAIL, NEXT, 1200),
        (PREVIOUS + "More words.", NEXT, 1200),  # the chunk before does not end as it starts
        ("Note\n\n" + CACHE_HEAD + CACHE_TAIL, NEXT, 1200),  # a box's title is no term
    ],
    ids=[
        "too-long",
        "not-continued",
        "short",
        "own-term",
        "no-term",
        "example",
        "no-overlap",
        "admonition",
    ],
)
def test_no_part_is_found_unless_the_chunk_continues_a_definition(
    previous: str, text: str, max_chars: int
) -> None:
    assert continued_definition(previous, text, max_chars) is None


def _candidate(text: str, cid: str, preceding: Preceding | None = None) -> Candidate:
    return Candidate(
        chunk_id=cid, doc_id="runtime-config-query", text=text, score=1.0, preceding=preceding
    )


def _preceding(previous: str = PREVIOUS, text: str = NEXT) -> Preceding:
    part = continued_definition(previous, text, 1200)
    assert part is not None
    return Preceding(
        chunk_id="a", start=part.start, text=previous[part.start : part.end], overlap=part.overlap
    )


def test_a_passage_read_with_its_preceding_part_quotes_each_unit_from_its_own_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    question = (
        "How much disk cache does the planner assume when effective_cache_size was never set?"
    )
    passage = _candidate(NEXT, "b", _preceding())
    [ev] = EvidenceSelector(None, SERVED, max_spans=8, max_words=400).select(
        [(question, [passage])]
    )
    assert compose(ev, AnswerPolicy()).text.startswith(
        "effective_cache_size (integer) / The default is 4 gigabytes (4GB)."
    )
    texts = {"a": PREVIOUS, "b": NEXT}
    assert {s.chunk_id for s in ev.spans} == {"a", "b"}  # the term's description is quoted too
    for s in ev.spans:
        assert texts[s.chunk_id][s.start : s.end] == s.text
    monkeypatch.setattr(select, "READ_PRECEDING", False)
    [ev] = EvidenceSelector(None, SERVED).select([(question, [passage])])
    assert {s.chunk_id for s in ev.spans} == {"b"}
    assert not compose(ev, AnswerPolicy()).text.startswith("effective_cache_size (integer)")


def test_a_unit_past_the_end_of_the_chunk_before_is_not_quoted() -> None:
    # The chunk before ends inside a sentence that the passage holds only the end of.
    previous = (
        BEFORE
        + CACHE_TERM
        + CACHE_HEAD
        + ("The system also does not assume data remains in the disk cache between queries, nor")
    )
    text = "data remains in the disk cache between queries, nor anything else at all. " + CACHE_NEXT
    part = continued_definition(previous, text, 1200)
    assert part is not None
    preceding = Preceding(
        chunk_id="a", start=part.start, text=previous[part.start : part.end], overlap=part.overlap
    )
    [whole] = select.read_whole([_candidate(text, "b", preceding)])
    assert whole.text.endswith(text)
    units = [u.text for u in select._units(whole)]
    assert not any(u.startswith("The system also does not assume") for u in units)
    assert CACHE_NEXT.split(" (")[0] in " ".join(units)


def test_a_preceding_chunk_that_is_a_passage_too_is_not_read_twice() -> None:
    first = _candidate(PREVIOUS, "a")
    second = _candidate(NEXT, "b", _preceding())
    assert select.read_whole([first, second]) == [first, second]
    assert isinstance(select.read_whole([second])[0], select.WholePassage)


class _Resp:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


class ChunkEs:
    """``msearch`` finds chunk 1 of "conf" and chunk 0 of "other" (and chunk 0 of "conf" with
    ``hit_before``); ``mget`` reads chunk texts."""

    def __init__(
        self, chunks: dict[str, str], fail: Exception | None = None, hit_before: bool = False
    ) -> None:
        self.chunks = chunks
        self.fail = fail
        self.mgets: list[list[str]] = []
        found = [("conf", 3, 1, NEXT), ("other", 1, 0, NEXT)]
        if hit_before:
            found.append(("conf", 3, 0, PREVIOUS))
        self.hits = [
            {
                "_id": chunk_id("acme", doc, version, no),
                "_source": {
                    "tenant": "acme",
                    "doc_id": doc,
                    "version": version,
                    "chunk_no": no,
                    "text": text,
                },
            }
            for doc, version, no, text in found
        ]

    def msearch(self, searches: list[dict[str, Any]]) -> _Resp:
        return _Resp({"responses": [{"hits": {"hits": self.hits}}, {"hits": {"hits": []}}]})

    def mget(self, index: str, ids: list[str], source_includes: list[str], realtime: bool) -> _Resp:
        assert source_includes == ["text"] and not realtime
        self.mgets.append(ids)
        if self.fail is not None:
            raise self.fail
        docs = [
            {"_id": i, "found": i in self.chunks, "_source": {"text": self.chunks.get(i, "")}}
            for i in ids
        ]
        return _Resp({"docs": docs})


def test_retrieval_reads_the_chunks_before_its_candidates_in_one_mget() -> None:
    before = chunk_id("acme", "conf", 3, 0)
    es = ChunkEs({before: PREVIOUS})
    retriever = HybridRetriever(es, "chunks", RetrievalSettings())  # type: ignore[arg-type]
    [found] = retriever.search_batch([_query()], np.zeros((1, 4), np.float32))
    assert es.mgets == [[before]]  # the first chunk of "other" has none before it
    by_doc = {c.doc_id: c for c in found}
    assert by_doc["other"].preceding is None
    preceding = by_doc["conf"].preceding
    assert preceding is not None and preceding.chunk_id == before
    assert PREVIOUS[preceding.start :].startswith(preceding.text)
    assert preceding.text.startswith("effective_cache_size (integer)")
    off = ChunkEs({before: PREVIOUS})
    HybridRetriever(  # type: ignore[arg-type]
        off, "chunks", RetrievalSettings(preceding_chars=0)
    ).search_batch([_query()], np.zeros((1, 4), np.float32))
    assert off.mgets == []
    # The chunk before is a hit of the same searches: its text is taken from there.
    found_too = ChunkEs({}, hit_before=True)
    [found] = HybridRetriever(  # type: ignore[arg-type]
        found_too, "chunks", RetrievalSettings()
    ).search_batch([_query()], np.zeros((1, 4), np.float32))
    assert found_too.mgets == []
    assert next(c for c in found if c.doc_id == "conf" and c.preceding is not None)


def test_a_failed_mget_is_a_transient_error() -> None:
    meta = type("Meta", (), {"status": 503})()
    es = ChunkEs({}, fail=ApiError("unavailable", meta, {}))  # type: ignore[arg-type]
    retriever = HybridRetriever(es, "chunks", RetrievalSettings())  # type: ignore[arg-type]
    with pytest.raises(TransientError):
        retriever.search_batch([_query()], np.zeros((1, 4), np.float32))


def test_a_phrase_that_recurs_in_the_chunk_before_is_matched_at_the_overlap() -> None:
    line = "Workload {} keeps the queue in memory until the budget of the scheduler is spent. "
    previous = "Memory budget (integer)\n\n" + "".join(line.format(i % 2) for i in range(9))
    text = line.format(0) + line.format(0) + "The default is 64 megabytes."
    part = continued_definition(previous, text, 2000)
    assert part is not None  # the first "Workload 0 ..." of five is not where the overlap is
    assert part.end == previous.rindex("Workload 0")
    assert part.overlap == len(line.format(0).rstrip())
