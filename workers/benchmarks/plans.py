"""What ``ragstream bench query`` offers: the modes, their rates and SLOs (no heavy imports)."""

from __future__ import annotations

from dataclasses import dataclass

#: Modes: ``retrieval`` (retrieval + rerank, finished on ``rag.reranked.*``) and ``full``
#: (through generation, finished on ``rag.responses``).
RETRIEVAL, FULL = "retrieval", "full"


@dataclass(frozen=True)
class ModePlan:
    """One mode's load: offered ``rates`` (requests/s) for ``seconds`` each, the SLO's p99
    (ms), each request's deadline (s) and the sequential baseline's duration (s)."""

    mode: str
    rates: tuple[float, ...]
    seconds: float
    p99_ms: float
    deadline_s: float
    baseline_s: float


#: Defaults for a 2-core machine: retrieval + rerank does tens of requests/s, generation with
#: Gemma 3 270M on CPU a fraction of one (MODELS.md: ~3.5 s per answer). The p99 targets: an
#: interactive retrieval step within 1 s; a whole generated answer within 15 s (the Haystack
#: reference in DESIGN.md takes 13.3 s at p50, sequentially). A step lasts long enough that
#: an overloaded rate's growing queue pushes p99 past the target within it.
DEFAULT_PLANS = {
    RETRIEVAL: ModePlan(RETRIEVAL, (5, 10, 20, 30, 40, 60, 80, 100, 120), 15, 1000, 10, 20),
    FULL: ModePlan(FULL, (0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0), 90, 15000, 60, 60),
}
