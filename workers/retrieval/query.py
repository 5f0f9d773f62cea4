"""Elasticsearch query bodies for hybrid retrieval, built from structured filters.

User input reaches Elasticsearch only as ``match`` query text (analysed, never parsed as query
syntax) and as ``terms``/``range`` values (compared literally). No ``query_string`` or
``simple_query_string`` is ever produced. The tenant filter is always the first filter clause,
the permission filter (the asker's principals) the second, and the same filters go to the BM25
query and inside the kNN clause (so kNN pre-filters rather than post-filtering its top k).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from index.schema import CHUNKS_ONLY, DEFINITIONS_ONLY
from index.stemming import STOP_WORDS, stem_text
from ragstream.errors import PermanentError
from ragstream.settings import RetrievalSettings
from topics.metadata import metadata_range, metadata_terms
from topics.queries import Filter, RangeFilter, TermFilter

#: Same field whitelist as :data:`topics.queries.FilterField`, checked again here so a filter
#: built without validation (``model_construct``) cannot name ``tenant`` or any other field.
#: Fields of a chunk's ``_source`` a search leaves out: the vector and the stemmed copies (only
#: Elasticsearch reads them), and the document's ``metadata``, which no stage after retrieval
#: reads (filters run in Elasticsearch): a document's metadata can be as large as an ingest
#: event allows, and ten candidates of such documents on ``rag.retrieved`` would pass the
#: producer's ``max_request_size`` (issue 39).
CANDIDATE_EXCLUDES = ["embedding", "text_stemmed", "title_stemmed", "metadata"]
_FIELD = re.compile(r"^(doc_id|source|content_type|lang|metadata\.[A-Za-z0-9_]{1,64})$")
#: Boost of title matches over body matches in BM25 (0.5, with the stemmed text at 1.0, chosen
#: on both question sets: docs/evaluation.md; it was 2.0).
TITLE_BOOST = 0.5
#: Boost of the stemmed text (``text_stemmed``) in BM25.
STEMMED_BOOST = 1.0
#: Default weight of a follow-up's context words against its question's (``retrieval.
#: context_boost``).
CONTEXT_BOOST = 1.0


def acl_clause(principals: Sequence[str] | None) -> dict[str, Any] | None:
    """The permission filter of an asker with ``principals`` (``docs/permissions.md``): a
    chunk matches when its document has no readers (no ``principals`` field, or an empty one)
    or one of its readers is among ``principals``. ``None``: no filter (a tenant-wide key).

    Returns:
        A ``bool`` clause for a filter context, or ``None``.
    """
    if principals is None:
        return None
    should: list[dict[str, Any]] = [{"bool": {"must_not": [{"exists": {"field": "principals"}}]}}]
    if principals:
        should.insert(0, {"terms": {"principals": sorted(set(principals))}})
    return {"bool": {"should": should, "minimum_should_match": 1}}


def es_filters(
    tenant: str,
    filters: Sequence[Filter],
    principals: Sequence[str] | None = None,
    *,
    entry: Literal["chunk", "definition"] = "chunk",
) -> list[dict[str, Any]]:
    """Filter clauses for one query: the tenant term first, the permission filter
    (:func:`acl_clause`) second, then one clause per filter, then the entry clause (chunks
    only, :data:`~index.schema.CHUNKS_ONLY`, or definition entries only).

    Args:
        tenant: the requesting tenant; always applied.
        principals: the asker's principals; ``None``: no permission filter.
        entry: ``chunk`` (passages) or ``definition`` (the definition index's entries).
        filters: ``TermFilter`` → ``terms`` (strings compared exactly, on a keyword or
            ``metadata.<key>`` of the flattened field; on ``metadata.<key>`` booleans and
            numbers on its typed companion, :func:`topics.metadata.metadata_terms`, several
            kinds as one ``bool.should``); ``RangeFilter`` → ``range``: on
            ``metadata.<key>`` over ``metadata_num.<key>`` (numbers) or
            ``metadata_date.<key>`` (dates) (:func:`topics.metadata.metadata_range`); on a
            keyword field with the given ``gte``/``lte``, compared as strings.

    Returns:
        Clauses for a ``bool.filter`` (all must match).

    Raises:
        PermanentError: empty tenant, a filter naming a field outside the whitelist, or a
            metadata filter whose values are not of a type it compares (a filter built
            without validation: a validated one never is).
    """
    if not tenant:
        raise PermanentError("a search needs a tenant")
    clauses: list[dict[str, Any]] = [{"term": {"tenant": {"value": tenant}}}]
    acl = acl_clause(principals)
    if acl is not None:
        clauses.append(acl)
    for f in filters:
        if not _FIELD.fullmatch(f.field):
            raise PermanentError(f"filter field not allowed: {f.field!r}")
        try:
            clauses.append(_clause(f))
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
    clauses.append(CHUNKS_ONLY if entry == "chunk" else DEFINITIONS_ONLY)
    return clauses


def _clause(f: Filter) -> dict[str, Any]:
    """One filter's clause (raises ``ValueError`` as :mod:`topics.metadata` does)."""
    metadata = f.field.startswith("metadata.")
    if isinstance(f, TermFilter):
        if not metadata:
            return {"terms": {f.field: list(f.values)}}
        terms = metadata_terms(f.field, f.values)
        if len(terms) == 1:
            return terms[0]
        return {"bool": {"should": terms, "minimum_should_match": 1}}
    if isinstance(f, RangeFilter):
        if not metadata:
            bounds = {op: v for op, v in (("gte", f.gte), ("lte", f.lte)) if v is not None}
            return {"range": {f.field: bounds}}
        field, typed = metadata_range(f.field, f.gte, f.lte)
        return {"range": {field: typed}}
    raise PermanentError(f"unknown filter kind: {type(f).__name__}")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class Bm25Boosts:
    """Field boosts of the BM25 query.

    Attributes:
        title: ``title`` over ``text`` (both standard-analysed).
        stemmed: ``text_stemmed`` (client-stemmed, ``index/stemming.py``); 0 leaves it out.
        stemmed_title: ``title_stemmed``; 0 leaves it out.
        context: a follow-up's context against its question (``text`` and, stemmed,
            ``text_stemmed`` at ``context`` times their own boosts; 0 leaves it out).
        stop_words: keep stop words in the unstemmed clauses' text (``text``, ``title``, the
            context's ``text``); ``False`` leaves out :func:`without_stop_words` of it (the
            stemmed clauses never have them).
    """

    title: float = TITLE_BOOST
    stemmed: float = STEMMED_BOOST
    stemmed_title: float = 0.0
    context: float = CONTEXT_BOOST
    stop_words: bool = True

    @classmethod
    def from_settings(cls, settings: RetrievalSettings) -> Bm25Boosts:
        """The boosts of the ``retrieval`` settings section."""
        return cls(
            settings.title_boost,
            settings.stemmed_boost,
            settings.stemmed_title_boost,
            settings.context_boost,
            settings.bm25_stop_words,
        )


#: A word of a question as Elasticsearch's standard tokenizer would roughly see it: a run of
#: non-space characters, compared to :data:`index.stemming.STOP_WORDS` without the punctuation
#: around it (``"the"``, ``"(or"``), never inside it (``os.path``, ``it's`` stay).
_TOKEN = re.compile(r"\S+")
_EDGE = re.compile(r"^[^\w]+|[^\w]+$")


def without_stop_words(text: str) -> str:
    """``text`` without the words that are, once stripped of leading and trailing punctuation
    and lower-cased, Lucene's English stop words (:data:`index.stemming.STOP_WORDS`); the other
    words kept as written, joined by single spaces. ``text`` itself when every word is one
    (``"to be or not"``), so a question of stop words still matches what it did.

    Why: a stop word's posting list holds nearly every chunk, and a ``match`` query scores
    every document of every term's list that block-max WAND cannot skip, while the word's
    IDF (about 0.01-0.1 here) moves no ranking much (docs/benchmarks, "Elasticsearch's share").
    """
    kept = [w for w in _TOKEN.findall(text) if _EDGE.sub("", w).lower() not in STOP_WORDS]
    return " ".join(kept) if kept else text


def bm25_query(
    text: str,
    filters: Sequence[dict[str, Any]],
    size: int,
    boosts: Bm25Boosts | None = None,
    context: str = "",
) -> dict[str, Any]:
    """A BM25 search body: ``match`` on ``text`` or on ``title`` (boosted), and, when their
    boosts are not 0, on the client-stemmed ``text_stemmed``/``title_stemmed`` with the question
    stemmed the same way (:func:`index.stemming.stem_text`), all filtered. The unstemmed
    clauses stay, so an exact identifier (``shared_buffers``, ``os.getcwd``) still scores.

    Args:
        text: the user's question, analysed by the field's analyzer (standard), never parsed.
        filters: clauses from :func:`es_filters`.
        size: hits to return.
        boosts: field boosts; default :class:`Bm25Boosts` (title 0.5, stemmed text 1.0, no
            stemmed title, context 1.0: the retrieval settings' defaults).
        context: the words of a follow-up's context (:func:`workers.conversation.
            split_context`), matched at ``boosts.context``; "" for none.

    Returns:
        A search body (``query``, ``size``, ``_source`` without :data:`CANDIDATE_EXCLUDES`, and
        ``track_total_hits: false``: no hit count is needed, so block-max WAND may skip
        documents that cannot reach the top ``size``).
    """
    b = boosts or Bm25Boosts()
    plain = text if b.stop_words else without_stop_words(text)
    should: list[dict[str, Any]] = [
        {"match": {"text": {"query": plain}}},
        {"match": {"title": {"query": plain, "boost": b.title}}},
    ]
    if b.stemmed or b.stemmed_title:
        stemmed = stem_text(text)
        if stemmed:
            for field, boost in (("text_stemmed", b.stemmed), ("title_stemmed", b.stemmed_title)):
                if boost:
                    should.append({"match": {field: {"query": stemmed, "boost": boost}}})
    if context.strip() and b.context:
        words = context if b.stop_words else without_stop_words(context)
        should.append({"match": {"text": {"query": words, "boost": b.context}}})
        stemmed = stem_text(context) if b.stemmed else ""
        if stemmed:
            boost = b.context * b.stemmed
            should.append({"match": {"text_stemmed": {"query": stemmed, "boost": boost}}})
    return {
        "size": size,
        "track_total_hits": False,
        "_source": {"excludes": CANDIDATE_EXCLUDES},
        "query": {
            "bool": {
                "should": should,
                "minimum_should_match": 1,
                "filter": list(filters),
            }
        },
    }


def knn_clause(
    vector: Sequence[float], filters: Sequence[dict[str, Any]], k: int, num_candidates: int
) -> dict[str, Any]:
    """A top-level ``knn`` clause over ``embedding`` with the filters inside it (pre-filtering).

    Args:
        vector: the query embedding, ``dim`` floats, L2-normalised (cosine similarity).
        filters: clauses from :func:`es_filters`.
        k: neighbours to return.
        num_candidates: HNSW candidates per shard (>= k; recall vs latency).

    Returns:
        The value of a search body's ``knn`` key.
    """
    return {
        "field": "embedding",
        "query_vector": [float(x) for x in vector],
        "k": k,
        "num_candidates": max(num_candidates, k),
        "filter": {"bool": {"filter": list(filters)}},
    }
