"""The floor of ``bench query`` and the CPU it counts, without services: the per-process
accounting, each stage timed alone and fed the previous one's outputs, the floor's sum, and
where a mode's core-ms per request are read."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest

from bench.query.cpu import SELF, ProcessSet, attributed_ms, listening_pids, service_ports
from bench.query.floor import STAGES, StageCost, floor_core_ms, measure_floor, time_stage
from bench.query.load import request_factory
from bench.query.run import mode_services, operating_point
from ragstream.settings import Settings
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from workers.runtime.handler import Emit


class ScriptedCpu(ProcessSet):
    """A :class:`ProcessSet` whose samples add fixed CPU seconds per call of ``sample``."""

    def __init__(self, step: dict[str, float]) -> None:
        super().__init__({k: 1 for k in step if k != SELF}, {})
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "now", dict.fromkeys(step, 0.0))

    def sample(self) -> dict[str, float]:
        out = dict(self.now)  # type: ignore[attr-defined]
        for k, v in self.step.items():  # type: ignore[attr-defined]
            self.now[k] += v  # type: ignore[attr-defined]
        return out


def test_attributed_cpu_is_the_delta_less_the_idle_background() -> None:
    start = {SELF: 1.0, "elasticsearch": 10.0, "redis": 5.0}
    end = {SELF: 1.5, "elasticsearch": 10.8, "redis": 5.01, "gone": 3.0}
    used = attributed_ms(start, end, wall_s=2.0, idle_cores={"elasticsearch": 0.1, "redis": 1})
    # ES: 0.8 s less 0.1 cores x 2 s; Redis below its background counts 0, never negative
    assert used == {SELF: 500.0, "elasticsearch": 600.0, "redis": 0.0}


def test_a_stage_is_timed_per_call_over_all_its_calls() -> None:
    cpu = ScriptedCpu({SELF: 0.2, "elasticsearch": 0.4})
    # a background larger than the stage's use zeroes the service; the raw bound keeps it
    cost, _ = time_stage(
        "msearch", lambda x: x, [1, 2], cpu, {"elasticsearch": 1e6}, services=("elasticsearch",)
    )
    assert cost.by_process == {SELF: 100.0, "elasticsearch": 0.0}
    assert cost.core_ms == 100.0 and cost.raw_core_ms == 300.0
    cost, out = time_stage("msearch", lambda x: x * 2, [1, 2, 3, 4], cpu, {})
    assert out == [2, 4, 6, 8]
    assert cost.calls == 4 and cost.stage == "msearch"
    assert cost.by_process == {SELF: 50.0}  # 0.2 s over 4 calls; ES is not called
    assert cost.core_ms == 50.0
    cost, _ = time_stage("msearch", lambda x: x, [1, 2, 3, 4], cpu, {}, services=("elasticsearch",))
    assert cost.by_process == {SELF: 50.0, "elasticsearch": 100.0}  # 0.4 s over 4
    assert cost.core_ms == 150.0
    with pytest.raises(ValueError, match="no inputs"):
        time_stage("embed", lambda x: x, [], cpu, {})


def test_the_floor_is_the_sum_of_the_stages_alone() -> None:
    def stage(name: str, core_ms: float) -> StageCost:
        return StageCost(name, 10, core_ms, core_ms, {SELF: core_ms}, None)

    costs = [stage("embed", 12.25), stage("msearch", 8.5), stage("llm", 2900.0)]
    assert floor_core_ms(costs) == 2920.8  # rounded to 0.1
    assert floor_core_ms([]) == 0.0


def _candidates(request: QueryRequest) -> list[Any]:
    from topics.retrieved import Candidate

    return [
        Candidate(chunk_id=f"c{i}", doc_id=f"d{i}", text=f"port 5432 text {i}", score=1 / i)
        for i in range(1, 8)
    ]


class FakePipeline:
    """The components :func:`measure_floor` calls, recording the order of the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        retriever = SimpleNamespace(
            search_pairs=lambda qs, v: self._log("msearch", [({"hits": {"hits": []}},) * 2]),
            fuse=lambda q, b, k: self._log("fusion", _candidates(q)),
            with_preceding=lambda found, sources: self._log("preceding", found),
        )
        self.embedder = SimpleNamespace(embed=lambda texts: self._log("embed", [[0.0, 1.0]]))
        self.retriever = retriever
        self.versions = SimpleNamespace(get=lambda tenant: self._log("version", 3))
        self.cache = SimpleNamespace(
            get_exact=lambda r, v: None,
            get_semantic=lambda r, vec, v: None,
            remember_query_vector=lambda r, vec: self._log("remember", None),
        )
        self.router = SimpleNamespace(route=lambda r, vec: self._log("route", "small"))
        self.reranker = SimpleNamespace(score=lambda pairs: [1.0] * len(pairs))
        self.rerank_settings = SimpleNamespace(max_chunks_per_doc=2, backend="none")
        self.batches: list[Any] = []
        self.evidence = SimpleNamespace(run=self._evidence)
        self.generators = {"small": SimpleNamespace(run=self._generate)}

    def _evidence(self, batch: Any) -> list[Any]:
        self.calls.append("evidence")
        self.batches.append(batch)
        return [None]

    def _log(self, name: str, value: Any) -> Any:
        self.calls.append(name)
        return value

    def _generate(self, events: list[RerankedPassages]) -> list[Emit]:
        self.calls.append("llm")
        e = events[0]
        answer = QueryResponse(tenant=e.tenant, request_id=e.request.request_id,
                               status="answered", answer="5432 [1]")  # fmt: skip
        return [Emit(SimpleNamespace(), answer)]  # type: ignore[arg-type]

    def reranked(self, request: QueryRequest) -> RerankedPassages:
        return RerankedPassages(
            tenant=request.tenant, request=request, passages=tuple(_candidates(request))
        )


def test_measure_floor_times_every_stage_of_the_mode_in_order() -> None:
    p = FakePipeline()
    make = request_factory(["Which port?"], "t", 60.0, False, 7, route="small")

    cpu = ScriptedCpu({SELF: 0.01})
    floor = measure_floor(p, make, n=3, n_llm=2, processes=cpu, idle_cores={}, full=False)  # type: ignore[arg-type]
    assert [s["stage"] for s in floor["stages"]] == list(STAGES[:-1])  # no LLM stage
    assert all(s["calls"] == 3 for s in floor["stages"])
    assert floor["core_ms"] == round(sum(s["core_ms"] for s in floor["stages"]), 1)
    assert floor["llm_calls"] == 0 and floor["llm_answered"] is None
    # each stage ran all its calls before the next began
    order = [c for c in p.calls if c in {"embed", "msearch", "fusion", "preceding", "evidence"}]
    assert (
        order
        == ["embed"] * 3 + ["msearch"] * 3 + ["fusion"] * 3 + ["preceding"] * 3 + ["evidence"] * 3
    )
    # the evidence stage saw each request with its reranked top K
    [(request, top, tier)] = p.batches[-1]
    assert len(top) == request.top_k == 5 and tier == "small"
    assert top[0].chunk_id == "c1"
    p = FakePipeline()
    floor = measure_floor(p, make, n=2, n_llm=2, processes=cpu, idle_cores={}, full=True)  # type: ignore[arg-type]
    assert [s["stage"] for s in floor["stages"]] == list(STAGES)
    assert floor["stages"][-1]["calls"] == 2 and floor["llm_answered"] == 2
    with pytest.raises(ValueError):
        measure_floor(p, make, n=0, n_llm=1, processes=cpu, idle_cores={}, full=False)  # type: ignore[arg-type]


def test_the_services_of_a_mode_are_found_by_their_listening_port() -> None:
    s = Settings()
    assert service_ports(s) == {"elasticsearch": 9200, "redis": 6379, "kafka": 9092, "llm": 8081}
    assert "llm" not in mode_services(s, "evidence")
    assert "llm" in mode_services(s, "full")
    llm_rerank = s.model_copy(update={"rerank": replace_rerank(s, "llm")})
    assert "llm" in mode_services(llm_rerank, "retrieval")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        import os

        assert listening_pids({"mine": port}) == {"mine": os.getpid()}
    assert listening_pids({"nobody": port}) == {}  # closed: nothing listens


def replace_rerank(s: Settings, backend: str) -> Any:
    return s.rerank.model_copy(update={"backend": backend})


def test_core_ms_are_read_at_the_sustainable_rate_else_the_lowest() -> None:
    rates = [
        {"offered_per_s": 4.0, "met_slo": True, "process_core_ms_per_request": 60.0,
         "core_ms_per_request": 90.0, "core_ms_by_process": {"bench": 5.0}},
        {"offered_per_s": 8.0, "met_slo": False, "process_core_ms_per_request": 50.0,
         "core_ms_per_request": 70.0},
    ]  # fmt: skip
    op = operating_point(rates, 4.0)
    assert op["at_offered_per_s"] == 4.0 and op["core_ms_per_request"] == 60.0
    assert op["machine_core_ms_per_request"] == 90.0 and op["met_slo"]
    none_met = operating_point(rates, 0.0)
    assert none_met["at_offered_per_s"] == 4.0 and none_met["core_ms_by_process"] == {"bench": 5.0}
    assert operating_point([], 1.0) == {}
