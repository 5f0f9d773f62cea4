"""What ``ragstream bench query`` offers: the modes, their rates and SLOs (no heavy imports)."""

from __future__ import annotations

from dataclasses import dataclass

#: Modes: ``retrieval`` (retrieval + rerank, finished on ``rag.reranked.*``) and ``full``
#: (through generation, finished on ``rag.responses``).
RETRIEVAL, FULL = "retrieval", "full"


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
    """

    mode: str
    rates: tuple[float, ...]
    seconds: float
    p99_ms: float
    deadline_s: float
    baseline_s: float
    relative: bool = False

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


#: Defaults for a 2-core machine, as multiples of the sequential baseline so the steps are
#: fine where the targets are (retrieval + rerank: 4x; full generation: 2x). The p99 targets:
#: an interactive retrieval step within 1 s; a whole generated answer within 15 s (the
#: Haystack reference in DESIGN.md takes 13.3 s at p50, sequentially). A step lasts long
#: enough that an overloaded rate's growing queue pushes p99 past the target within it.
DEFAULT_PLANS = {
    RETRIEVAL: ModePlan(
        RETRIEVAL, (0.5, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 6, 8), 15, 1000, 10, 20, relative=True
    ),
    FULL: ModePlan(
        FULL, (0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3), 90, 15000, 60, 60, relative=True
    ),
}
