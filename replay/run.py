"""One shadow replay, start to end: select, check, run on shadow topics, report.

Every check runs before a process starts (:func:`prepare`): the selection is not empty, the
candidate's settings, tier and model are known and its model server answers, the index alias
exists and holds the tenant's chunks. Then :func:`~replay.shadow.run_shadow` answers the
queries and :func:`~replay.report.build_report` compares.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import structlog

from ragstream.db.engine import make_engine, make_session_factory
from ragstream.settings import Settings
from replay import ReplayError
from replay.candidate import (
    Candidate,
    candidate_overrides,
    check_alias,
    check_candidate,
    merge,
    settings_with,
    shadow_overrides,
)
from replay.report import ReplayReport, build_report
from replay.selection import Selection, select_logged
from replay.shadow import Route, ShadowPlan, run_shadow
from topics.answers import Answer

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay, against what, how fast and where to write.

    Attributes:
        selection: the logged queries.
        candidate: the configuration to answer them with.
        out_dir: where the report and the shadow pools' logs go.
        rate_per_s: the submit-rate bound; ``None``: ``settings.replay.rate_per_s``.
        max_in_flight: the most unanswered submissions; ``None``: the settings'.
        run_id: names the shadow topics and requests; ``None``: ``r<UTC time><random>``.
    """

    selection: Selection
    candidate: Candidate
    out_dir: Path
    rate_per_s: float | None = None
    max_in_flight: int | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class Prepared:
    """A checked replay, ready to run."""

    logged: list[Answer]
    in_window: int
    plan: ShadowPlan
    chunks: int


def new_run_id(now: dt.datetime | None = None) -> str:
    """``r<yyyymmddThhmmss>-<6 hex>``: a run's id (topic-name safe)."""
    at = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S")
    return f"r{at}-{uuid.uuid4().hex[:6]}"


def prepare(settings: Settings, options: ReplayOptions) -> Prepared:
    """Select the queries and check the candidate (see the module docstring).

    Raises:
        ReplayError: an empty selection, an unknown setting, tier or model, a refused value, a
            missing alias or one without the tenant's chunks, a model server that does not
            answer.
        TransientError: Elasticsearch cannot be reached.
    """
    rate = options.rate_per_s or settings.replay.rate_per_s
    in_flight = options.max_in_flight or settings.replay.max_in_flight
    if rate <= 0 or in_flight < 1:
        raise ReplayError("--rate must be > 0 and --max-in-flight at least 1")
    run_id = options.run_id or new_run_id()
    overrides = merge(
        candidate_overrides(options.candidate, settings), shadow_overrides(settings, run_id)
    )
    shadow = settings_with(overrides)
    pools = check_candidate(options.candidate, shadow)
    chunks = check_alias(shadow, shadow.elasticsearch.index_alias, options.selection.tenant)
    sessions = make_session_factory(make_engine(settings.database_url))
    logged, in_window = select_logged(sessions, options.selection)
    plan = ShadowPlan(
        settings=shadow,
        overrides=overrides,
        pools=pools,
        route=cast(Route, options.candidate.tier),
        run_id=run_id,
        rate_per_s=rate,
        max_in_flight=in_flight,
        log_dir=options.out_dir / "logs",
    )
    return Prepared(logged, in_window, plan, chunks)


def run_replay(
    settings: Settings,
    options: ReplayOptions,
    progress: Callable[[str], None] = lambda _m: None,
) -> ReplayReport:
    """Replay the selection against the candidate and return the report (not yet written).

    The shadow pool processes inherit this process's environment plus the candidate's and the
    replay's overrides: ``settings`` must be the settings that environment makes.

    Raises:
        ReplayError: as :func:`prepare`.
        TransientError: a service cannot be reached, or the shadow pools failed to start.
    """
    prepared = prepare(settings, options)
    plan = prepared.plan
    started = dt.datetime.now(dt.UTC)
    progress(
        f"{len(prepared.logged)} of {prepared.in_window} logged queries; "
        f"{prepared.chunks} chunks of {options.selection.tenant} in "
        f"{plan.settings.elasticsearch.index_alias}"
    )
    replayed = run_shadow(
        plan,
        prepared.logged,
        start_timeout_s=settings.replay.start_timeout_s,
        deadline_s=settings.replay.deadline_s,
        nice=settings.replay.nice,
        progress=progress,
    )
    run = {
        "id": plan.run_id,
        "started_at": started.isoformat(),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(),
        "selection": options.selection.describe(),
        "in_window": prepared.in_window,
        "shadow_topic_prefix": plan.settings.kafka.topic_prefix,
        "pools": list(plan.pools),
        "chunks": prepared.chunks,
    }
    log.info("replay.done", run=plan.run_id, replayed=len(replayed))
    return build_report(
        replayed,
        run=run,
        candidate=options.candidate.describe(settings),
        rate_per_s=plan.rate_per_s,
        max_in_flight=plan.max_in_flight,
    )
