"""Search alone, at the edge: the passages of a question without an answer.

One :class:`Searcher` per process, over the process's :class:`~api.deps.Services`: the retrieval
pool's own code (:class:`workers.retrieval.hybrid.HybridRetriever`: BM25 and kNN in one
``_msearch``, reciprocal rank fusion) run in this process with the query embedder, which loads on
the first search. Every surface that serves search (the MCP ``search`` tool, ``POST /v1/search``
and the adapters built on it) asks here, so a search has the limits, the tenant and the readers
of a question (:func:`api.asking.build_request`): the same query, filters and permissions give
the same passages as the retrieval stage of ``POST /v1/query``.

Rankers (:data:`Ranker`):

- ``hybrid``: the fused order; ``score`` is the RRF score
  ``sum_i w_i / (k + rank_i)`` (Cormack, Clarke and Buettcher 2009; ``k`` =
  ``retrieval.rrf_k``, 60 by default, weights ``retrieval.bm25_weight``/``knn_weight``), in
  ``(0, (w_bm25 + w_knn) / (k + 1)]``: 1.8 / 61, about 0.0295, at most with the defaults
  (weights 0.8 and 1.0), comparable only within one index's settings;
- ``keyword``: BM25 alone, ``score`` Elasticsearch's BM25 score (unbounded, > 0);
- ``vector``: kNN alone, ``score`` Elasticsearch's cosine score ``(1 + cos) / 2`` in [0, 1].
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from api.asking import build_request, query_body
from api.auth import Principal
from api.deps import Services
from api.errors import ApiError
from ragstream.errors import PermanentError, TransientError
from topics.retrieved import Candidate

#: How the passages are ordered and scored (see the module docstring).
Ranker = Literal["hybrid", "keyword", "vector"]
#: Most passages one search returns.
MAX_RESULTS = 50


#: Where a process keeps its one :class:`Searcher` (``Services.extras``).
SEARCHER = "searcher"


def shared_searcher(services: Services) -> Searcher:
    """The process's one :class:`Searcher` (made on first use, in ``services.extras``): every
    search surface of a process (``POST /v1/search``, Dify, MCP) shares its query embedder,
    loaded once."""
    found = services.extras.get(SEARCHER)
    if found is None:  # setdefault: two first callers at once still share one
        found = services.extras.setdefault(SEARCHER, Searcher(services))
    return found  # type: ignore[no-any-return]


def max_rrf_score(settings: Any) -> float:
    """The highest hybrid score ``settings.retrieval`` can give: first in both lists,
    ``(w_bm25 + w_knn) / (k + 1)`` (1.8 / 61, about 0.0295, with the defaults: ``k`` = 60,
    weights 0.8 and 1.0). A hybrid score divided by it lies in ``(0, 1]``."""
    r = settings.retrieval
    return float((r.bm25_weight + r.knn_weight) / (r.rrf_k + 1)) or 1.0


@dataclass(frozen=True, slots=True)
class Hit:
    """One passage of a search, best first.

    Attributes:
        n: 1-based rank.
        candidate: the chunk with its provenance, its document's ``metadata`` and scores
            (``bm25_rank``/``knn_rank``, ``bm25_score``/``knn_score`` of each list it was in).
        score: the ranker's score (see the module docstring).
    """

    n: int
    candidate: Candidate
    score: float


class Searcher:
    """Search over ``services``' index (see the module docstring).

    Args:
        services: the process's services (settings, and ``extras["es"]``, the Elasticsearch
            client, made on first use when absent).
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings
        self._lock = threading.Lock()
        self._retrieval: tuple[Any, Any] | None = None

    def es(self) -> Any:
        """The process's Elasticsearch client (made on first use)."""
        from elasticsearch import Elasticsearch

        es = self.services.extras.get("es")
        if es is None:
            es = self.services.extras["es"] = Elasticsearch(
                self.settings.elasticsearch.url, request_timeout=10
            )
        return es

    def _retriever(self) -> tuple[Any, Any]:
        """``(embedder, retriever)``, built on first use (the query model loads once)."""
        with self._lock:
            if self._retrieval is None:
                from ingest.factory import build_embedder
                from workers.retrieval.hybrid import HybridRetriever

                embedder = build_embedder(self.settings, num_threads=1, role="query")
                retriever = HybridRetriever(
                    self.es(), self.settings.elasticsearch.index_alias, self.settings.retrieval
                )
                self._retrieval = (embedder, retriever)
            return self._retrieval

    async def search(
        self,
        who: Principal,
        query: str,
        *,
        top_k: int = 10,
        filters: Sequence[Any] = (),
        ranker: Ranker = "hybrid",
        history: Sequence[Any] = (),
        metadata: bool = True,
    ) -> list[Hit]:
        """The ``top_k`` best passages of ``who``'s index for ``query``, best first.

        Args:
            who: the caller: its tenant and principals scope the search.
            query: the question or search words (the limits of every question).
            top_k: passages returned, 1 to :data:`MAX_RESULTS`.
            filters: ``api.models.Filter`` items (or their JSON), as ``POST /v1/query`` takes
                them; metadata numbers, booleans and dates compare as their type.
            ranker: ``hybrid``, ``keyword`` or ``vector`` (see the module docstring).
            history: earlier turns of a conversation: a follow-up is made standalone as
                ``POST /v1/query`` makes it.
            metadata: read each hit's document metadata (one more ``_mget``); ``False`` for a
                caller that shows none (the MCP tool).

        Returns:
            The hits, best first; none before the first document is indexed (no index yet).

        Raises:
            ApiError: 422 for a blank or too long query, a ``top_k`` out of range or a filter
                the index refuses; 503 when Elasticsearch is unreachable.
        """
        if not 1 <= top_k <= MAX_RESULTS:
            raise ApiError(422, "INVALID_REQUEST", f"top_k: between 1 and {MAX_RESULTS}")
        body = query_body(
            self.settings,
            query=query,
            top_k=top_k,
            top_n=max(top_k, self.settings.retrieval.top_n),
            filters=list(filters),
            history=list(history),
        )
        request = build_request(self.settings, who, body)
        try:
            return await asyncio.to_thread(self._search, request, ranker, metadata)
        except TransientError as exc:
            raise ApiError(503, "UNAVAILABLE", f"search failed: {exc}") from exc
        except PermanentError as exc:
            if not await asyncio.to_thread(self._index_exists):
                return []  # no document indexed yet: nothing found, as the retrieval pool says
            raise ApiError(422, "INVALID_REQUEST", f"search refused: {exc}") from exc

    def _index_exists(self) -> bool:
        """Whether the chunk index (its alias) exists; ``True`` when Elasticsearch cannot say
        (the refusal then stands)."""
        from elasticsearch import ApiError as EsApiError
        from elasticsearch import TransportError

        try:
            return bool(self.es().indices.exists(index=self.settings.elasticsearch.index_alias))
        except (EsApiError, TransportError):
            return True

    def _search(self, request: Any, ranker: Ranker, metadata: bool) -> list[Hit]:
        from workers.conversation import question_of
        from workers.retrieval.hybrid import hits

        embedder, retriever = self._retriever()
        vectors = embedder.embed([question_of(request)])
        if ranker == "hybrid":
            (found,) = retriever.search_batch([request], vectors)
            top = found[: request.top_k]
            found = [Hit(n, c, c.score) for n, c in enumerate(top, start=1)]
            return self._with_metadata(found) if metadata else found
        ((bm25, knn),) = retriever.search_pairs([request], vectors)
        keyword = ranker == "keyword"
        listed = hits(bm25) if keyword else hits(knn)
        fused = (
            retriever.fuse(request, listed, []) if keyword else retriever.fuse(request, [], listed)
        )
        out = []
        for n, c in enumerate(fused[: request.top_k], start=1):
            raw = c.bm25_score if keyword else c.knn_score
            out.append(Hit(n, c, float(raw if raw is not None else c.score)))
        return self._with_metadata(out) if metadata else out

    def _with_metadata(self, found: list[Hit]) -> list[Hit]:
        """``found`` with each chunk's document metadata, read by ONE ``_mget`` (the searches
        leave ``metadata`` out of their hits: the retrieval pool's events stay small). Not
        realtime: what the searches saw.

        Raises:
            TransientError, PermanentError: as the searches (``es_errors``).
        """
        from workers.retrieval.hybrid import es_errors

        if not found:
            return found
        _, retriever = self._retriever()
        index = (retriever.target and retriever.target()) or retriever.alias
        ids = [hit.candidate.chunk_id for hit in found]
        with es_errors("mget"):
            resp = self.es().mget(
                index=index, ids=ids, source_includes=["metadata"], realtime=False
            )
        metadata = {
            d["_id"]: {
                k: v
                for k, v in ((d.get("_source") or {}).get("metadata") or {}).items()
                if v is None or isinstance(v, str | int | float | bool)
            }
            for d in resp.body["docs"]
            if d.get("found")
        }
        return [
            Hit(h.n, h.candidate.model_copy(update={"metadata": metadata[h.candidate.chunk_id]}),
                h.score)
            if metadata.get(h.candidate.chunk_id)
            else h
            for h in found
        ]  # fmt: skip
