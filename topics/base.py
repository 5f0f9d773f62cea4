"""Base of every event: frozen pydantic v2 models with identity, tenant, time and trace.

Every event carries ``schema_version``, a unique ``event_id``, the ``tenant`` it belongs to, a
UTC ``created_at`` and a ``trace`` of per-stage timings that each stage appends to with
:meth:`Event.traced`. Models forbid unknown fields, so a producer's typo is rejected rather
than silently dropped.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def utcnow() -> dt.datetime:
    """Current time, timezone-aware UTC."""
    return dt.datetime.now(dt.UTC)


def new_id() -> str:
    """A random 32-hex-digit id (UUID4)."""
    return uuid.uuid4().hex


def _require_utc(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp must carry a timezone (UTC)")
    return value.astimezone(dt.UTC)


#: A timezone-aware timestamp normalised to UTC; naive datetimes are rejected.
UtcDatetime = Annotated[dt.datetime, AfterValidator(_require_utc)]

#: Tenant names: 1-128 chars of letters, digits, ``.``, ``_``, ``-``.
Tenant = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")]


class Contract(BaseModel):
    """Frozen, closed pydantic model used for events and their parts."""

    # NaN/Infinity would serialise as null and fail on the next stage: refuse them here.
    model_config = ConfigDict(
        frozen=True, extra="forbid", str_strip_whitespace=False, allow_inf_nan=False
    )


class StageTiming(Contract):
    """One stage's timing: ``started_at`` (UTC), ``duration_ms`` (wall clock, ms) and
    ``wait_ms``, the time the event waited for this stage before it was picked up, in ms.

    ``wait_ms`` is set by the consumer runtime on the first stage a pool appends for an event:
    from the ``created_at`` of the event the pool consumed (built by the previous stage just
    before it was published; for the first stage, the query accepted by the API) to the pool's
    pickup, so it holds the Kafka hop, the consumer lag ahead of the event (time queued) and
    the batching wait. ``None``: a stage run in the same pool as the one before it, a stage
    of the API, or an event written before the field existed.
    """

    stage: str = Field(min_length=1, max_length=64)
    started_at: UtcDatetime
    duration_ms: float = Field(ge=0)
    wait_ms: float | None = Field(default=None, ge=0)
    detail: dict[str, str | int | float | bool] = Field(default_factory=dict)


class Event(Contract):
    """Fields common to every event.

    ``SCHEMA_VERSION`` is the version this code writes; readers accept it and older ones.
    """

    SCHEMA_VERSION: ClassVar[int] = 1

    schema_version: int = Field(default=1, ge=1)
    event_id: str = Field(default_factory=new_id, min_length=1, max_length=128)
    tenant: Tenant
    created_at: UtcDatetime = Field(
        default_factory=utcnow,
        description="When the event was made (UTC). A record without it gets the Kafka "
        "record's timestamp when it is consumed, so the trace counts the time spent in Kafka.",
    )
    trace: tuple[StageTiming, ...] = ()

    @classmethod
    def record_defaults(
        cls, raw: dict[str, Any], key: bytes | None, timestamp_ms: int | None
    ) -> dict[str, Any]:
        """``raw`` (a decoded record value) with the fields its producer left out taken from
        the Kafka record: ``created_at`` from the record's ``timestamp_ms`` (ms since the
        epoch). Subclasses add their own (a query's ``request_id`` from the key)."""
        if "created_at" not in raw and timestamp_ms is not None:
            stamp = dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC)
            raw = {**raw, "created_at": stamp.isoformat()}
        return raw

    def traced(
        self,
        stage: str,
        started_at: dt.datetime,
        duration_ms: float,
        **detail: str | int | float | bool,
    ) -> Self:
        """Return a copy with one more :class:`StageTiming` appended to ``trace``."""
        timing = StageTiming(
            stage=stage, started_at=started_at, duration_ms=duration_ms, detail=detail
        )
        return self.model_copy(update={"trace": (*self.trace, timing)})

    def key(self) -> bytes | None:
        """The Kafka record key; subclasses key by ``request_id`` or ``doc_id``."""
        return None
