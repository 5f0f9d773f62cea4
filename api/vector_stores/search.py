"""``POST /v1/vector_stores/{id}/search``: a store's passages for a query, one page at a time.

The search is :class:`api.searching.Searcher`'s (the retrieval pool's hybrid retriever, the
caller's tenant and readers), restricted to the store's documents (doc ids
``<store id>/<file id>``: a ``doc_id`` range, so a store of any size costs one filter) and to
the request's filters (:mod:`api.vector_stores.filters`). A list of queries is searched query by
query and merged by chunk, each chunk at its best score.

Scores (docs/vector-stores.md#scores):

- ``hybrid`` (``ranker`` ``auto``/``default-2024-11-15``/``none``, ``search_mode`` hybrid):
  the RRF score divided by its largest value ``(w_bm25 + w_knn) / (k + 1)``, so in (0, 1]:
  1.0 is a chunk ranked first by both BM25 and kNN, about 0.55 one ranked first by kNN alone
  (with the default weights 0.8 and 1.0);
- ``vector``: Elasticsearch's cosine score ``(1 + cos) / 2`` in [0, 1];
- ``keyword``: BM25, unbounded (> 0).

``score_threshold`` leaves out what scores below it. Pages: ``next_page`` is an opaque cursor
(the offset and a fingerprint of the search, so a cursor given with another search is a 400);
each page is searched again to its depth, so the deepest result is the
:data:`~api.searching.MAX_RESULTS`-th (50th) of each query.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from dataclasses import dataclass

from api.auth import Principal
from api.errors import OpenAIError
from api.searching import MAX_RESULTS, Hit, Ranker, Searcher, max_rrf_score
from api.vector_stores.filters import FilterError, to_filters
from api.vector_stores.protocol import SearchBody, SearchPage, SearchResult, TextContent
from api.vector_stores.registry import VectorStoreRegistry, file_id_of
from ragstream.settings import Settings
from topics.queries import Filter, RangeFilter


@dataclass(frozen=True, slots=True)
class Scored:
    """A passage and its score on the page's scale."""

    hit: Hit
    score: float


def ranker_of(body: SearchBody) -> Ranker:
    """``search_mode`` when given, else hybrid (every ``ranking_options.ranker`` is)."""
    return body.search_mode or "hybrid"


def store_filter(store_id: str) -> Filter:
    """The documents of ``store_id``: doc ids from ``<id>/`` to ``<id>/~`` (file ids are
    ``file-<hex>``, every character below ``~``)."""
    return RangeFilter(field="doc_id", gte=f"{store_id}/", lte=f"{store_id}/~")


def scale(hit: Hit, ranker: Ranker, settings: Settings) -> float:
    """``hit``'s score as the page gives it (see the module docstring): a hybrid score over
    its maximum (:func:`api.searching.max_rrf_score`), the others as they are."""
    if ranker != "hybrid":
        return hit.score
    return min(1.0, hit.score / max_rrf_score(settings))


def fingerprint(store_id: str, body: SearchBody) -> str:
    """What a cursor belongs to: the store and the body without ``next_page``."""
    plain = body.model_dump(mode="json", exclude={"next_page"})
    raw = json.dumps([store_id, plain], sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def encode_page(offset: int, print_: str) -> str:
    """The opaque ``next_page`` of the page starting at ``offset``."""
    raw = json.dumps([offset, print_], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page(cursor: str | None, print_: str) -> int:
    """The offset of ``cursor`` (0 for none).

    Raises:
        OpenAIError: 400 for a cursor this search did not hand out.
    """
    if not cursor:
        return 0
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        offset, mark = value
        if (
            isinstance(offset, int)
            and not isinstance(offset, bool)
            and offset > 0
            and mark == print_
        ):
            return offset
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        pass
    raise OpenAIError(
        400, "invalid_value", "next_page: not a cursor of this search", param="next_page"
    )


async def search_store(
    searcher: Searcher,
    registry: VectorStoreRegistry,
    who: Principal,
    store_id: str,
    body: SearchBody,
) -> SearchPage:
    """One page of ``store_id``'s passages for ``body`` (see the module docstring).

    Raises:
        OpenAIError: 400 for a filter the index cannot apply or a foreign cursor.
        ApiError: as :meth:`Searcher.search` (a blank query, Elasticsearch down).
    """
    try:
        filters = [store_filter(store_id), *to_filters(body.filters)]
    except FilterError as exc:
        raise OpenAIError(400, "invalid_value", str(exc), param="filters") from exc
    mark = fingerprint(store_id, body)
    offset = decode_page(body.next_page, mark)
    size = body.max_num_results
    ranker = ranker_of(body)
    queries = [body.query] if isinstance(body.query, str) else list(body.query)
    depth = min(offset + size + 1, MAX_RESULTS)
    if not await asyncio.to_thread(registry.searchable, who.tenant, store_id):
        return SearchPage(search_query=body.query, data=[])  # no file ingested yet
    best: dict[str, Scored] = {}
    for query in queries:
        hits = await searcher.search(who, query, top_k=depth, filters=filters, ranker=ranker)
        for hit in hits:
            score = scale(hit, ranker, searcher.settings)
            known = best.get(hit.candidate.chunk_id)
            if known is None or score > known.score:
                best[hit.candidate.chunk_id] = Scored(hit, score)
    threshold = body.ranking_options.score_threshold if body.ranking_options else 0.0
    ranked = sorted((s for s in best.values() if s.score >= threshold), key=lambda s: -s.score)
    files = {file_id_of(s.hit.candidate.doc_id) for s in ranked}
    attached = await asyncio.to_thread(registry.attachments, who.tenant, store_id, files)
    kept = [s for s in ranked if file_id_of(s.hit.candidate.doc_id) in attached]
    page = kept[offset : offset + size]
    more = len(kept) > offset + size
    data = [
        SearchResult(
            file_id=file_id_of(s.hit.candidate.doc_id),
            filename=s.hit.candidate.source or s.hit.candidate.title,
            score=s.score,
            attributes=dict(attached[file_id_of(s.hit.candidate.doc_id)].attributes or {}),
            content=[TextContent(text=s.hit.candidate.text)],
        )
        for s in page
    ]
    return SearchPage(
        search_query=body.query,
        data=data,
        has_more=more,
        next_page=encode_page(offset + size, mark) if more else None,
    )
