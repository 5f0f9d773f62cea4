"""Scaling the pools on their consumer groups' lag on one machine (issue 26, item 3).

What KEDA's ``ScaledObject`` s (``entry/keda.py``) do in Kubernetes, the supervisor does with
``--autoscale``: every ``settings.scaling.check_interval_s`` it reads each pool's lag
(:class:`topics.lag.GroupLag`: end offsets minus the group's commits on the pool's input
topic) and

- starts one more process of the pool when the lag per process has stayed above the pool's
  ``lag_threshold`` for ``scale_up_after_s`` (as KEDA's target of ``lagThreshold`` per
  replica), up to ``max_replicas`` and never beyond the topic's partitions (a consumer more
  than partitions would idle);
- stops the newest added process when the lag has stayed 0 for ``idle_after_s``, down to the
  processes the Procfile runs (the supervisor never stops those).

An added process is ``<pool>+<n>`` running the pool's Procfile command with its metrics port
off (``RAGSTREAM_POOLS__<POOL>__METRICS_PORT=0``: the port is the first process's). The
consumer group rebalances on each join and leave; nothing else changes.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ragstream.settings import PoolScaling, ScalingSettings


class Supervisor(Protocol):
    """What the autoscaler needs of the supervisor (:class:`entry.supervisor.Supervisor`):
    the supervisor imports this module for ``--autoscale``, never the other way round."""

    def add(self, name: str, command: str) -> None:
        """Start ``command`` as process ``name``."""

    def remove(self, name: str) -> None:
        """Stop process ``name`` for good."""

    def log(self, event: str, **fields: object) -> None:
        """One log line."""


#: A Procfile command that runs a pool: ``[VAR=... ]ragstream worker NAME``.
_POOL_COMMAND = re.compile(r"(?:^|\s|/)ragstream\s+worker\s+([\w-]+)\s*$")


def pool_of(command: str) -> str | None:
    """The pool a Procfile command runs (``ragstream worker NAME``), else ``None``."""
    match = _POOL_COMMAND.search(command)
    return match.group(1) if match else None


@dataclass
class LagPolicy:
    """When to add or remove one process of a pool, from its lag over time.

    Args:
        floor: Processes never removed (the Procfile's).
        ceiling: Most processes (``max_replicas``, capped at the topic's partitions).
        lag_threshold: Target lag per process, in records.
        up_after_s: How long the lag per process must stay above the threshold.
        idle_after_s: How long the lag must stay 0.
    """

    floor: int
    ceiling: int
    lag_threshold: int
    up_after_s: float
    idle_after_s: float
    _high_since: float | None = field(default=None, repr=False)
    _idle_since: float | None = field(default=None, repr=False)

    def decide(self, lag: int, processes: int, now: float) -> int:
        """``+1`` (start one), ``-1`` (stop one) or ``0``, for ``lag`` records behind with
        ``processes`` running at monotonic time ``now`` (seconds). After a change the
        condition must hold for a whole period again before the next one."""
        if lag > self.lag_threshold * max(processes, 1):
            self._idle_since = None
            if self._high_since is None:
                self._high_since = now
            if processes < self.ceiling and now - self._high_since >= self.up_after_s:
                self._high_since = now
                return +1
            return 0
        self._high_since = None
        if lag > 0:
            self._idle_since = None
            return 0
        if self._idle_since is None:
            self._idle_since = now
        if processes > self.floor and now - self._idle_since >= self.idle_after_s:
            self._idle_since = now
            return -1
        return 0


@dataclass
class ScaledPool:
    """One pool under :class:`Autoscaler`: what to run, where its lag is, how far to go."""

    pool: str
    command: str
    group: str
    topic: str
    policy: LagPolicy
    base: int
    added: list[str] = field(default_factory=list)
    peak: int = 0

    @property
    def processes(self) -> int:
        return self.base + len(self.added)


def scaled_command(pool: str, command: str) -> str:
    """``command`` with the pool's metrics port off (the first process holds the port)."""
    var = f"RAGSTREAM_POOLS__{pool.replace('-', '_').upper()}__METRICS_PORT"
    return f"export {var}=0; {command}"


def policy_for(
    bounds: PoolScaling, scaling: ScalingSettings, base: int, partitions: int
) -> LagPolicy:
    """The :class:`LagPolicy` of a pool with ``base`` Procfile processes whose input topic has
    ``partitions`` partitions: never below ``base`` (the Procfile's processes stay), at most
    ``max_replicas`` and the partitions (or ``base``, if the Procfile runs more)."""
    return LagPolicy(
        floor=base,
        ceiling=max(base, min(bounds.max_replicas, partitions)),
        lag_threshold=bounds.lag_threshold,
        up_after_s=scaling.scale_up_after_s,
        idle_after_s=scaling.idle_after_s,
    )


class Autoscaler:
    """Adds and removes pool processes of ``supervisor`` on their lag (see the module).

    Args:
        supervisor: Runs the processes (:meth:`Supervisor.add`, :meth:`Supervisor.remove`).
        pools: The pools to scale.
        read_lag: ``(group, topic) -> records behind``; raising skips that pool this round
            (Kafka away: no decision on a lag not seen).
        interval_s: Seconds between two rounds.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        supervisor: Supervisor,
        pools: list[ScaledPool],
        read_lag: Callable[[str, str], int],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.supervisor = supervisor
        self.pools = pools
        self._read_lag = read_lag
        self._interval_s = interval_s
        self._clock = clock
        self._stopping = threading.Event()
        self._serial = 0
        for pool in pools:
            pool.peak = pool.processes

    def step(self) -> None:
        """One round: read each pool's lag, start or stop at most one process of each."""
        for pool in self.pools:
            try:
                lag = self._read_lag(pool.group, pool.topic)
            except Exception as exc:  # Kafka away or the topic not there yet: next round
                self.supervisor.log("autoscale.lag_unknown", pool=pool.pool, error=repr(exc))
                continue
            change = pool.policy.decide(lag, pool.processes, self._clock())
            if change > 0:
                self._serial += 1
                name = f"{pool.pool}+{self._serial}"
                self.supervisor.add(name, scaled_command(pool.pool, pool.command))
                pool.added.append(name)
                pool.peak = max(pool.peak, pool.processes)
                self.supervisor.log(
                    "autoscale.up", pool=pool.pool, lag=lag, processes=pool.processes, name=name
                )
            elif change < 0 and pool.added:
                name = pool.added.pop()
                self.supervisor.remove(name)
                self.supervisor.log(
                    "autoscale.down", pool=pool.pool, lag=lag, processes=pool.processes, name=name
                )

    def run(self) -> None:
        """Rounds every ``interval_s`` until :meth:`stop`."""
        while not self._stopping.wait(self._interval_s):
            self.step()

    def stop(self) -> None:
        """Ask :meth:`run` to return."""
        self._stopping.set()


def procfile_pools(
    commands: dict[str, str],
    scaling: ScalingSettings,
    groups: Callable[[str], str],
    topics: dict[str, tuple[str, int]],
) -> list[ScaledPool]:
    """The :class:`ScaledPool` s of a Procfile's ``{name: command}``: one per pool it runs
    (``ragstream worker NAME``; the first such command is the one repeated), with ``groups``
    giving a pool's consumer group and ``topics`` its input ``(topic, partitions)``."""
    found: dict[str, ScaledPool] = {}
    for command in commands.values():
        pool = pool_of(command)
        if pool is None or pool not in topics:
            continue
        if pool in found:
            found[pool].base += 1
            continue
        topic, partitions = topics[pool]
        found[pool] = ScaledPool(pool, command, groups(pool), topic, LagPolicy(1, 1, 1, 0, 0), 1)
    for scaled in found.values():
        topic, partitions = topics[scaled.pool]
        scaled.policy = policy_for(scaling.for_pool(scaled.pool), scaling, scaled.base, partitions)
    return list(found.values())


def lag_autoscaler(supervisor: Supervisor, commands: dict[str, str]) -> Autoscaler:
    """The :class:`Autoscaler` of a Procfile's pools from the settings (``settings.scaling``,
    the topic prefix, Kafka), reading lags with :class:`topics.lag.GroupLag`."""
    from ragstream.settings import get_settings
    from topics.lag import GroupLag
    from topics.registry import POOL_INPUTS, TopicRegistry
    from workers.runtime.build import pool_group

    settings = get_settings()
    registry = TopicRegistry(settings.kafka.topic_prefix)
    topics = {pool: (registry.name(spec), spec.partitions) for pool, spec in POOL_INPUTS.items()}
    pools = procfile_pools(
        commands, settings.scaling, lambda pool: pool_group(settings, pool), topics
    )
    return Autoscaler(
        supervisor, pools, GroupLag(settings.kafka).lag, settings.scaling.check_interval_s
    )
