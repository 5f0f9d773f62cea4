"""Answer caches in Redis: exact and semantic, scoped to a tenant and its index version.

- Exact: ``ragstream:answer:<tenant>:<index_version>:<sha256(normalised query + params)>`` ->
  the response JSON. The parameters include the asker's principal set
  (``QueryRequest.principals``, sorted), so an answer never crosses a permission boundary;
  the semantic scope too. Normalisation: Unicode NFKC, case-folded, whitespace collapsed, trailing
  punctuation dropped.
- Semantic: per ``(tenant, index_version, parameters)`` and embedding model, the cached query
  embeddings side by side in one string (``ragstream:semvec:...``: float32, appended in
  order, so a lookup is one ``GET`` and one matrix product), their request ids in a list
  (``ragstream:semids:...``, same order) and the responses in a hash by request id
  (``ragstream:semans:...``), read only for the best entry. A lookup takes the entry with the
  highest cosine similarity; it is a hit only at or above ``threshold`` (conservative by
  default). Vectors of another model (the pool followed a model change,
  ``ingest/model_follow.py``) live under another key and are never compared. Until 2026-12-02
  one hash held each vector (base64) beside its whole response, so every lookup fetched and
  JSON-decoded every cached answer of the key: the retrieval pool's largest cost after its
  embedding (issue 26).

A cache built with ``enabled=False`` (``cache.enabled``) reads and writes nothing: every lookup
is a miss that touches no Redis key and is not counted, and nothing is stored (the shadow pools of
``ragstream replay``).

One writer: the delivery pool (:mod:`workers.pools.delivery`) stores every answer that became
final, at the keys the stage that answered put on the response (``QueryResponse.cache_keys``,
computed by :class:`CacheKeys`); the API and the retrieval pool only read. See
``docs/answers.md`` (one writer of the answer cache) for why.

Every ingest commit bumps the tenant's index version (:mod:`index.versions`), so entries of an
older version are never read again (and expire by TTL): a cached answer cannot cite a deleted
or changed document. Redis errors degrade to misses.

As a defence in depth (issue 39), a cache given the registry's current readers (``readers``,
:class:`ragstream.db.acl.CurrentReaders`) re-checks every hit of an asker with principals
before serving it: a hit that cites or quotes a document the asker may no longer read (its
readers changed, and the version bump did not take the old entry out of reach) is a miss,
counted ``result="withheld"`` and logged. One SQL query of the cited ids, only on a hit; none
for a tenant-wide asker or a hit that cites nothing. A registry that cannot be read withholds
too (the pipeline answers, with the search's own readers filter).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import redis
import structlog
from prometheus_client import Counter
from sqlalchemy.exc import SQLAlchemyError

from ragstream.settings import Settings
from topics.answers import CACHE_STAGE, is_refusal
from topics.base import StageTiming
from topics.queries import QueryRequest
from topics.responses import AnswerCacheKeys, QueryResponse
from workers.conversation import last_answer, question_of
from workers.runtime.handler import derive_event_id

log = structlog.get_logger(__name__)

CACHE_LOOKUPS = Counter(
    "ragstream_answer_cache_total",
    "Answer cache lookups by kind and result (hit, miss, or withheld: a hit citing a document "
    "the asker may no longer read, served as a miss).",
    ["kind", "result"],
)
PREFIX = "ragstream:answer:"
#: The cached query vectors of one semantic key and model: float32, one after another.
SEM_VECTORS_PREFIX = "ragstream:semvec:"
#: Their request ids, in the same order (a list).
SEM_IDS_PREFIX = "ragstream:semids:"
#: The responses of one semantic key, by request id (a hash).
SEM_ANSWERS_PREFIX = "ragstream:semans:"
PENDING_PREFIX = "ragstream:semcache-pending:"
#: Separates the pending vector's model id from its float32 bytes (model ids hold no "|").
VECTOR_TAG = b"|"


def normalise_query(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed, trailing ``?!.`` and spaces removed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", folded).strip().rstrip("?!. ")


def answer_config(settings: Settings) -> str:
    """A short digest of what shapes an answer beyond the index: the rerank, evidence and
    generation settings, the served model and the code that composes answers
    (:func:`answer_code`). It is part of every cache key, so that answers of another
    configuration (an upgrade, a new default tier or model) are never served."""
    shaping = {
        "rerank": settings.rerank.model_dump(mode="json"),
        "evidence": settings.evidence.model_dump(mode="json"),
        "generation": settings.generation.model_dump(mode="json"),
        "llm": [settings.llm.model, str(settings.llm.model_path), settings.llm.prompt_style],
        "code": answer_code(),
    }
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:12]


#: The modules of :mod:`workers` that compose an answer from the passages (packages and files):
#: a new evidence rule changes answers as much as a new setting does.
ANSWER_CODE = ("evidence", "generation", "rerank", "citations.py", "routing.py")


@functools.cache
def answer_code() -> str:
    """The digest of this installation's :data:`ANSWER_CODE` (:func:`code_digest`), read once.

    Until 2026-12-02 only the settings were part of the key: after an upgrade that changed how
    evidence answers are composed, the demo served its earlier answers from the cache for a day.
    """
    return code_digest(Path(__file__).parent, ANSWER_CODE)


def code_digest(root: Path, names: Sequence[str]) -> str:
    """SHA-256 (12 hex digits) of the ``.py`` files of ``names`` under ``root`` (a package
    folder: every file in it, in path order), with their relative paths; a missing name
    counts as empty."""
    digest = hashlib.sha256()
    for name in names:
        path = root / name
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
        for file in files:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def exact_key(request: QueryRequest, index_version: int, config: str = "") -> str:
    """Cache key of ``request``: tenant, index version, the normalised question it answers
    (:func:`workers.conversation.question_of`: a follow-up's standalone question), parameters
    and the answer configuration (:func:`answer_config`). A follow-up's key also holds the
    digest of the last turn's answer, which its own answer never repeats."""
    params: dict[str, Any] = {
        "config": config,
        "q": normalise_query(question_of(request)),
        "top_n": request.top_n,
        "top_k": request.top_k,
        "filters": [f.model_dump(mode="json") for f in request.filters],
        "route": request.route,
    }
    if request.max_tokens is not None:  # a shorter budget is another answer
        params["max_tokens"] = request.max_tokens
    if last_answer(request):
        params["after"] = hashlib.sha256(last_answer(request).encode()).hexdigest()[:16]
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


class ChecksReaders(Protocol):
    """Who may read documents now (:class:`ragstream.db.acl.CurrentReaders`)."""

    def unreadable(
        self, tenant: str, doc_ids: Collection[str], principals: Sequence[str] | None
    ) -> set[str]:
        """The ids among ``doc_ids`` of ``tenant`` an asker with ``principals`` may not read."""
        ...


class AnswerCache:
    """Exact and semantic answer caches.

    Args:
        client: Redis client.
        ttl_s: expiry of entries, seconds.
        threshold: minimum cosine similarity of a semantic hit (0.95 by default: paraphrases
            with the same meaning, not merely the same topic).
        max_entries: semantic entries kept per ``(tenant, index_version)``.
        config: the answer configuration (:func:`answer_config`), part of every key.
        enabled: ``False``: read and write nothing (``cache.enabled``).
        readers: the registry's current readers, which every hit of an asker with principals
            is re-checked against before it is served (``None``: no re-check; the index
            version alone keeps stale answers out of reach).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        ttl_s: int = 24 * 3600,
        threshold: float = 0.95,
        max_entries: int = 2000,
        config: str = "",
        enabled: bool = True,
        readers: ChecksReaders | None = None,
    ) -> None:
        self.config = config
        self.enabled = enabled
        self.readers = readers
        self.keys = CacheKeys(config)
        self._r = client
        self.ttl_s = ttl_s
        self.threshold = threshold
        self.max_entries = max_entries

    def get_exact(self, request: QueryRequest, index_version: int) -> CacheHit | None:
        """The cached response of an identical (normalised) query, or ``None``."""
        if not self.enabled:
            return None
        try:
            raw = self._r.get(exact_key(request, index_version, self.config))
        except redis.RedisError as exc:
            log.warning("answer_cache.redis_error", error=str(exc))
            raw = None
        hit = CacheHit(QueryResponse.model_validate_json(raw), "exact") if raw else None
        return self._served(request, hit, "exact")

    def get_semantic(
        self,
        request: QueryRequest,
        vector: np.ndarray[Any, Any],
        index_version: int,
        model_id: str = "",
    ) -> CacheHit | None:
        """The best cached response whose query embedding, made by ``model_id``, is within
        ``threshold``.

        One ``GET`` of the key's vectors and one matrix product on a miss; the response is read
        (``LINDEX`` of its request id, ``HGET``) only for a hit.

        Args:
            request: the query (its tenant and answer parameters choose the key).
            vector: its embedding, ``(dim,)`` float32, L2-normalised.
            index_version: the tenant's index version.
            model_id: the model that made ``vector``.
        """
        key = _sem_key(request, index_version, self.config)
        query = np.asarray(vector, dtype=np.float32).ravel()
        best: tuple[float, Any] | None = None
        if not self.enabled:
            return None
        try:
            blob = self._r.get(SEM_VECTORS_PREFIX + _model_key(key, model_id))
            if isinstance(blob, bytes) and blob and len(blob) % (query.size * 4) == 0:
                sims = np.frombuffer(blob, dtype=np.float32).reshape(-1, query.size) @ query
                i = int(np.argmax(sims))
                if float(sims[i]) >= self.threshold:
                    rid = self._r.lindex(SEM_IDS_PREFIX + _model_key(key, model_id), i)
                    body = self._r.hget(SEM_ANSWERS_PREFIX + key, rid) if rid else None
                    best = (float(sims[i]), body) if body else None
        except redis.RedisError as exc:
            log.warning("answer_cache.redis_error", error=str(exc))
        hit = None
        if best is not None:
            response = QueryResponse.model_validate_json(best[1])
            hit = CacheHit(response, "semantic", round(best[0], 4))
        return self._served(request, hit, "semantic")

    def _served(self, request: QueryRequest, hit: CacheHit | None, kind: str) -> CacheHit | None:
        """``hit`` unless it is withheld from ``request``'s asker (:meth:`_withheld`), counted
        by ``kind`` and result (``hit``, ``miss`` or ``withheld``)."""
        if hit is not None and self._withheld(request, hit):
            CACHE_LOOKUPS.labels(kind, "withheld").inc()
            return None
        CACHE_LOOKUPS.labels(kind, "hit" if hit else "miss").inc()
        return hit

    def _withheld(self, request: QueryRequest, hit: CacheHit) -> bool:
        """Whether ``hit`` cites or quotes a document the asker of ``request`` may not read
        now (``readers``; no query for a tenant-wide asker or a hit that cites nothing), or
        whether that cannot be told (the registry unreadable)."""
        if self.readers is None or request.principals is None:
            return False
        answer = hit.response
        cited = {c.doc_id for c in answer.citations} | {e.doc_id for e in answer.evidence}
        if not cited:
            return False
        try:
            unreadable = self.readers.unreadable(request.tenant, cited, request.principals)
        except SQLAlchemyError as exc:
            log.warning(
                "answer_cache.readers_unavailable", kind=hit.kind, tenant=request.tenant,
                request_id=request.request_id, error=str(exc),
            )  # fmt: skip
            return True
        if unreadable:
            log.info(
                "answer_cache.withheld", kind=hit.kind, tenant=request.tenant,
                request_id=request.request_id, doc_ids=sorted(unreadable),
            )  # fmt: skip
        return bool(unreadable)

    def remember_query_vector(
        self, request: QueryRequest, vector: np.ndarray[Any, Any], model_id: str = ""
    ) -> None:
        """Keep the query's embedding, tagged with the ``model_id`` that made it, until its
        answer arrives (see :meth:`put`)."""
        if not self.enabled:
            return
        data = model_id.encode() + VECTOR_TAG + np.asarray(vector, dtype=np.float32).tobytes()
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

        Two round trips when the vector is known (the exact entry with ``GETDEL`` of the
        pending vector; then the semantic entry in one transaction, so vectors and ids stay in
        step), one otherwise. When a key holds more than ``max_entries`` vectors it starts
        over (a crude bound).

        A truncated answer (cut at the token budget, or a looping completion cut short) is not
        cached, nor a degraded one (a step shed under load): asked again, the question gets a
        fresh try instead of the cut or lesser text. A refusal (:func:`topics.answers.is_refusal`)
        is cached exactly and never semantically: the same words asked again of the same
        documents get the same refusal, but a paraphrase may use the documents' own words and be
        answerable where the first wording was refused (issue 39), so it gets a fresh try.

        Returns:
            True when something was written; False for a disabled cache, a failed or truncated
            response, one without keys (a cache hit, an error) or a Redis error (logged; a
            cache write never fails a batch).
        """
        keys = response.cache_keys
        if not self.enabled or response.status != "answered" or keys is None:
            return False
        if response.truncated or response.degraded:
            return False
        body = response.model_dump_json()
        try:
            pipe = self._r.pipeline(transaction=False)
            pipe.set(keys.exact, body, ex=self.ttl_s)
            pipe.getdel(PENDING_PREFIX + response.request_id)
            pending = pipe.execute()[1]
            if not pending or is_refusal(response.answer or ""):
                return True
            tag, _, raw = bytes(pending).partition(VECTOR_TAG)
            vectors = SEM_VECTORS_PREFIX + _model_key(keys.semantic, tag.decode())
            ids = SEM_IDS_PREFIX + _model_key(keys.semantic, tag.decode())
            answers = SEM_ANSWERS_PREFIX + keys.semantic
            tx = self._r.pipeline(transaction=True)
            tx.append(vectors, raw)
            tx.rpush(ids, response.request_id)
            tx.hset(answers, response.request_id, body)
            for name in (vectors, ids, answers):
                tx.expire(name, self.ttl_s)
            length = tx.execute()[0]
            if raw and length > self.max_entries * len(raw):
                self._r.delete(vectors, ids)  # crude bound: start over
        except redis.RedisError as exc:
            log.warning("answer_cache.redis_error", error=str(exc))
            return False
        return True


def _model_key(key: str, model_id: str) -> str:
    """The semantic key ``key`` of the vectors of one embedding model."""
    return f"{key}:{model_id}"


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
    if last_answer(request):  # a follow-up is served only an answer given after the same one
        params["after"] = hashlib.sha256(last_answer(request).encode()).hexdigest()[:16]
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    return f"{request.tenant}:{index_version}:{digest}"
