"""What ``ragstream bench query`` offers: the modes, their rates and SLOs (no heavy imports)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.stats import RateSearch

#: Modes: ``retrieval`` (retrieval + rerank + evidence, routed to the ``small`` LLM tier and
#: finished on ``rag.reranked.small``), ``full`` (the same through generation, finished on
#: ``rag.responses``) and ``evidence`` (routed to the evidence tier, no LLM: the answer is
#: quoted evidence, finished on ``rag.responses``).
RETRIEVAL, FULL, EVIDENCE = "retrieval", "full", "evidence"
MODES = (RETRIEVAL, FULL, EVIDENCE)


@dataclass(frozen=True)
class ModePlan:
    """One mode's load.

    Attributes:
        mode: ``retrieval`` or ``full``.
        rates: offered rates in requests/s, or, when ``relative``, multiples of the sequential
            baseline's measured throughput (so the steps resolve the speed-up itself).
        seconds: how long each rate is offered (s).
        p99_ms: the SLO's p99 end-to-end latency (ms).
        deadline_s: each request's deadline (s after it is sent).
        baseline_s: how long the sequential baseline runs (s).
        relative: whether ``rates`` are multiples of the baseline.
        search: step then bisect (:class:`bench.stats.RateSearch`) from the first of the
            offered rates instead of offering the fixed sequence; its ``start_per_s`` is
            replaced by that rate.
    """

    mode: str
    rates: tuple[float, ...]
    seconds: float
    p99_ms: float
    deadline_s: float
    baseline_s: float
    relative: bool = False
    search: RateSearch | None = None

    def offered(self, baseline_per_s: float) -> tuple[float, ...]:
        """The rates to offer (requests/s, three significant digits) given the baseline's
        throughput (requests/s)."""
        if not self.relative:
            return self.rates
        return tuple(float(f"{r * baseline_per_s:.3g}") for r in self.rates)

    def rates_text(self) -> str:
        """``rates`` as the CLI writes them: ``x0.5,x1,x2`` (relative) or ``5,10,20``."""
        mark = "x" if self.relative else ""
        return ",".join(f"{mark}{r:g}" for r in self.rates)


def parse_rates(text: str) -> tuple[tuple[float, ...], bool]:
    """``(rates, relative)`` from ``"5,10,20"`` (requests/s) or ``"x0.5,x1,x2"`` (multiples of
    the baseline).

    Raises:
        ValueError: empty, mixed, non-numeric or non-positive rates.
    """
    items = [t.strip() for t in text.split(",") if t.strip()]
    relative = bool(items) and all(t.startswith("x") for t in items)
    if not items or (not relative and any(t.startswith("x") for t in items)):
        raise ValueError(f"rates must be all absolute or all xN multiples: {text!r}")
    rates = tuple(float(t.removeprefix("x")) for t in items)
    if any(r <= 0 for r in rates):
        raise ValueError(f"rates must be positive: {text!r}")
    return rates, relative


#: Defaults for a 2-core machine, as multiples of the sequential baseline, so the steps are
#: fine around what one process can do. The p99 SLOs: an interactive retrieval step or
#: evidence answer within 1 s; a whole generated answer within 15 s (the Haystack reference
#: in DESIGN.md takes 13.3 s at p50, sequentially). A step lasts long enough that an
#: overloaded rate's growing queue pushes p99 past the target within it. The evidence tier's
#: sustainable rate is searched (x0.5 of the baseline, doubling, then three bisections) in
#: 10 s steps: a few rates, short windows.
DEFAULT_PLANS = {
    RETRIEVAL: ModePlan(
        RETRIEVAL, (0.5, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 6, 8), 15, 1000, 10, 20, relative=True
    ),
    FULL: ModePlan(
        FULL, (0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3), 90, 15000, 60, 60, relative=True
    ),
    EVIDENCE: ModePlan(
        EVIDENCE, (0.5,), 10, 1000, 10, 15, relative=True, search=RateSearch(1.0, bisections=3)
    ),
}
