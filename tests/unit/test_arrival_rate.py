"""The batch wait's gate: an exponentially weighted arrival rate, and a batch that waits only
while more events are expected in the rest of its wait."""

from __future__ import annotations

import math

import pytest

from workers.runtime.policy import ArrivalRate, BatchPolicy


def test_a_steady_stream_settles_at_its_rate() -> None:
    rate = ArrivalRate(tau_s=1.0)
    for i in range(200):  # one event every 100 ms for 20 s
        rate.observe(1, i * 0.1)
    settled = 1 / (1.0 * (1 - math.exp(-0.1)))  # the docstring's fixed point
    assert rate.per_s == pytest.approx(settled, rel=1e-6)
    assert 10.0 < rate.per_s < 10.6
    # decayed between observations: half a second later, the expectation has fallen by e^-0.5
    now = 19.9 + 0.5
    assert rate.expected(1.0, now) == pytest.approx(settled * math.exp(-0.5))


def test_nothing_seen_expects_nothing() -> None:
    assert ArrivalRate().expected(10.0, 5.0) == 0.0


def test_the_batch_waits_only_while_an_event_is_expected() -> None:
    policy = BatchPolicy(max_batch=32, max_wait_ms=10)
    quiet, busy = ArrivalRate(), ArrivalRate()
    for i in range(50):
        quiet.observe(1, i * 0.1)  # 10 a second: 0.1 events in 10 ms
        busy.observe(4, i * 0.01)  # 400 a second: 4 events in 10 ms
    assert not policy.keeps_waiting(quiet, 10, 4.9)
    assert policy.keeps_waiting(busy, 10, 0.49)
    assert not policy.keeps_waiting(busy, 0, 0.49)  # the wait is spent
    always = BatchPolicy(max_batch=32, max_wait_ms=10, wait_min_arrivals=0)
    assert always.keeps_waiting(quiet, 10, 4.9)  # the behaviour before: wait it all
    assert not always.keeps_waiting(quiet, 0, 4.9)
    with pytest.raises(ValueError, match="wait_min_arrivals"):
        BatchPolicy(wait_min_arrivals=-1)
