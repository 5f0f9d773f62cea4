"""JSON serde of events. Decoding raises typed errors that say why the bytes were refused."""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import ValidationError

from ragstream.errors import PermanentError
from topics.base import Event

E = TypeVar("E", bound=Event)


class EventDecodeError(PermanentError):
    """Bytes that cannot become an event; never retried, always dead-lettered."""

    code = "INVALID_EVENT"


class UndecodableEventError(EventDecodeError):
    """The bytes are not UTF-8 JSON (or are empty)."""


class InvalidEventError(EventDecodeError):
    """The JSON does not satisfy the event's schema; ``errors`` lists pydantic's findings."""

    def __init__(self, message: str, errors: list[str]) -> None:
        super().__init__(message)
        self.errors = errors


def encode(event: Event) -> bytes:
    """Serialise ``event`` to UTF-8 JSON bytes."""
    return event.model_dump_json().encode()


def decode(
    model: type[E], data: bytes | None, *, key: bytes | None = None, timestamp_ms: int | None = None
) -> E:
    """Parse ``data`` as a ``model`` event.

    Args:
        model: the event class.
        data: the record value.
        key: the record key, when the record came from Kafka.
        timestamp_ms: the record's timestamp (ms since the epoch), when it came from Kafka.
            Fields a producer left out are filled from the record by
            :meth:`~topics.base.Event.record_defaults` (``created_at``; ``request_id`` of a
            query event).

    Raises:
        UndecodableEventError: empty, non-UTF-8 or non-JSON bytes.
        InvalidEventError: valid JSON that fails the schema (or a newer ``schema_version``).
    """
    if not data:
        raise UndecodableEventError("empty record value")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UndecodableEventError(f"not UTF-8 JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidEventError(f"expected a JSON object, got {type(raw).__name__}", [])
    version = raw.get("schema_version", 1)
    if isinstance(version, int) and version > model.SCHEMA_VERSION:
        raise InvalidEventError(
            f"{model.__name__} schema_version {version} is newer than {model.SCHEMA_VERSION}", []
        )
    raw = model.record_defaults(raw, key, timestamp_ms)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = [
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
        ]
        raise InvalidEventError(
            f"invalid {model.__name__}: " + "; ".join(errors[:5]), errors
        ) from exc
