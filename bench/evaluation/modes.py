"""The retrieval modes compared by ``ragstream eval``, run in-process with the pools' components.

- ``bm25``: the BM25 search of the retrieval pool alone (:func:`workers.retrieval.bm25_query`,
  ``bm25_size`` hits);
- ``knn``: its kNN search alone (:func:`workers.retrieval.knn_clause`, ``knn_k`` hits);
- ``hybrid``: :class:`workers.retrieval.HybridRetriever`, both fused with reciprocal rank
  fusion, the ``top_n`` best: what the retrieval pool emits;
- ``hybrid+<backend>``: those ``top_n`` candidates scored by the rerank backend (built by
  :func:`workers.rerank.make_reranker` from the ``rerank`` settings with only ``backend``
  changed) and ordered by :func:`workers.rerank.select_top_k` with the pool's per-document
  cap: the first ``top_k`` of that list are exactly the passages the rerank pool sends on.

All searches run against the given alias and tenant, with no other filter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
from elasticsearch import Elasticsearch

from ragstream.settings import Settings
from topics.queries import QueryRequest
from topics.retrieved import Candidate
from workers.conversation import question_of
from workers.rerank.backends import LlmReranker, Reranker
from workers.rerank.factory import make_reranker, onnx_model_dir, rerank_models_dir
from workers.rerank.select import score_top_n, select_top_k
from workers.retrieval.hybrid import HybridRetriever

BASE_MODES = ("bm25", "knn", "hybrid")
RERANK_BACKENDS = ("none", "llm", "cross-encoder", "onnx")
ALL_MODES = (*BASE_MODES, *(f"hybrid+{b}" for b in RERANK_BACKENDS))
#: What ``ragstream eval`` measures unless told: every mode but the LLM reranker, which scores
#: 30 passages a question with the served LLM (minutes a set on two cores; ``--modes`` asks
#: for it), and the ONNX cross-encoder (about a core-second a question; asked for, or run as
#: the default mode when ``rerank.backend=onnx``).
DEFAULT_MODES = tuple(m for m in ALL_MODES if m not in {"hybrid+llm", "hybrid+onnx"})


def rerank_text(candidate: Candidate) -> str:
    """The passage a reranker scores: title line then text, as the rerank pool builds it."""
    return f"{candidate.title}\n{candidate.text}" if candidate.title else candidate.text


@dataclass(frozen=True, slots=True)
class ModePlan:
    """Which of the asked modes run, and why the others cannot run here."""

    runnable: tuple[str, ...]
    skipped: dict[str, str]


def plan_modes(asked: Sequence[str], settings: Settings) -> ModePlan:
    """Check that each asked mode can run on this machine.

    ``hybrid+llm`` needs the LLM server's ``/health`` to answer 200; ``hybrid+cross-encoder``
    needs ``rerank.model`` and a model that loads (checked when its reranker warms up).

    Raises:
        ValueError: a mode is not one of :data:`ALL_MODES`.
    """
    unknown = [m for m in asked if m not in ALL_MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; choose from {', '.join(ALL_MODES)}")
    runnable: list[str] = []
    skipped: dict[str, str] = {}
    for mode in dict.fromkeys(asked):
        reason = _why_not(mode, settings)
        if reason:
            skipped[mode] = reason
        else:
            runnable.append(mode)
    return ModePlan(tuple(runnable), skipped)


def _why_not(mode: str, settings: Settings) -> str | None:
    if mode == "hybrid+cross-encoder" and not settings.rerank.model:
        return "no cross-encoder model (rerank.model) is configured on this machine"
    if mode == "hybrid+onnx":
        model_dir = onnx_model_dir(settings.rerank, rerank_models_dir(settings))
        if not (model_dir / "model.onnx").is_file():
            return f"no ONNX rerank model at {model_dir} (`ragstream rerank train`)"
    if mode == "hybrid+llm":
        url = settings.llm.base_url + "/health"
        try:
            if httpx.get(url, timeout=5.0).status_code != httpx.codes.OK:
                return f"LLM server not healthy at {url}"
        except httpx.HTTPError as exc:
            return f"LLM server unreachable at {url}: {exc}"
    return None


def build_reranker(settings: Settings, backend: str) -> Reranker:
    """The rerank pool's reranker with ``backend`` swapped in, warmed up.

    The ``llm`` backend sends at most ``llm.n_parallel`` requests at once (see the code).

    Raises:
        ConfigurationError: the backend cannot be built or its model cannot be loaded.
    """
    rerank = settings.rerank.model_copy(update={"backend": backend})
    reranker = make_reranker(rerank, settings.llm.base_url, models_dir=rerank_models_dir(settings))
    if isinstance(reranker, LlmReranker):
        # At most one request per server slot: requests queued inside llama.cpp count against
        # the client's timeout, and 30 pairs sent at once time out on 2 cores. Scores do not
        # depend on concurrency.
        reranker.max_concurrency = min(reranker.max_concurrency, settings.llm.n_parallel)
    reranker.warm_up()
    return reranker


class ModeRunner:
    """Ranked chunk lists of a batch of questions for each mode.

    Args:
        es: Elasticsearch client (given).
        alias: the chunk index alias to search.
        settings: the settings tree; ``retrieval`` sizes the lists, ``rerank`` configures the
            rerankers and the per-document cap.

    Each request carries its tenant and ``top_n`` (the fused candidates kept by ``hybrid``
    and reranked by ``hybrid+*``).
    """

    def __init__(self, es: Elasticsearch, alias: str, settings: Settings) -> None:
        self.es = es
        self.alias = alias
        self.settings = settings
        self.hybrid = HybridRetriever(es, alias, settings.retrieval)
        self._rerankers: dict[str, Reranker] = {}

    def single_lists(
        self, requests: Sequence[QueryRequest], vectors: npt.NDArray[np.floating[Any]]
    ) -> tuple[list[list[Candidate]], list[list[Candidate]]]:
        """``(bm25 lists, knn lists)``, one ``_msearch`` with the retrieval pool's bodies.

        Args:
            requests: the questions as query requests (tenant set).
            vectors: ``(len(requests), dim)`` L2-normalised query embeddings.

        Raises:
            TransientError: Elasticsearch unreachable or overloaded (408/429/5xx).
            PermanentError: Elasticsearch refused the request or one search (400: a
                :class:`~workers.retrieval.hybrid.QueryRejectedError`).
        """
        pairs = self.hybrid.search_pairs(requests, vectors)
        bm25 = [_candidates(b, "bm25") for b, _ in pairs]
        knn = [_candidates(k, "knn") for _, k in pairs]
        return bm25, knn

    def fused(
        self, requests: Sequence[QueryRequest], vectors: npt.NDArray[np.floating[Any]]
    ) -> list[list[Candidate]]:
        """``hybrid``: :meth:`HybridRetriever.search_batch` (the retrieval pool's call)."""
        return self.hybrid.search_batch(requests, vectors)

    def reranked(
        self, backend: str, requests: Sequence[QueryRequest], fused: Sequence[list[Candidate]]
    ) -> list[list[Candidate]]:
        """``hybrid+<backend>``: each question's fused candidates scored in one call, then
        ordered by :func:`select_top_k` with ``rerank.max_chunks_per_doc``.

        Raises:
            ConfigurationError: the backend cannot be built or loaded.
            TransientError: the backend's server failed (``llm``).
        """
        reranker = self._rerankers.get(backend)
        if reranker is None:
            reranker = self._rerankers[backend] = build_reranker(self.settings, backend)
        cap = self.settings.rerank.max_chunks_per_doc
        out: list[list[Candidate]] = []
        for request, candidates in zip(requests, fused, strict=True):
            (scores,) = score_top_n(
                reranker.score,
                [(question_of(request), [rerank_text(c) for c in candidates])],
                self.settings.rerank.top_n,
            )
            out.append(select_top_k(candidates, scores, len(candidates), cap))
        return out


def _candidates(response: Mapping[str, Any], which: str) -> list[Candidate]:
    out = []
    for rank, hit in enumerate(response["hits"]["hits"], start=1):
        src = hit.get("_source") or {}
        out.append(
            Candidate(
                chunk_id=hit["_id"],
                doc_id=str(src.get("doc_id", "")),
                text=str(src.get("text", "")),
                title=str(src.get("title") or ""),
                source=str(src.get("source") or ""),
                score=float(hit.get("_score") or 0.0),
                bm25_rank=rank if which == "bm25" else None,
                knn_rank=rank if which == "knn" else None,
            )
        )
    return out


__all__ = [
    "ALL_MODES",
    "BASE_MODES",
    "RERANK_BACKENDS",
    "ModePlan",
    "ModeRunner",
    "build_reranker",
    "plan_modes",
    "rerank_text",
]
