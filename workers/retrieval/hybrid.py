"""Hybrid retrieval of a batch of queries in one ``_msearch`` round trip.

Per query, two searches go into the same ``_msearch``: a BM25 ``match`` over text and title, and
an approximate kNN (HNSW, cosine) over ``embedding``, both with the tenant and request filters.
The two ranked lists are fused client-side with reciprocal rank fusion (Cormack, Clarke &
Büttcher 2009), keyed by ``chunk_id`` (the Elasticsearch ``_id``). Then ONE ``_mget`` reads the
chunks before the first fused candidates, so a candidate that starts inside a definition's
description carries the part of the chunk before it from the term on (``Candidate.preceding``,
:func:`workers.evidence.segment.continued_definition`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog
from elasticsearch import ApiError, Elasticsearch, TransportError

from index.schema import check_index_model, chunk_id
from ragstream.errors import PermanentError, TransientError, transient_http_status
from ragstream.settings import RetrievalSettings
from topics.queries import QueryRequest
from topics.retrieved import Candidate, Preceding
from workers.conversation import question_of, split_context
from workers.evidence.segment import continued_definition
from workers.retrieval.query import (
    CANDIDATE_EXCLUDES,
    Bm25Boosts,
    bm25_query,
    es_filters,
    knn_clause,
)
from workers.retrieval.rrf import reciprocal_rank_fusion

log = structlog.get_logger(__name__)

#: HTTP statuses of a search (or of the whole ``_msearch``) that may succeed on retry.
#: Names of the two searches of one query, in ``_msearch`` order.
SEARCH_KINDS = ("bm25", "knn")


class QueryRejectedError(PermanentError):
    """Elasticsearch refused one query's search (e.g. 400 for a bad filter value or vector).

    Attributes:
        request_id: the offending request.
        position: its index in the batch.
    """

    def __init__(self, message: str, request_id: str, position: int) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.position = position


class HybridRetriever:
    """BM25 + kNN retrieval with RRF fusion, one ``_msearch`` per batch.

    Args:
        es: an Elasticsearch client (given, never built here).
        alias: the chunk index alias to search.
        settings: the ``retrieval`` settings section (list lengths, HNSW candidates, RRF k).

        target: returns the index to search instead of the alias, or ``None`` for the alias:
            the physical index of the query embedder's model
            (:attr:`ingest.model_follow.ModelFollower.index`), so query vectors never meet an
            index of another model in the moments after an alias swap.

    Attributes:
        msearch_calls: ``_msearch`` requests sent so far (one per non-empty batch).
    """

    def __init__(
        self,
        es: Elasticsearch,
        alias: str,
        settings: RetrievalSettings,
        target: Callable[[], str | None] | None = None,
    ) -> None:
        self.es = es
        self.alias = alias
        self.settings = settings
        self.target = target
        self.msearch_calls = 0

    def check_model(self, model_id: str, dims: int) -> None:
        """Refuse to search an index built with another embedding model (the mapping's
        ``_meta``, :func:`index.schema.check_index_model`). No index yet is no mismatch: a
        fresh deployment starts its pools before the first ingest creates the index with the
        configured model (ingest checks the model too); searches find nothing until then.

        Raises:
            EmbeddingModelMismatchError: (a ``ConfigurationError``) the index records another
                model id or dimension.
            TransientError: Elasticsearch unreachable.
        """
        try:
            check_index_model(self.es, self.alias, model_id, dims)
        except ApiError as exc:
            if exc.meta.status == 404:
                log.warning("retrieval.no_index_yet", alias=self.alias, model=model_id)
                return
            raise TransientError(f"reading the mapping of {self.alias!r} failed: {exc}") from exc
        except TransportError as exc:
            raise TransientError(f"reading the mapping of {self.alias!r} failed: {exc}") from exc

    def search_batch(
        self, queries: Sequence[QueryRequest], vectors: npt.NDArray[np.floating[Any]]
    ) -> list[list[Candidate]]:
        """Retrieve and fuse candidates for every query of a batch.

        Args:
            queries: the requests; each is searched within its own ``tenant`` and ``filters``.
            vectors: ``(len(queries), dim)`` float query embeddings, L2-normalised, row ``i``
                for ``queries[i]``.

        Returns:
            Per query (input order), at most ``query.top_n`` candidates, best first, with
            ``score`` = RRF score and 1-based ``bm25_rank``/``knn_rank`` (``None`` if absent).

        Raises:
            ValueError: ``vectors`` does not have one row per query.
            TransientError: Elasticsearch unreachable, timed out, overloaded (429/5xx), for the
                whole request or any one search.
            QueryRejectedError: (a :class:`PermanentError`) Elasticsearch refused a search, e.g. 400
                for a filter value the field cannot parse or a vector of the wrong dimension;
                names the request.
        """
        pairs = self.search_pairs(queries, vectors)
        found = [
            self.fuse(query, hits(bm25), hits(knn))
            for query, (bm25, knn) in zip(queries, pairs, strict=True)
        ]
        return self.with_preceding(found, sources_of(pairs))

    def with_preceding(
        self, found: list[list[Candidate]], sources: Mapping[str, Mapping[str, Any]]
    ) -> list[list[Candidate]]:
        """``found`` with ``preceding`` set on each of every query's first
        ``retrieval.preceding_top`` candidates whose text continues a definition of the chunk
        before it in its document (same tenant, document and version, ``chunk_no - 1``; so the
        same readers), even when that chunk is a candidate too (the rerank stage may not keep
        it). The text of a chunk the searches found is taken from their hits; ONE ``_mget`` for
        the batch reads the others (the ``text`` field only, as of the last refresh, as the
        searches saw the index).

        Args:
            found: per query, its fused candidates, best first.
            sources: the ``_source`` of every hit by ``_id`` (``tenant``, ``doc_id``,
                ``version``, ``chunk_no``).

        Raises:
            TransientError: Elasticsearch unreachable, timed out or overloaded.
            PermanentError: Elasticsearch refused the ``_mget``.
        """
        s = self.settings
        if s.preceding_chars <= 0 or s.preceding_top <= 0:
            return found
        wanted: dict[tuple[int, int], str] = {}
        for qi, candidates in enumerate(found):
            for ci, c in enumerate(candidates[: s.preceding_top]):
                prev = _previous_id(sources.get(c.chunk_id) or {})
                if prev is not None:
                    wanted[qi, ci] = prev
        if not wanted:
            return found
        # Half of them are hits of the same searches already: their text is here.
        texts = {i: str(sources[i].get("text", "")) for i in set(wanted.values()) if i in sources}
        missing = sorted(set(wanted.values()) - texts.keys())
        if missing:
            texts.update(self._texts(missing))
        out = [list(candidates) for candidates in found]
        for (qi, ci), prev in wanted.items():
            text = texts.get(prev, "")
            c = out[qi][ci]
            part = continued_definition(text, c.text, s.preceding_chars) if text else None
            if part is not None:
                preceding = Preceding(
                    chunk_id=prev,
                    start=part.start,
                    text=text[part.start : part.end],
                    overlap=part.overlap,
                )
                out[qi][ci] = c.model_copy(update={"preceding": preceding})
        return out

    def _texts(self, ids: list[str]) -> dict[str, str]:
        index = (self.target and self.target()) or self.alias
        # Not realtime: what the searches saw (the last refresh), without a refresh forced.
        with es_errors("mget"):
            resp = self.es.mget(index=index, ids=ids, source_includes=["text"], realtime=False)
        return {
            d["_id"]: str(d["_source"].get("text", ""))
            for d in resp.body["docs"]
            if d.get("found") and d.get("_source")
        }

    def search_pairs(
        self, queries: Sequence[QueryRequest], vectors: npt.NDArray[np.floating[Any]]
    ) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
        """The raw ``(bm25, knn)`` Elasticsearch responses per query, from one ``_msearch``
        (before fusion: the evaluation compares the lists alone). Raises as
        :meth:`search_batch`."""
        if not queries:
            return []
        if vectors.ndim != 2 or vectors.shape[0] != len(queries):
            raise ValueError(f"vectors must be ({len(queries)}, dim), got {vectors.shape}")
        responses = self._msearch(self._searches(queries, vectors))
        check_responses(queries, responses)
        return [(responses[2 * i], responses[2 * i + 1]) for i in range(len(queries))]

    def _searches(
        self, queries: Sequence[QueryRequest], vectors: npt.NDArray[np.floating[Any]]
    ) -> list[dict[str, Any]]:
        s = self.settings
        header: dict[str, Any] = {"index": (self.target and self.target()) or self.alias}
        boosts = Bm25Boosts.from_settings(s)
        body: list[dict[str, Any]] = []
        for query, vector in zip(queries, vectors, strict=True):
            filters = es_filters(query.tenant, query.filters, query.principals)
            size = max(s.bm25_size, query.top_n)
            k = max(s.knn_k, query.top_n)
            knn = knn_clause(vector.tolist(), filters, k, s.knn_num_candidates)
            asked, context = split_context(question_of(query))
            body += [
                header,
                bm25_query(asked, filters, size, boosts, context),
                header,
                {
                    "size": k,
                    "track_total_hits": False,
                    "_source": {"excludes": CANDIDATE_EXCLUDES},
                    "knn": knn,
                },
            ]
        return body

    def _msearch(self, searches: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
        self.msearch_calls += 1
        with es_errors("msearch"):  # traced by the client itself (a span per request, when on)
            resp = self.es.msearch(searches=searches)
        responses: list[Mapping[str, Any]] = list(resp.body["responses"])
        if len(responses) != len(searches) // 2:
            raise TransientError(
                f"msearch returned {len(responses)} responses for {len(searches) // 2} searches"
            )
        return responses

    def fuse(
        self, query: QueryRequest, bm25: list[Mapping[str, Any]], knn: list[Mapping[str, Any]]
    ) -> list[Candidate]:
        """One query's candidates from its BM25 and kNN hits (each best first, as
        :func:`hits` returns them): RRF over the two rankings, at most ``query.top_n``, best
        first (see :meth:`search_batch`)."""
        sources: dict[str, Mapping[str, Any]] = {}
        ranks: list[dict[str, int]] = [{}, {}]
        raw: list[dict[str, float]] = [{}, {}]
        for which, hits in enumerate((bm25, knn)):
            for rank, hit in enumerate(hits, start=1):
                ranks[which].setdefault(hit["_id"], rank)
                if hit.get("_score") is not None:
                    raw[which].setdefault(hit["_id"], float(hit["_score"]))
                sources.setdefault(hit["_id"], hit.get("_source") or {})
        s = self.settings
        fused = reciprocal_rank_fusion(
            [list(r) for r in ranks], k=s.rrf_k, weights=(s.bm25_weight, s.knn_weight)
        )
        return [
            _candidate(chunk_id, score, sources[chunk_id], ranks, raw)
            for chunk_id, score in fused[: query.top_n]
        ]


@contextlib.contextmanager
def es_errors(call: str) -> Iterator[None]:
    """Map the Elasticsearch client's errors of ``call`` (``msearch``, ``mget``) to ours.

    Raises:
        TransientError: unreachable, timed out, or an HTTP status that may pass on retry
            (408/429/5xx, :func:`ragstream.errors.transient_http_status`).
        PermanentError: any other HTTP status (400: a request Elasticsearch cannot run).
    """
    try:
        yield
    except ApiError as exc:
        status = exc.meta.status
        if transient_http_status(status):
            raise TransientError(f"elasticsearch {call} failed ({status}): {exc}") from exc
        raise PermanentError(f"elasticsearch refused {call} ({status}): {exc}") from exc
    except TransportError as exc:
        raise TransientError(f"elasticsearch {call} failed: {exc}") from exc


def check_responses(
    queries: Sequence[QueryRequest], responses: Sequence[Mapping[str, Any]]
) -> None:
    """Raise for the first failed search of an ``_msearch`` response (transient ones first).

    Args:
        queries: the batch, in order; search ``2*i`` (BM25) and ``2*i+1`` (kNN) are query ``i``'s.
        responses: the ``responses`` array of the ``_msearch`` reply.

    Raises:
        TransientError: a search failed with 408/429/5xx.
        QueryRejectedError: a search failed otherwise (400: unparsable filter value, bad vector).
    """
    failures = [(j, r) for j, r in enumerate(responses) if "error" in r]
    if not failures:
        return
    for j, r in failures:
        status = int(r.get("status", 500))
        if transient_http_status(status):
            raise TransientError(f"search {j} of msearch failed ({status}): {_reason(r)}")
    j, r = failures[0]
    query = queries[j // 2]
    raise QueryRejectedError(
        f"elasticsearch rejected the {SEARCH_KINDS[j % 2]} search of request "
        f"{query.request_id!r} (batch position {j // 2}, status {r.get('status')}): {_reason(r)}",
        request_id=query.request_id,
        position=j // 2,
    )


def hits(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The hits of one search's response, best first."""
    return list(response["hits"]["hits"])


def _reason(response: Mapping[str, Any]) -> str:
    error = response.get("error")
    if isinstance(error, Mapping):
        cause = (error.get("root_cause") or [error])[0]
        return f"{cause.get('type', 'error')}: {cause.get('reason', '')}"[:500]
    return str(error)[:500]


def sources_of(
    pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> dict[str, Mapping[str, Any]]:
    """The ``_source`` of every hit of ``(bm25, knn)`` responses (:meth:`HybridRetriever.
    search_pairs`), by ``_id``: what :meth:`HybridRetriever.with_preceding` reads."""
    return {h["_id"]: h.get("_source") or {} for b, k in pairs for h in hits(b) + hits(k)}


def _previous_id(source: Mapping[str, Any]) -> str | None:
    """The ``_id`` of the chunk before the chunk of ``source`` in its document, or ``None`` (the
    first chunk, or a source without its coordinates)."""
    tenant, doc_id = source.get("tenant"), source.get("doc_id")
    version, chunk_no = source.get("version"), source.get("chunk_no")
    if not tenant or not doc_id or not isinstance(version, int) or not isinstance(chunk_no, int):
        return None
    return chunk_id(str(tenant), str(doc_id), version, chunk_no - 1) if chunk_no > 0 else None


def _candidate(
    chunk_id: str,
    score: float,
    source: Mapping[str, Any],
    ranks: Sequence[Mapping[str, int]],
    raw: Sequence[Mapping[str, float]],
) -> Candidate:
    return Candidate(
        chunk_id=chunk_id,
        doc_id=str(source.get("doc_id", "")),
        text=str(source.get("text", "")),
        title=str(source.get("title") or ""),
        source=str(source.get("source") or ""),
        score=score,
        bm25_rank=ranks[0].get(chunk_id),
        knn_rank=ranks[1].get(chunk_id),
        bm25_score=raw[0].get(chunk_id),
        knn_score=raw[1].get(chunk_id),
    )
