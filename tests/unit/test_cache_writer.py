"""One writer of the answer cache: the delivery pool stores; the answering stages only say where.

The structural test reads every call of every serving module with ``ast``: a second module
that writes the answer cache (``.store(``/``.put(`` on a name holding ``cache``, the embedding
cache aside) fails it, naming the file and line. The behavioural tests show the answering
stages put the keys on the response instead of writing.
"""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path

from ragstream.settings import PoolSettings, RerankSettings
from topics.queries import QueryRequest
from topics.registry import RESPONSES
from topics.responses import QueryResponse
from topics.retrieved import Candidate, RetrievedCandidates
from workers.caches import CacheHit, CacheKeys, exact_key
from workers.evidence.answer import AnswerPolicy
from workers.evidence.select import EvidenceSelector
from workers.evidence.stage import EvidenceStage
from workers.pools.rerank import rerank_handler
from workers.routing import TierPolicy
from workers.runtime.handler import Emit

ROOT = Path(__file__).resolve().parents[2]
SERVING = ("api", "workers", "ingest", "topics", "entry", "bench", "ragstream")
#: The module that writes the answer cache, and the cache's own module (``put`` calls ``store``).
WRITERS = {"workers/pools/delivery.py", "workers/caches.py"}


def _cache_writes(tree: ast.AST) -> list[int]:
    """Lines of ``<something named *cache*>.store(...)`` / ``.put(...)`` calls (not the
    embedding cache's)."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in {"store", "put"}:
            continue
        receiver = ast.unparse(node.func.value).lower()
        if "cache" in receiver and "emb" not in receiver:
            lines.append(node.lineno)
    return lines


def test_only_the_delivery_pool_writes_the_answer_cache() -> None:
    found = {}
    for package in SERVING:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            lines = _cache_writes(ast.parse(path.read_text(), filename=rel))
            if lines:
                found[rel] = lines
    assert set(found) <= WRITERS, f"answer cache written outside the delivery pool: {found}"
    assert "workers/pools/delivery.py" in found  # and the delivery pool does write it


def test_the_structural_check_sees_a_second_writer() -> None:
    bad = ast.parse("def f(r, resp, v):\n    self.cache.put(r, resp, v)\n    cache.store(resp)\n")
    assert _cache_writes(bad) == [2, 3]
    assert _cache_writes(ast.parse("self.embedding_cache.put(k, v)\n")) == []


def _event(query: str) -> RetrievedCandidates:
    request = QueryRequest(
        tenant="t", query=query, deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    )
    text = (
        "deadlock_timeout (integer)\nThis is the amount of time to wait on a lock before "
        "checking for a deadlock. The default is one second (1s)."
    )
    candidate = Candidate(chunk_id="c1", doc_id="d1", text=text, title="t", score=1.0)
    return RetrievedCandidates(
        tenant="t", request=request, candidates=(candidate,), tier="small", index_version=7
    )


def test_an_evidence_answer_carries_its_cache_keys_and_the_stage_writes_nothing() -> None:
    selector = EvidenceSelector(None)  # type: ignore[arg-type]
    stage = EvidenceStage(selector, AnswerPolicy(max_spans=1), TierPolicy("evidence"))
    keys = CacheKeys("cfg")
    handler = rerank_handler(
        _KeepOrder(), RerankSettings(), pool=PoolSettings(), evidence=stage, cache_keys=keys
    )
    event = _event("What is the default deadlock timeout?")
    [emit] = [o for o in handler.fn([event]) if isinstance(o, Emit) and o.topic == RESPONSES]
    response = emit.event
    assert isinstance(response, QueryResponse) and response.tier == "evidence"
    assert response.cache_keys == keys.of(event.request, 7)
    assert response.cache_keys.exact == exact_key(event.request, 7, "cfg")
    # Without keys (no cache configured) the answer is not cacheable.
    bare = rerank_handler(_KeepOrder(), RerankSettings(), pool=PoolSettings(), evidence=stage)
    [plain] = [o for o in bare.fn([event]) if isinstance(o, Emit) and o.topic == RESPONSES]
    assert isinstance(plain.event, QueryResponse) and plain.event.cache_keys is None


def test_a_cache_hit_is_readdressed_without_keys_so_it_is_never_stored_again() -> None:
    event = _event("q")
    cached = QueryResponse(
        tenant="t",
        request_id="old",
        status="answered",
        answer="a",
        cache_keys=CacheKeys().of(event.request, 7),
    )
    served = CacheHit(cached, "exact").readdress(event.request, "api")
    assert served.cache_keys is None and served.request_id == event.request.request_id


class _KeepOrder:
    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        return [-float(i) for i in range(len(pairs))]
