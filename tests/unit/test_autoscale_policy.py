"""When the supervisor's autoscaler adds or removes a pool process (entry/autoscale.py), and
which Procfile processes it scales; the scaling itself runs in
tests/integration/test_autoscale.py against the real broker."""

from __future__ import annotations

from pathlib import Path

from entry.autoscale import LagPolicy, pool_of, procfile_pools, scaled_command
from ragstream.settings import PoolScaling, ScalingSettings


def _policy() -> LagPolicy:
    return LagPolicy(floor=1, ceiling=3, lag_threshold=100, up_after_s=10, idle_after_s=60)


def test_lag_above_the_threshold_for_a_while_adds_one_process_at_a_time() -> None:
    policy = _policy()
    assert policy.decide(500, 1, now=0) == 0  # high, not yet for long
    assert policy.decide(500, 1, now=9.9) == 0
    assert policy.decide(500, 1, now=10) == +1
    assert policy.decide(500, 2, now=15) == 0  # the next step needs another whole period
    assert policy.decide(500, 2, now=20) == +1
    assert policy.decide(5000, 3, now=40) == 0  # at the ceiling


def test_a_dip_below_the_threshold_restarts_the_wait() -> None:
    policy = _policy()
    assert policy.decide(500, 1, now=0) == 0
    assert policy.decide(50, 1, now=5) == 0
    assert policy.decide(500, 1, now=12) == 0
    assert policy.decide(500, 1, now=22) == +1
    # The threshold is per process: 250 behind with 3 processes is not high.
    assert policy.decide(250, 3, now=100) == 0 and policy.decide(250, 3, now=200) == 0


def test_idle_for_a_while_removes_one_process_down_to_the_floor() -> None:
    policy = _policy()
    assert policy.decide(0, 3, now=0) == 0
    assert policy.decide(3, 3, now=30) == 0  # not idle: the wait starts again
    assert policy.decide(0, 3, now=31) == 0
    assert policy.decide(0, 3, now=91) == -1
    assert policy.decide(0, 2, now=120) == 0
    assert policy.decide(0, 2, now=151) == -1
    assert policy.decide(0, 1, now=500) == 0  # the floor


PROCFILE = {
    "api": "ragstream api",
    "retrieval": "ragstream worker retrieval",
    "retrieval-2": "RAGSTREAM_POOLS__RETRIEVAL__METRICS_PORT=9107 ragstream worker retrieval",
    "generation-small": "ragstream worker generation-small",
    "unknown": "ragstream worker nothing-like-it",
}


def test_procfile_pools_are_found_with_their_processes_bounds_and_partitions() -> None:
    scaling = ScalingSettings(
        default=PoolScaling(max_replicas=8, lag_threshold=40),
        pools={"generation-small": PoolScaling(max_replicas=2, lag_threshold=8)},
    )
    topics = {"retrieval": ("p.rag.queries", 6), "generation-small": ("p.rag.reranked.small", 6)}
    pools = {
        p.pool: p for p in procfile_pools(PROCFILE, scaling, lambda n: f"p.ragstream-{n}", topics)
    }
    assert set(pools) == {"retrieval", "generation-small"}
    retrieval = pools["retrieval"]
    assert retrieval.base == 2 and retrieval.command == "ragstream worker retrieval"
    assert (retrieval.group, retrieval.topic) == ("p.ragstream-retrieval", "p.rag.queries")
    # max_replicas 8, but the topic has 6 partitions: a 7th consumer would idle.
    assert (retrieval.policy.floor, retrieval.policy.ceiling) == (2, 6)
    assert retrieval.policy.lag_threshold == 40
    small = pools["generation-small"].policy
    assert (small.floor, small.ceiling, small.lag_threshold) == (1, 2, 8)
    assert pool_of("X=1 ragstream worker generation-large") == "generation-large"
    assert pool_of("ragstream api") is None
    assert pool_of("exec /x/.venv/bin/ragstream worker rerank") == "rerank"
    assert scaled_command("generation-small", "ragstream worker generation-small") == (
        "export RAGSTREAM_POOLS__GENERATION_SMALL__METRICS_PORT=0; "
        "ragstream worker generation-small"
    )


def test_the_supervisors_autoscaler_covers_every_pool_of_the_procfile(tmp_path: Path) -> None:
    from entry.autoscale import lag_autoscaler
    from entry.supervisor import Supervisor, parse_procfile
    from ragstream.settings import PROJECT_ROOT
    from topics.registry import POOL_INPUTS

    commands = parse_procfile((PROJECT_ROOT / "Procfile").read_text())
    scaler = lag_autoscaler(Supervisor(commands, cwd=tmp_path, state_dir=tmp_path), commands)
    pools = {p.pool: p for p in scaler.pools}
    assert set(pools) == set(POOL_INPUTS)  # every pool the Procfile runs, nothing else
    retrieval = pools["retrieval"]
    assert retrieval.base == 2 and retrieval.topic.endswith("rag.queries")
    assert retrieval.group.endswith("ragstream-retrieval")
    assert pools["generation-large"].policy.ceiling == 2  # settings.scaling.pools
