"""The answer tier is decided in one place (issue 36): :func:`workers.routing.choose_tier`, by
the rerank pool with or without the evidence stage; the retrieval pool's router only suggests."""

from __future__ import annotations

import datetime as dt
import inspect

import pytest

import workers.evidence.stage as stage
import workers.pools.rerank as rerank
from topics.queries import QueryRequest
from workers.evidence.answer import AnswerPolicy
from workers.evidence.select import Evidence, Span
from workers.routing import TierPolicy, choose_tier, llm_tier


def _request(route: str = "auto") -> QueryRequest:
    return QueryRequest(
        tenant="t", query="What is the default port?", route=route,
        deadline=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30),
    )  # fmt: skip


def _evidence(score: float) -> Evidence:
    span = Span(1, "c1", "d", 0, 30, "The default port is 5432.", score, fit=1.0)
    return Evidence(spans=(span,), confidence=score)


@pytest.mark.parametrize(("suggested", "tier"), [("small", "small"), ("large", "large"),
                                                 ("evidence", "small")])  # fmt: skip
def test_without_evidence_the_suggestion_decides_as_an_llm_tier(suggested: str, tier: str) -> None:
    assert choose_tier(_request(), suggested, None, None, TierPolicy()) == (tier, "suggested")
    assert llm_tier(suggested) == tier


def test_with_evidence_the_gate_the_route_and_the_policy_decide() -> None:
    policy = AnswerPolicy(min_confidence=0.5)
    auto = TierPolicy(mode="auto", evidence_min_confidence=0.8)
    assert choose_tier(_request(), "large", _evidence(0.9), policy, auto)[0] == "evidence"
    assert choose_tier(_request(), "large", _evidence(0.6), policy, auto)[0] == "large"
    assert choose_tier(_request("small"), "large", _evidence(0.9), policy, auto) == (
        "small",
        "forced",
    )
    assert choose_tier(_request("large"), "small", _evidence(0.1), policy, auto)[0] == "evidence"
    assert choose_tier(_request(), "small", _evidence(0.6), policy, TierPolicy(mode="llm")) == (
        "small",
        "policy",
    )


def test_no_other_module_decides_a_tier() -> None:
    for module in (stage, rerank):
        source = inspect.getsource(module)
        assert "def choose_tier" not in source and "def _llm_tier" not in source
