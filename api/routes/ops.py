"""The console's operations data, for operator keys only (a ``user`` key gets 403).

A ``cluster-operator`` key sees and replays the whole deployment; an ``operator`` key only its
own tenant: its lag, its dead letters (listed, counted and replayed in a replay group of its
own, :func:`topics.dlq_replay.tenant_group`), its chunk count, no processes
(:mod:`api.ops_tenant`).

- ``GET /v1/me`` (any key): the key's tenant and role, for the console's sign-in;
- ``GET /v1/ops/status``: processes, pools (lag per partition, batch size, stage p50/p95,
  throughput, errors), DLQ depths, LLM servers and the index (:mod:`api.ops`);
- ``GET /v1/ops/dlq/{topic}``: the newest dead letters of one DLQ with why they failed
  (:func:`topics.dlq.inspect`; nothing is consumed);
- ``POST /v1/ops/dlq/{topic}/replay``: re-publish its dead letters to their source topic, up
  to where the DLQ ended when the replay started (:func:`topics.dlq_replay.replay_dead_letters`,
  progress in the consumer group ``ragstream dlq replay`` uses, so the CLI and the console
  never replay a letter twice), and count those that failed again within ``settle_ms``.

"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from api.auth import Principal
from api.deps import operator, principal, services
from api.errors import ApiError, ErrorEnvelope
from api.ops import OpsService
from api.ops_models import OpsStatus

router = APIRouter(tags=["ops"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 403, 404, 429, 503)
}


class DeadLetterOut(BaseModel):
    """One dead letter: where it sits, its key, its original size (bytes), ``dlq.*`` context
    (error class and message, attempts, source topic/partition/offset, pool, time) and, for a
    record a replay had re-published, that replay's id and attempt number."""

    partition: int
    offset: int
    key: str | None
    size: int
    context: dict[str, str]
    replay_id: str | None = None
    replay_attempt: int | None = None


class DeadLettersOut(BaseModel):
    """The newest dead letters of a DLQ (oldest first) and how many it holds."""

    topic: str
    total: int
    letters: list[DeadLetterOut]


class MeOut(BaseModel):
    """The caller's key: its tenant and role."""

    tenant: str
    role: str


@router.get("/v1/me", response_model=MeOut, responses=ERRORS, tags=["auth"])
async def me(who: Principal = Depends(principal)) -> MeOut:
    """Who the presented key acts as (the console signs in with it)."""
    return MeOut(tenant=who.tenant, role=who.role)


def ops_service(request: Request) -> OpsService:
    """The process's :class:`OpsService` (created on first use)."""
    svc = services(request)
    found = svc.extras.get("ops")
    if found is None:
        found = svc.extras["ops"] = OpsService(svc.settings, svc.redis)
    return found


@router.get("/v1/ops/status", response_model=OpsStatus, responses=ERRORS)
async def ops_status(request: Request, who: Principal = Depends(operator)) -> OpsStatus:
    """Processes, pools, DLQs, LLM servers and the index, as the Operations page shows them:
    the deployment's for a ``cluster-operator`` key, the key's tenant's for an ``operator``."""
    return await asyncio.to_thread(ops_service(request).status, _scope(who))


def _scope(who: Principal) -> str | None:
    """The tenant an operator's view is limited to; ``None`` for a cluster operator."""
    return None if who.is_cluster_operator else who.tenant


@router.get("/v1/ops/dlq/{topic}", response_model=DeadLettersOut, responses=ERRORS)
async def ops_dead_letters(
    topic: str,
    request: Request,
    who: Principal = Depends(operator),
    limit: int = Query(default=20, ge=1, le=200),
) -> DeadLettersOut:
    """The newest ``limit`` dead letters of each partition of DLQ ``topic`` (not consumed);
    for an ``operator`` key only its tenant's (``total`` counts those)."""
    ops = _known_dlq(request, topic)
    return await asyncio.to_thread(_inspect, ops, topic, limit, _scope(who))


@contextlib.contextmanager
def _dlq_errors(topic: str) -> Iterator[None]:
    """A DLQ read's failures as the API's errors: 404 for a topic the broker does not know,
    503 when its letters did not arrive in time."""
    try:
        yield
    except KeyError as exc:
        raise ApiError(404, "NOT_FOUND", f"no dead-letter topic {topic!r}") from exc
    except TimeoutError as exc:
        raise ApiError(503, "UNAVAILABLE", str(exc)) from exc


def _inspect(ops: OpsService, topic: str, limit: int, tenant: str | None) -> DeadLettersOut:
    from topics.consumer import make_consumer
    from topics.dlq import inspect

    consumer = make_consumer(ops.settings.kafka, group=None, client_id="ragstream-console-dlq")
    try:
        with _dlq_errors(topic):
            listing = inspect(consumer, topic, limit=limit, timeout_ms=5_000, tenant=tenant)
    finally:
        consumer.close()
    return DeadLettersOut(
        topic=listing.topic,
        total=listing.total,
        letters=[_letter(v) for v in listing.letters],
    )


def _letter(v: Any) -> DeadLetterOut:
    return DeadLetterOut(
        partition=v.partition,
        offset=v.offset,
        key=v.key,
        size=v.size,
        context=dict(v.context),
        replay_id=v.replay.replay_id if v.replay else None,
        replay_attempt=v.replay.attempt if v.replay else None,
    )


class ReplayedOut(BaseModel):
    """One replay run (:class:`topics.dlq_replay.ReplayReport`): the dead letters re-published
    to their source topic (each at most once, only those before ``end_offsets``), how many of
    them were dead-lettered again within ``settle_ms`` (a lower bound), and how many are left
    before ``end_offsets`` for the next replay (``limit`` reached)."""

    topic: str
    replayed: int
    replay_id: str
    failed_again: int
    end_offsets: dict[int, int]
    remaining: int


def _known_dlq(request: Request, topic: str) -> OpsService:
    """The ops service, once ``topic`` is known as a dead-letter topic of the registry.

    Raises:
        ApiError: 404 for any other name.
    """
    ops = ops_service(request)
    if topic not in ops.dlq_topics():
        raise ApiError(404, "NOT_FOUND", f"no dead-letter topic {topic!r}")
    return ops


@router.post("/v1/ops/dlq/{topic}/replay", response_model=ReplayedOut, responses=ERRORS)
async def ops_replay_dead_letters(
    topic: str,
    request: Request,
    who: Principal = Depends(operator),
    limit: int = Query(default=100, ge=1, le=10_000),
    settle_ms: int = Query(default=3_000, ge=0, le=30_000),
) -> ReplayedOut:
    """Re-publish up to ``limit`` dead letters of DLQ ``topic`` (original bytes and headers,
    plus ``replay.id`` and ``replay.attempt``), only those it held when the call started; then
    wait up to ``settle_ms`` for re-published records that fail again (``failed_again``). An
    ``operator`` key replays only its tenant's letters, in its tenant's replay group."""
    ops = _known_dlq(request, topic)
    return await asyncio.to_thread(_replay, ops, topic, limit, settle_ms, _scope(who))


def _replay(
    ops: OpsService, topic: str, limit: int, settle_ms: int, tenant: str | None
) -> ReplayedOut:
    from topics.dlq_replay import replay_dead_letters

    with _dlq_errors(topic):
        report = replay_dead_letters(
            ops.settings.kafka,
            topic,
            limit=limit,
            settle_ms=settle_ms,
            client_id="ragstream-console-dlq-replay",
            tenant=tenant,
        )
    return ReplayedOut(
        topic=report.topic,
        replayed=report.replayed,
        replay_id=report.replay_id,
        failed_again=report.failed_again,
        end_offsets=dict(report.end_offsets),
        remaining=report.remaining,
    )
