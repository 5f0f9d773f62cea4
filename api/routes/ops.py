"""The console's operations data, for operator keys only (a ``user`` key gets 403).

- ``GET /v1/me`` (any key): the key's tenant and role, for the console's sign-in;
- ``GET /v1/ops/status``: processes, pools (lag per partition, batch size, stage p50/p95,
  throughput, errors), DLQ depths, LLM servers and the index (:mod:`api.ops`);
- ``GET /v1/ops/dlq/{topic}``: the newest dead letters of one DLQ with why they failed
  (:func:`topics.dlq.inspect`; nothing is consumed);
- ``POST /v1/ops/dlq/{topic}/replay``: re-publish its dead letters to their source topic
  (:func:`topics.dlq.replay`, progress in the consumer group ``ragstream dlq replay`` uses, so
  the CLI and the console never replay a letter twice).

Operators see the whole deployment, every tenant's pools alike: that is why these need the role.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from api.auth import Principal
from api.deps import operator, principal, services
from api.errors import ApiError, ErrorEnvelope
from api.ops import OpsService, OpsStatus

router = APIRouter(tags=["ops"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 403, 404, 429, 503)
}


class DeadLetterOut(BaseModel):
    """One dead letter: where it sits, its key, its original size (bytes) and ``dlq.*``
    context (error class and message, attempts, source topic/partition/offset, pool, time)."""

    partition: int
    offset: int
    key: str | None
    size: int
    context: dict[str, str]


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
async def ops_status(request: Request, _: Principal = Depends(operator)) -> OpsStatus:
    """Processes, pools, DLQs, LLM servers and the index, as the Operations page shows them."""
    return await asyncio.to_thread(ops_service(request).status)


@router.get("/v1/ops/dlq/{topic}", response_model=DeadLettersOut, responses=ERRORS)
async def ops_dead_letters(
    topic: str,
    request: Request,
    _: Principal = Depends(operator),
    limit: int = Query(default=20, ge=1, le=200),
) -> DeadLettersOut:
    """The newest ``limit`` dead letters of each partition of DLQ ``topic`` (not consumed)."""
    ops = _known_dlq(request, topic)
    return await asyncio.to_thread(_inspect, ops, topic, limit)


def _inspect(ops: OpsService, topic: str, limit: int) -> DeadLettersOut:
    from topics.consumer import make_consumer
    from topics.dlq import inspect

    consumer = make_consumer(ops.settings.kafka, group=None, client_id="ragstream-console-dlq")
    try:
        listing = inspect(consumer, topic, limit=limit, timeout_ms=5_000)
    except KeyError as exc:
        raise ApiError(404, "NOT_FOUND", f"no dead-letter topic {topic!r}") from exc
    except TimeoutError as exc:
        raise ApiError(503, "UNAVAILABLE", str(exc)) from exc
    finally:
        consumer.close()
    return DeadLettersOut(
        topic=listing.topic,
        total=listing.total,
        letters=[_letter(v) for v in listing.letters],
    )


def _letter(v: Any) -> DeadLetterOut:
    return DeadLetterOut(
        partition=v.partition, offset=v.offset, key=v.key, size=v.size, context=dict(v.context)
    )


class ReplayedOut(BaseModel):
    """How many dead letters were re-published to their source topic."""

    topic: str
    replayed: int


def _known_dlq(request: Request, topic: str) -> OpsService:
    """The ops service, once ``topic`` is known as a dead-letter topic of the registry.

    Raises:
        ApiError: 404 for any other name.
    """
    ops = ops_service(request)
    if topic not in ops.dlq_topics():
        raise ApiError(404, "NOT_FOUND", f"no dead-letter topic {topic!r}")
    return ops


#: The consumer group of ``ragstream dlq replay`` (its default ``--group``).
REPLAY_GROUP = "ragstream-dlq-replay"


@router.post("/v1/ops/dlq/{topic}/replay", response_model=ReplayedOut, responses=ERRORS)
async def ops_replay_dead_letters(
    topic: str,
    request: Request,
    _: Principal = Depends(operator),
    limit: int = Query(default=100, ge=1, le=10_000),
) -> ReplayedOut:
    """Re-publish up to ``limit`` dead letters of DLQ ``topic`` (original bytes and headers)."""
    ops = _known_dlq(request, topic)
    n = await asyncio.to_thread(_replay, ops, topic, limit)
    return ReplayedOut(topic=topic, replayed=n)


def _replay(ops: OpsService, topic: str, limit: int) -> int:
    from topics.consumer import make_consumer
    from topics.dlq import replay
    from topics.producer import EventProducer, make_producer

    kafka = ops.settings.kafka
    consumer = make_consumer(kafka, topic, group=REPLAY_GROUP, auto_offset_reset="earliest")
    producer = EventProducer(make_producer(kafka))
    try:
        return replay(consumer, producer, topic, limit=limit, idle_timeout_ms=2_000)
    finally:
        consumer.close(autocommit=False)
        producer.close()
