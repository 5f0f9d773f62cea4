"""Answer caches in Redis: exact and semantic, scoped to a tenant and its index version.

- Exact: ``ragstream:answer:<tenant>:<index_version>:<sha256(normalised query + params)>`` ->
  the response JSON. The parameters include the asker's principal set
  (``QueryRequest.principals``, sorted), so an answer never crosses a permission boundary;
  the semantic scope too. Normalisation: Unicode NFKC, case-folded, whitespace collapsed, trailing
  punctuation dropped.
- Semantic: one hash per ``(tenant, index_version)`` whose fields are request ids and whose
  values hold the query embedding (tagged with its model id, ``<model id>|<base64>``) and the
  response. A lookup takes the entry of the same model with the highest cosine similarity; it
  is a hit only at or above ``threshold`` (conservative by default). Vectors of another model
  (the pool followed a model change, ``ingest/model_follow.py``) are never compared.

One writer: the delivery pool (:mod:`workers.pools.delivery`) stores every answer that became
final, at the keys the stage that answered put on the response (``QueryResponse.cache_keys``,
computed by :class:`CacheKeys`); the API and the retrieval pool only read. See
``docs/answers.md`` (one writer of the answer cache) for why.

Every ingest commit bumps the tenant's index version (:mod:`ingest.versions`), so entries of an
older version are never read again (and expire by TTL): a cached answer cannot cite a deleted
or changed document. Redis errors degrade to misses.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
import structlog
from prometheus_client import Counter

from ragstream.settings import Settings
from topics.answers import CACHE_STAGE
from topics.base import StageTiming
from topics.queries import QueryRequest
from topics.responses import AnswerCacheKeys, QueryResponse
from workers.runtime.handler import derive_event_id

log = structlog.get_logger(__name__)

CACHE_LOOKUPS = Counter(
    "ragstream_answer_cache_total", "Answer cache lookups by kind and result.", ["kind", "result"]
)
PREFIX = "ragstream:answer:"
SEM_PREFIX = "ragstream:semcache:"
PENDING_PREFIX = "ragstream:semcache-pending:"
#: Separates a semantic entry's model id from its base64 vector.
VECTOR_TAG = "|"


def normalise_query(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed, trailing ``?!.`` and spaces removed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", folded).strip().rstrip("?!. ")


def answer_config(settings: Settings) -> str:
    """A short digest of what shapes an answer beyond the index: the rerank, evidence and
    generation settings and the served model. It is part of every cache key, so that answers
    of another configuration (an upgrade, a new default tier or model) are never served."""
    shaping = {
        "rerank": settings.rerank.model_dump(mode="json"),
        "evidence": settings.evidence.model_dump(mode="json"),
        "generation": settings.generation.model_dump(mode="json"),
        "llm": [settings.llm.model, str(settings.llm.model_path), settings.llm.prompt_style],
    }
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:12]


def exact_key(request: QueryRequest, index_version: int, config: str = "") -> str:
    """Cache key of ``request``: tenant, index version, normalised query, parameters and the
    answer configuration (:func:`answer_config`)."""
    params = {
        "config": config,
        "q": normalise_query(request.query),
        "top_n": request.top_n,
        "top_k": request.top_k,
        "filters": [f.model_dump(mode="json") for f in request.filters],
        "route": request.route,
    }
    if request.max_tokens is not None:  # a shorter budget is another answer
        params["max_tokens"] = request.max_tokens
    if request.principals is not None:  # never crosses a permission boundary
        params["principals"] = sorted(set(request.principals))
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
    return f"{PREFIX}{request.tenant}:{index_version}:{digest}"


@dataclass(frozen=True, slots=True)
class CacheKeys:
    """Where the answer of a request is cached: what the stage that answers puts on its
    response (``QueryResponse.cache_keys``) for the delivery pool to store it at.

    Args:
        config: the answer configuration (:func:`answer_config`) of the answering pool.
    """

    config: str = ""

    def of(self, request: QueryRequest, index_version: int) -> AnswerCacheKeys:
        """The exact key and the semantic hash of ``request`` answered against
        ``index_version``."""
        return AnswerCacheKeys(
            exact=exact_key(request, index_version, self.config),
            semantic=_sem_key(request, index_version, self.config),
        )


@dataclass(frozen=True, slots=True)
class CacheHit:
    """A cached response and how it was found (``exact`` or ``semantic``, with similarity)."""

    response: QueryResponse
    kind: str
    similarity: float = 1.0

    def readdress(
        self, request: QueryRequest, at: str, started: dt.datetime | None = None
    ) -> QueryResponse:
        """The cached response re-addressed to ``request`` (the one place a hit is re-addressed).

        Its ``event_id`` is derived from the request's (a replayed request gets the same id), its
        tenant, request id and ``callback_url`` are the request's, and its trace is the
        request's plus a ``cache`` stage (``detail``: ``kind``, ``similarity`` and ``at``, the
        process that found the hit: ``api`` or ``retrieval``).

        Args:
            request: the request the hit answers.
            at: where the hit was found.
            started: when the lookup started (UTC; default now).
        """
        timing = StageTiming(
            stage=CACHE_STAGE,
            started_at=started or dt.datetime.now(dt.UTC),
            duration_ms=0.0,
            detail={"kind": self.kind, "similarity": self.similarity, "at": at},
        )
        return self.response.model_copy(
            update={
                "event_id": derive_event_id(request.event_id, CACHE_STAGE),
                "tenant": request.tenant,
                "request_id": request.request_id,
                "trace": (*request.trace, timing),
                "callback_url": request.callback_url,
                "cache_keys": None,  # a hit is served, never stored again
            }
        )


class AnswerCache:
    """Exact and semantic answer caches.

    Args:
        client: Redis client.
        ttl_s: expiry of entries, seconds.
        threshold: minimum cosine similarity of a semantic hit (0.95 by default: paraphrases
            with the same meaning, not merely the same topic).
        max_entries: semantic entries kept per ``(tenant, index_version)``.
        config: the answer configuration (:func:`answer_config`), part of every key.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        ttl_s: int = 24 * 3600,
        threshold: float = 0.95,
        max_entries: int = 2000,
        config: str = "",
    ) -> None:
        self.config = config
        self.keys = CacheKeys(config)
        self._r = client
        self.ttl_s = ttl_s
        self.threshold = threshold
        self.max_entries = max_entries

    def get_exact(self, request: QueryRequest, index_version: int) -> CacheHit | None:
        """The cached response of an identical (normalised) query, or ``None``."""
        try:
            raw = self._r.get(exact_key(request, index_version, self.config))
        except redis.RedisError as exc:
            log.warning("answer_cache.redis_error", error=str(exc))
            raw = None
        CACHE_LOOKUPS.labels("exact", "hit" if raw else "miss").inc()
        if not raw:
            return None
        return CacheHit(QueryResponse.model_validate_json(raw), "exact")

    def get_semantic(
        self,
        request: QueryRequest,
        vector: np.ndarray[Any, Any],
        index_version: int,
        model_id: str = "",
    ) -> CacheHit | None:
        """The best cached response whose query embedding, made by ``model_id``, is within
        ``threshold``."""
        try:
            raw: dict[Any, Any] = self._r.hgetall(_sem_key(request, index_version, self.config))
        except redis.RedisError as exc:
            log.warning("answer_cache.redis_error", error=str(exc))
            raw = {}
        best: tuple[float, Any] | None = None
        for value in raw.values():
            entry = json.loads(value)
            tag, _, data = str(entry["v"]).rpartition(VECTOR_TAG)  # base64 has no "|"
            cached = np.frombuffer(base64.b64decode(data), dtype=np.float32)
            if tag != model_id or cached.shape != vector.shape:
                continue
            sim = float(np.dot(cached, vector))
            if sim >= self.threshold and (best is None or sim > best[0]):
                best = (sim, value)
        CACHE_LOOKUPS.labels("semantic", "hit" if best else "miss").inc()
        if best is None:
            return None
        response = QueryResponse.model_validate(json.loads(best[1])["r"])
        return CacheHit(response, "semantic", round(best[0], 4))

    def remember_query_vector(
        self, request: QueryRequest, vector: np.ndarray[Any, Any], model_id: str = ""
    ) -> None:
        """Keep the query's embedding, tagged with the ``model_id`` that made it, until its
        answer arrives (see :meth:`put`)."""
        encoded = base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes())
        data = model_id.encode() + VECTOR_TAG.encode() + encoded if model_id else encoded
        try:
            self._r.set(PENDING_PREFIX + request.request_id, data, ex=3600)
        except redis.RedisError as exc:
            log.warning("answer_cache.redis_error", error=str(exc))

    def put(self, request: QueryRequest, response: QueryResponse, index_version: int) -> None:
        """Cache ``response`` as the answer of ``request`` against ``index_version`` (the keys
        :meth:`CacheKeys.of` gives, then :meth:`store`)."""
        keys = self.keys.of(request, index_version)
        self.store(response.model_copy(update={"cache_keys": keys}))

    def store(self, response: QueryResponse) -> bool:
        """Cache an answered ``response`` at its ``cache_keys``: exactly, and semantically when
        the retrieval pool remembered its query vector (:meth:`remember_query_vector`).

        Returns:
            True when something was written; False for a failed response, one without keys
            (a cache hit, an error) or a Redis error (logged; a cache write never fails a
            batch).
        """
        keys = response.cache_keys
        if response.status != "answered" or keys is None:
            return False
        body = response.model_dump_json()
        pending = PENDING_PREFIX + response.request_id
        try:
            pipe = self._r.pipeline()
            pipe.set(keys.exact, body, ex=self.ttl_s)
            vector = self._r.get(pending)
            if vector:
                entry = json.dumps({"v": vector.decode(), "r": json.loads(body)})  # type: ignore[union-attr]
                pipe.hset(keys.semantic, response.request_id, entry)
                pipe.expire(keys.semantic, self.ttl_s)
                pipe.delete(pending)
            pipe.execute()
            if vector and self._r.hlen(keys.semantic) > self.max_entries:
                self._r.delete(keys.semantic)  # crude bound: start over
        except redis.RedisError as exc:
            log.warning("answer_cache.redis_error", error=str(exc))
            return False
        return True


def _sem_key(request: QueryRequest, index_version: int, config: str) -> str:
    params = {
        "config": config,
        "top_k": request.top_k,
        "filters": [f.model_dump(mode="json") for f in request.filters],
        # A forced answer tier is never served another tier's answer.
        "route": request.route,
    }
    if request.max_tokens is not None:
        params["max_tokens"] = request.max_tokens
    if request.principals is not None:
        params["principals"] = sorted(set(request.principals))
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    return f"{SEM_PREFIX}{request.tenant}:{index_version}:{digest}"
