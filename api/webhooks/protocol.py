"""Request and response bodies of the ``/v1/webhooks`` routes (bounded, closed models)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from api.models import UtcDateTime
from workers.webhooks.delivery import DeliveryView
from workers.webhooks.endpoints import MAX_DESCRIPTION_CHARS, MAX_URL_CHARS, Endpoint
from workers.webhooks.signing import Rotated

EventType = Literal["query.completed", "ingest.job.completed", "*"]
#: No control characters (they cannot be part of a URL, and PostgreSQL text refuses NUL).
NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"


class EndpointBody(BaseModel):
    """``POST /v1/webhooks``: where to post, for which event types (``*``: all of them)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1,
        max_length=MAX_URL_CHARS,
        pattern=NO_CONTROL,
        description="http(s) URL; its host must resolve to addresses webhooks may reach.",
        examples=["https://hooks.example.com/ragstream"],
    )
    event_types: list[EventType] = Field(min_length=1, max_length=3)
    description: str = Field(default="", max_length=MAX_DESCRIPTION_CHARS, pattern=NO_CONTROL)


class EndpointOut(BaseModel):
    """A registered endpoint."""

    id: str
    url: str
    event_types: list[str]
    description: str
    created_at: UtcDateTime

    @classmethod
    def of(cls, e: Endpoint) -> EndpointOut:
        """From the registry's view."""
        return cls(
            id=e.id,
            url=e.url,
            event_types=list(e.event_types),
            description=e.description,
            created_at=e.created_at,
        )


class EndpointCreated(EndpointOut):
    """A registered endpoint and its signing key, shown only here."""

    secret: str = Field(
        description="Standard Webhooks key (whsec_...) that signs this endpoint's deliveries; "
        "shown once: store it now (POST /v1/webhooks/{id}/rotate-secret makes a new one)."
    )

    @classmethod
    def created(cls, e: Endpoint) -> EndpointCreated:
        """From :func:`workers.webhooks.endpoints.register`'s result (which carries the key)."""
        assert e.secret is not None
        return cls(**EndpointOut.of(e).model_dump(), secret=e.secret)


class SecretOut(BaseModel):
    """A new signing key, shown once; the previous key (if any) still signs until
    ``previous_valid_until`` (UTC), so receivers can switch without losing deliveries."""

    secret: str
    previous_valid_until: UtcDateTime | None = None

    @classmethod
    def of(cls, r: Rotated) -> SecretOut:
        """From a rotation's result."""
        return cls(secret=r.secret, previous_valid_until=r.previous_valid_until)


class EndpointList(BaseModel):
    """One page of the tenant's endpoints, oldest first (the shape of every list of the API,
    :mod:`api.pages`)."""

    items: list[EndpointOut]
    next_cursor: str | None = Field(default=None, description="Pass as `cursor`; null: last.")


class AttemptOut(BaseModel):
    """One HTTP attempt: number (from 1), status code (null on a transport error), error,
    latency in ms, time (UTC)."""

    attempt: int
    status_code: int | None
    error: str | None
    latency_ms: float | None
    attempted_at: UtcDateTime


class DeliveryOut(BaseModel):
    """One logical delivery (``webhook_id`` is the ``webhook-id`` header receivers saw)."""

    webhook_id: str
    event_type: str
    url: str
    status: Literal["pending", "succeeded", "failed"]
    attempt_count: int
    created_at: UtcDateTime
    finished_at: UtcDateTime | None
    attempts: list[AttemptOut]

    @classmethod
    def of(cls, d: DeliveryView) -> DeliveryOut:
        """From the delivery's view."""
        return cls(
            webhook_id=d.webhook_id,
            event_type=d.event_type,
            url=d.url,
            status=d.status,
            attempt_count=d.attempt_count,
            created_at=d.created_at,
            finished_at=d.finished_at,
            attempts=[
                AttemptOut(
                    attempt=a.attempt,
                    status_code=a.status_code,
                    error=a.error,
                    latency_ms=a.latency_ms,
                    attempted_at=a.attempted_at,
                )
                for a in d.attempts
            ],
        )
