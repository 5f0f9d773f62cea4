"""Shadow replay without services: which logged queries are chosen, how a candidate is checked
and turned into the shadow pools' settings, the submit-rate bound, and answer caches that are
off (issue 24, item 2)."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import QueryLog
from ragstream.settings import Settings
from replay import ReplayError
from replay.candidate import (
    Candidate,
    candidate_overrides,
    check_candidate,
    check_key,
    llm_pools,
    merge,
    parse_sets,
    settings_with,
    shadow_overrides,
)
from replay.pacing import Pacer, achieved_rate, max_in_window
from replay.pools import overrides_env
from replay.selection import Selection, parse_when, select_logged
from topics.queries import QueryRequest
from topics.responses import QueryResponse
from workers import query_log
from workers.caches import AnswerCache
from workers.pools.components import build_answer_cache

T0 = dt.datetime(2026, 12, 2, 5, 0, tzinfo=dt.UTC)


# -- selection -------------------------------------------------------------------------------


def _sessions(tmp_path: Path) -> sessionmaker[Session]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade_head(url)
    return make_session_factory(make_engine(url))


def _log(
    sessions: sessionmaker[Session], tenant: str, query: str, at: dt.datetime, final: bool = True
) -> str:
    request = QueryRequest(tenant=tenant, query=query, deadline=at + dt.timedelta(minutes=1))
    query_log.log_pending(sessions, request)
    with sessions.begin() as session:
        row = session.get(QueryLog, request.request_id)
        assert row is not None
        row.created_at = at
    if final:
        response = QueryResponse(
            tenant=tenant, request_id=request.request_id, status="answered", answer=f"A {query}"
        )
        with sessions.begin() as session:
            query_log.record_final(session, [response])
    return request.request_id


def test_selection_is_the_tenants_final_queries_in_the_window_oldest_first(
    tmp_path: Path,
) -> None:
    sessions = _sessions(tmp_path)
    ids = [_log(sessions, "acme", f"q{i}", T0 + dt.timedelta(minutes=i)) for i in range(6)]
    _log(sessions, "globex", "theirs", T0 + dt.timedelta(minutes=2))
    _log(sessions, "acme", "pending", T0 + dt.timedelta(minutes=3), final=False)
    window = Selection(
        "acme", T0 + dt.timedelta(minutes=1), T0 + dt.timedelta(minutes=5), sample=100
    )
    answers, in_window = select_logged(sessions, window)
    assert in_window == 4
    assert [a.request_id for a in answers] == ids[1:5]
    assert [a.query for a in answers] == ["q1", "q2", "q3", "q4"]
    assert all(a.status == "answered" and a.answer == f"A {a.query}" for a in answers)


def test_a_sample_is_seeded_and_kept_in_time_order(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    for i in range(30):
        _log(sessions, "acme", f"q{i:02d}", T0 + dt.timedelta(seconds=i))
    pick = Selection("acme", None, None, sample=7, seed=3)
    first, in_window = select_logged(sessions, pick)
    again, _ = select_logged(sessions, pick)
    other, _ = select_logged(sessions, Selection("acme", None, None, sample=7, seed=4))
    assert in_window == 30 and len(first) == 7
    assert [a.request_id for a in first] == [a.request_id for a in again]
    assert [a.request_id for a in other] != [a.request_id for a in first]
    assert [a.query for a in first] == sorted(a.query for a in first)


def test_an_empty_selection_says_what_the_tenant_has(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    _log(sessions, "acme", "old", T0)
    with pytest.raises(ReplayError, match=r"no logged query of tenant 'acme'.*has 1 in the query"):
        select_logged(sessions, Selection("acme", T0 + dt.timedelta(hours=1), None, sample=5))
    with pytest.raises(ReplayError, match=r"tenant 'nobody'.*has 0"):
        select_logged(sessions, Selection("nobody", None, None, sample=5))


def test_times_are_iso_utc_or_a_duration_ago() -> None:
    assert parse_when("2h", T0) == T0 - dt.timedelta(hours=2)
    assert parse_when("90s", T0) == T0 - dt.timedelta(seconds=90)
    assert parse_when("1d", T0) == T0 - dt.timedelta(days=1)
    assert parse_when("2026-12-01T10:30", T0) == dt.datetime(2026, 12, 1, 10, 30, tzinfo=dt.UTC)
    assert parse_when("2026-12-01T10:30+01:00", T0).hour == 9
    with pytest.raises(ReplayError, match="no time"):
        parse_when("yesterday", T0)


# -- the candidate ---------------------------------------------------------------------------


def test_set_keys_must_name_a_value_of_an_answer_section() -> None:
    check_key("retrieval.bm25_weight")
    check_key("generation.small.base_url")
    assert parse_sets(["retrieval.rrf_k = 20"]) == (("retrieval.rrf_k", "20"),)
    with pytest.raises(ReplayError, match=r"unknown setting 'retrieval.bm25_wieght'.*bm25_weight"):
        check_key("retrieval.bm25_wieght")
    with pytest.raises(ReplayError, match=r"cannot set 'kafka\.topic_prefix'"):
        check_key("kafka.topic_prefix")
    with pytest.raises(ReplayError, match=r"cannot set 'cache\.enabled'"):
        check_key("cache.enabled")
    with pytest.raises(ReplayError, match="is a section"):
        check_key("generation.small")
    with pytest.raises(ReplayError, match="is a value"):
        check_key("retrieval.rrf_k.deeper")
    with pytest.raises(ReplayError, match=r"SECTION\.FIELD=VALUE"):
        parse_sets(["retrieval.rrf_k"])


def test_an_unknown_tier_or_model_is_refused_by_name() -> None:
    settings = Settings()
    with pytest.raises(ReplayError, match=r"unknown tier 'huge': the tiers are auto, evidence"):
        candidate_overrides(Candidate(tier="huge"), settings)
    with pytest.raises(ReplayError, match=r"unknown model 'gpt-9': the catalog has gemma3-270m"):
        candidate_overrides(Candidate(model="gpt-9"), settings)


def test_the_candidate_becomes_the_shadow_pools_overrides() -> None:
    settings = Settings()
    live = candidate_overrides(Candidate(), settings)
    assert live == {"elasticsearch": {"index_alias": settings.elasticsearch.index_alias}}
    cand = Candidate(
        alias="chunks-v2",
        tier="small",
        model="qwen2.5-coder-0.5b-instruct",
        model_url="http://127.0.0.1:8082",
        sets=(("retrieval.bm25_weight", "1.0"),),
    )
    both = merge(candidate_overrides(cand, settings), shadow_overrides(settings, "r1"))
    env = overrides_env(both)
    assert env["RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS"] == "chunks-v2"
    assert env["RAGSTREAM_RETRIEVAL__BM25_WEIGHT"] == "1.0"
    assert env["RAGSTREAM_LLM__MODEL"] == "qwen2.5-coder-0.5b-instruct"
    assert env["RAGSTREAM_GENERATION__SMALL__PROMPT_STYLE"] == "chat"
    assert env["RAGSTREAM_GENERATION__LARGE__BASE_URL"] == "http://127.0.0.1:8082"
    prefix = f"{settings.kafka.topic_prefix}{settings.replay.topic_prefix}r1."
    assert env["RAGSTREAM_KAFKA__TOPIC_PREFIX"] == prefix
    assert env["RAGSTREAM_CACHE__ENABLED"] == "false"
    shadow = settings_with(both)
    assert shadow.kafka.topic_prefix == prefix and not shadow.cache.enabled
    assert shadow.retrieval.bm25_weight == 1.0 and shadow.generation.small.prompt_style == "chat"
    assert "RAGSTREAM_RETRIEVAL__BM25_WEIGHT" not in os.environ  # put back


def test_a_value_the_settings_refuse_is_refused_before_anything_starts() -> None:
    with pytest.raises(ReplayError, match=r"refused: retrieval.bm25_weight: .*greater than or"):
        settings_with({"retrieval": {"bm25_weight": "-1"}})
    with pytest.raises(ReplayError, match=r"refused: llm.*unknown llm.model 'nope'"):
        settings_with({"llm": {"model": "nope"}})


def _with(**sections: Any) -> Settings:
    return settings_with(sections)


def test_llm_pools_are_those_an_answer_can_reach() -> None:
    evidence_only = _with()
    assert evidence_only.evidence.tier_mode == "evidence"
    assert llm_pools(evidence_only, "auto") == ()
    assert llm_pools(evidence_only, "evidence") == ()
    assert llm_pools(evidence_only, "small") == ("generation-small",)
    assert llm_pools(evidence_only, "large") == ("generation-large",)
    routed = _with(evidence={"tier_mode": "auto"})
    assert llm_pools(routed, "auto") == ("generation-small", "generation-large")
    no_stage = _with(evidence={"enabled": "false"})
    assert llm_pools(no_stage, "auto") == ("generation-small", "generation-large")


def test_a_model_no_answer_uses_or_a_silent_model_server_is_refused() -> None:
    settings = _with()
    with pytest.raises(ReplayError, match=r"changes no answer.*--tier small"):
        check_candidate(Candidate(model="gemma3-270m"), settings)
    assert check_candidate(Candidate(), settings) == ("retrieval", "rerank")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    away = _with(generation={"small": {"base_url": closed}})
    with pytest.raises(ReplayError, match=f"small tier's model server at {closed} does not answer"):
        check_candidate(Candidate(tier="small"), away)


# -- the rate bound --------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_submissions_never_exceed_the_rate() -> None:
    clock = Clock()
    pacer = Pacer(2.5, 1000, clock=clock, sleep=clock.sleep)
    times = [pacer.wait_turn(lambda: 0) for _ in range(40)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.4 - 1e-9
    assert max_in_window(times) == 3  # ceil(2.5)
    assert achieved_rate(times) == pytest.approx(2.5, rel=0.01)


def test_submissions_wait_while_too_many_are_unanswered() -> None:
    clock = Clock()
    pacer = Pacer(1000, 2, clock=clock, sleep=clock.sleep)
    answered_at = 105.0  # both in flight until then
    checks = []
    pacer.wait_turn(lambda: 0)
    t = pacer.wait_turn(lambda: 2 if clock.now < answered_at else 1, lambda: checks.append(1))
    assert t >= answered_at and checks


def test_window_counts() -> None:
    assert max_in_window([]) == 0
    assert max_in_window([0.0, 0.5, 1.0, 1.5]) == 2
    assert max_in_window([0.0, 0.1, 0.2, 5.0]) == 3
    assert achieved_rate([1.0]) is None
    with pytest.raises(ValueError, match="rate_per_s"):
        Pacer(0, 1)


# -- answer caches off -----------------------------------------------------------------------


class Untouchable:
    """A Redis client that fails the test when anything is asked of it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a disabled cache called redis.{name}")


def test_a_disabled_answer_cache_reads_and_writes_nothing() -> None:
    import numpy as np

    cache = AnswerCache(Untouchable(), enabled=False)  # type: ignore[arg-type]
    request = QueryRequest(tenant="t", query="q", deadline=T0 + dt.timedelta(days=3650))
    response = QueryResponse(
        tenant="t", request_id=request.request_id, status="answered", answer="a"
    )
    vector = np.ones(4, dtype=np.float32) / 2
    assert cache.get_exact(request, 1) is None
    assert cache.get_semantic(request, vector, 1, "m") is None
    cache.remember_query_vector(request, vector, "m")
    cache.put(request, response, 1)


def test_the_cache_setting_reaches_the_pools_cache() -> None:
    assert build_answer_cache(_with()).enabled
    assert not build_answer_cache(_with(cache={"enabled": "false"})).enabled


def test_shadow_pool_processes_run_niced(tmp_path: Path) -> None:
    from replay.pools import PoolProcesses

    settings = _with()
    assert settings.replay.nice == 10
    niced = PoolProcesses(settings, {}, ("retrieval",), tmp_path, nice=settings.replay.nice)
    assert niced.command("retrieval")[:3] == ["nice", "-n", "10"]
    assert niced.command("retrieval")[-2:] == ["worker", "retrieval"]
    plain = PoolProcesses(settings, {}, ("retrieval",), tmp_path)
    assert plain.command("retrieval")[0] != "nice"
