"""Operator metrics move (issue 16): answers by tier, status and code, counted once per
request; LLM requests, time to first token, latency and tokens; the generation pool's
``ragstream_errors_total`` after a BACKEND_UNAVAILABLE; queue wait and query age per pool; and
label sets that exist at 0 before anything happened."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import REGISTRY, generate_latest

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.retry import RetryPolicy
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages
from topics.responses import ErrorCode, ErrorInfo, QueryResponse
from topics.retrieved import Candidate
from workers.errors import BackendUnavailableError
from workers.generation.backend import GenerationRequest, GenerationResult, OnTokenFor
from workers.generation.generator import Generator
from workers.generation.prompt import PromptBuilder
from workers.metrics import answer_labels, init_answer_labels
from workers.pools.delivery import record_responses
from workers.runtime.metrics import init_pool, observe_pickup


def value(name: str, **labels: str) -> float:
    """The sample's current value; 0 when it does not exist yet (deltas are what we test)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Words:
    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


class Backend:
    """Answers with a fixed result, or raises ``error`` for every request."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    async def generate_many(
        self,
        requests: Sequence[GenerationRequest],
        on_token_for: OnTokenFor | None = None,
        cancel_for: object = None,
    ) -> list[GenerationResult | Exception]:
        if self.error is not None:
            return [self.error for _ in requests]
        return [
            GenerationResult(
                r.request_id, "VACUUM reclaims storage [1].", 50, 7, "stop", 250.0, 1500.0
            )
            for r in requests
        ]

    async def aclose(self) -> None:
        return None


def _generator(backend: Backend, tier: str = "small") -> Generator:
    return Generator(
        backend,  # type: ignore[arg-type]
        PromptBuilder(Words(), 600, 64, "chat"),
        tokens=None,
        cache_keys=None,
        tier=tier,
        backoff=RetryPolicy(max_attempts=1),
    )


def _event(age_s: float = 0.0) -> RerankedPassages:
    now = dt.datetime.now(dt.UTC)
    request = QueryRequest(
        tenant="t",
        query="What does VACUUM do?",
        deadline=now + dt.timedelta(minutes=1),
        created_at=now - dt.timedelta(seconds=age_s),
    )
    passage = Candidate(chunk_id="c1", doc_id="d1", text="VACUUM reclaims storage.", score=1.0)
    return RerankedPassages(tenant="t", request=request, passages=(passage,), created_at=now)


def _run(generator: Generator, event: RerankedPassages) -> QueryResponse:
    try:
        [out] = generator.run([event])
    finally:
        generator.close()
    response = out.event  # type: ignore[union-attr]
    assert isinstance(response, QueryResponse)
    return response


def test_backend_unavailable_is_on_the_generation_pools_endpoint() -> None:
    errors = {"pool": "generation-small", "error_class": "BackendUnavailableError"}
    before = value("ragstream_errors_total", **errors)
    llm = {"tier": "small", "outcome": "BACKEND_UNAVAILABLE"}
    llm_before = value("ragstream_llm_requests_total", **llm)
    stage = {"stage": "generation-small", "code": "BACKEND_UNAVAILABLE"}
    stage_before = value("ragstream_error_responses_total", **stage)

    response = _run(_generator(Backend(BackendUnavailableError("connection refused"))), _event())

    assert response.error is not None and response.error.code == ErrorCode.BACKEND_UNAVAILABLE
    assert value("ragstream_errors_total", **errors) == before + 1
    assert value("ragstream_llm_requests_total", **llm) == llm_before + 1
    assert value("ragstream_error_responses_total", **stage) == stage_before + 1
    exposed = generate_latest(REGISTRY).decode()
    assert (
        'ragstream_errors_total{error_class="BackendUnavailableError",pool="generation-small"}'
        in (exposed)
    )


def test_a_timeout_is_its_own_outcome() -> None:
    labels = {"tier": "small", "outcome": "timeout"}
    before = value("ragstream_llm_requests_total", **labels)
    error = BackendUnavailableError("no first token within 60s")
    error.__cause__ = TimeoutError()
    _run(_generator(Backend(error)), _event())
    assert value("ragstream_llm_requests_total", **labels) == before + 1


def test_an_answer_moves_ttft_latency_and_tokens() -> None:
    tier = {"tier": "large"}
    ttft_count = value("ragstream_llm_time_to_first_token_seconds_count", **tier)
    ttft_sum = value("ragstream_llm_time_to_first_token_seconds_sum", **tier)
    latency_sum = value("ragstream_llm_request_duration_seconds_sum", **tier)
    prompt = value("ragstream_llm_tokens_total", tier="large", kind="prompt")
    completion = value("ragstream_llm_tokens_total", tier="large", kind="completion")
    ok = value("ragstream_llm_requests_total", tier="large", outcome="ok")

    response = _run(_generator(Backend(), tier="large"), _event())

    assert response.status == "answered"
    assert value("ragstream_llm_time_to_first_token_seconds_count", **tier) == ttft_count + 1
    assert (
        abs(value("ragstream_llm_time_to_first_token_seconds_sum", **tier) - ttft_sum - 0.25) < 1e-9
    )
    assert (
        abs(value("ragstream_llm_request_duration_seconds_sum", **tier) - latency_sum - 1.5) < 1e-9
    )
    assert value("ragstream_llm_tokens_total", tier="large", kind="prompt") == prompt + 50
    assert value("ragstream_llm_tokens_total", tier="large", kind="completion") == completion + 7
    assert value("ragstream_llm_requests_total", tier="large", outcome="ok") == ok + 1


def test_label_sets_exist_at_zero_before_the_first_error() -> None:
    _generator(Backend(), tier="zero").close()
    assert (
        REGISTRY.get_sample_value(
            "ragstream_llm_requests_total", {"tier": "zero", "outcome": "BACKEND_UNAVAILABLE"}
        )
        == 0.0
    )
    errors = {"pool": "generation-zero", "error_class": "BackendUnavailableError"}
    assert REGISTRY.get_sample_value("ragstream_errors_total", errors) == 0.0
    init_answer_labels()
    for labels in (
        {"tier": "evidence", "status": "answered", "code": "none"},
        {"tier": "small", "status": "failed", "code": "BACKEND_UNAVAILABLE"},
        {"tier": "none", "status": "failed", "code": "DEADLINE_EXCEEDED"},
    ):
        assert REGISTRY.get_sample_value("ragstream_answers_total", labels) is not None, labels
    init_pool("pool-zero")
    for name in ("ragstream_events_in_total", "ragstream_dead_letters_total"):
        assert REGISTRY.get_sample_value(name, {"pool": "pool-zero"}) == 0.0
    assert (
        REGISTRY.get_sample_value("ragstream_queue_wait_seconds_count", {"pool": "pool-zero"})
        == 0.0
    )


def _response(request_id: str, **fields: object) -> QueryResponse:
    return QueryResponse(tenant="t", request_id=request_id, **fields)  # type: ignore[arg-type]


def test_answer_labels_name_the_tier_of_an_llm_error() -> None:
    answered = _response("a", status="answered", answer="x", tier="evidence")
    failed = _response(
        "b",
        status="failed",
        error=ErrorInfo(
            code=ErrorCode.BACKEND_UNAVAILABLE, message="down", stage="generation-large"
        ),
    )
    expired = _response(
        "c",
        status="failed",
        error=ErrorInfo(code=ErrorCode.DEADLINE_EXCEEDED, message="late", stage="retrieval"),
    )
    assert answer_labels(answered) == ("evidence", "answered", "none")
    assert answer_labels(failed) == ("large", "failed", "BACKEND_UNAVAILABLE")
    assert answer_labels(expired) == ("none", "failed", "DEADLINE_EXCEEDED")


def test_the_delivery_pool_counts_each_request_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    labels = {"tier": "small", "status": "failed", "code": "BACKEND_UNAVAILABLE"}
    answered = {"tier": "cache", "status": "answered", "code": "none"}
    before, answered_before = (
        value("ragstream_answers_total", **labels),
        value("ragstream_answers_total", **answered),
    )
    error = ErrorInfo(code=ErrorCode.BACKEND_UNAVAILABLE, message="down", stage="generation-small")
    failed = _response("r1", status="failed", error=error)
    hit = _response("r2", status="answered", answer="x", tier="cache")

    record_responses(sessions, [failed, hit])
    record_responses(sessions, [failed, hit])  # a replay: nothing new is final

    assert value("ragstream_answers_total", **labels) == before + 1
    assert value("ragstream_answers_total", **answered) == answered_before + 1


def test_queue_wait_and_query_age_per_pool() -> None:
    pool = {"pool": "generation-test"}
    wait_sum = value("ragstream_queue_wait_seconds_sum", **pool)
    age_sum = value("ragstream_query_age_seconds_sum", **pool)
    event = _event(age_s=10.0)
    now = event.created_at + dt.timedelta(seconds=2)

    observe_pickup("generation-test", [event], now)

    assert abs(value("ragstream_queue_wait_seconds_sum", **pool) - wait_sum - 2.0) < 1e-6
    assert abs(value("ragstream_query_age_seconds_sum", **pool) - age_sum - 12.0) < 1e-6
    # A producer's clock ahead of ours counts 0 s, never a negative wait.
    observe_pickup("generation-test", [event], event.created_at - dt.timedelta(seconds=5))
    assert abs(value("ragstream_queue_wait_seconds_sum", **pool) - wait_sum - 2.0) < 1e-6
