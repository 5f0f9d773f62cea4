"""The API's produce step fails fast and types its errors (issue 15, items 6 and 7): a record over
the broker's limit is a 413, a broker that does not take or acknowledge a record within
``api.produce_timeout_s`` is a 503 with ``Retry-After``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kafka import errors as kafka_errors

from api.errors import ApiError
from api.querying import send_acked
from ragstream.settings import Settings


class Future:
    def __init__(self, error: BaseException | None = None, ack: bool = True) -> None:
        self.error, self.ack = error, ack

    def add_callback(self, fn: Callable[[Any], None]) -> None:
        if self.ack and self.error is None:
            threading.Timer(0.01, fn, args=(None,)).start()

    def add_errback(self, fn: Callable[[BaseException], None]) -> None:
        if self.error is not None:
            threading.Timer(0.01, fn, args=(self.error,)).start()


class Producer:
    def __init__(self, future: Future, block_s: float = 0.0) -> None:
        self.future, self.block_s = future, block_s

    def send(
        self,
        topic: str,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Future:
        time.sleep(self.block_s)
        return self.future


def _settings() -> Settings:
    return Settings.model_validate(
        {"api": {"produce_timeout_s": 0.3}, "kafka": {"max_request_size": 10_000}}
    )


def _send(producer: Producer, value: bytes) -> float:
    """Send; return the seconds until ``send_acked`` returned or raised (the event loop's own
    shutdown, which waits for a still-blocked producer thread, is not counted)."""
    took = 0.0

    async def go() -> None:
        nonlocal took
        started = time.monotonic()
        try:
            await send_acked(producer, "t", b"k", value, _settings())  # type: ignore[arg-type]
        finally:
            took = time.monotonic() - started

    try:
        asyncio.run(go())
    except ApiError as exc:
        exc.add_note(f"took {took:.2f}s")
        exc.took = took  # type: ignore[attr-defined]
        raise
    return took


def test_an_acknowledged_record_passes() -> None:
    _send(Producer(Future()), b"x" * 100)


def test_a_record_over_the_broker_limit_is_413_before_sending() -> None:
    with pytest.raises(ApiError) as err:
        _send(Producer(Future()), b"x" * 9_800)
    assert err.value.status == 413 and "record limit" in err.value.message


def test_the_brokers_size_refusal_is_413() -> None:
    with pytest.raises(ApiError) as err:
        _send(Producer(Future(kafka_errors.MessageSizeTooLargeError("big"))), b"x")
    assert err.value.status == 413


@pytest.mark.parametrize(
    ("producer", "message"),
    [
        (Producer(Future(), block_s=2.0), "did not take the record"),
        (Producer(Future(ack=False)), "did not acknowledge within 0.3s"),
        (Producer(Future(kafka_errors.KafkaTimeoutError("no broker"))), "KafkaTimeoutError"),
    ],
)
def test_an_unavailable_broker_is_503_with_retry_after_fast(
    producer: Producer, message: str
) -> None:
    with pytest.raises(ApiError) as err:
        _send(producer, b"x")
    assert err.value.took < 1.0  # type: ignore[attr-defined]
    assert err.value.status == 503 and message in err.value.message
    assert err.value.headers["Retry-After"] == "5"
