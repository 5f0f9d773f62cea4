"""The echo pool: republishes each event one hop further. Used by the bus benchmark and the
runtime's integration tests (``python -m bench.echo --input A --output B --group G``); it is no
production pool (``ragstream worker`` does not know it), so it runs only as this module.

Payload conventions let tests inject failures: ``poison`` raises a permanent error,
``transient`` a transient one, ``sleep:<ms>`` sleeps that long before echoing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Sequence

from pydantic import Field

from ragstream.errors import PermanentError, TransientError
from ragstream.logging import configure_logging
from ragstream.settings import PoolSettings, get_settings
from topics.base import Event
from topics.registry import TopicRegistry, TopicSpec
from workers.runtime.build import build_runner, pool_handler
from workers.runtime.handler import Emit, Handler, Outcome, derive_event_id


class EchoEvent(Event):
    """A numbered probe; ``sent_at_ns`` is the producer's ``time.time_ns()``."""

    seq: int = Field(ge=0)
    sent_at_ns: int
    payload: str = ""
    hops: int = 0

    def key(self) -> bytes:
        """Keyed by ``event_id`` (spreads over partitions)."""
        return self.event_id.encode()


#: The echo pool's batching: larger batches and a shorter wait than any product pool (the bus
#: benchmark measures the runtime, not a model); the command line overrides each field.
ECHO_POOL = PoolSettings(max_batch=64, max_wait_ms=5)


def echo_topic(name: str) -> TopicSpec:
    """A topic spec of :class:`EchoEvent` records named ``name``."""
    return TopicSpec(name, EchoEvent, "event_id", partitions=3, retention_ms=3_600_000)


def echo_handler(
    source: TopicSpec,
    sink: TopicSpec,
    group: str,
    pool: PoolSettings,
    *,
    stage: str = "echo",
    delay_ms: float = 0.0,
) -> Handler[EchoEvent]:
    """A handler that echoes ``source`` events to ``sink``, ``delay_ms`` per batch.

    Output ids derive from input ids (:func:`derive_event_id`), so a replay de-duplicates.
    """

    def fn(events: list[EchoEvent]) -> Sequence[Outcome]:
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        if delay_ms:
            time.sleep(delay_ms / 1000)
        for e in events:
            if e.payload == "poison":
                raise PermanentError(f"poison event {e.seq}")
            if e.payload == "transient":
                raise TransientError(f"transient failure on event {e.seq}")
            if e.payload.startswith("sleep:"):
                time.sleep(float(e.payload.removeprefix("sleep:")) / 1000)
        took = (time.perf_counter() - t0) * 1000
        return [
            Emit(
                sink,
                e.model_copy(
                    update={"event_id": derive_event_id(e.event_id, stage), "hops": e.hops + 1}
                ).traced(stage, started, took, batch=len(events)),
            )
            for e in events
        ]

    return pool_handler(stage, input=source, outputs=(sink,), fn=fn, pool=pool, group=group)


def main(argv: list[str] | None = None) -> None:
    """Run one echo pool process until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--stage", default="echo")
    parser.add_argument("--max-batch", type=int)
    parser.add_argument("--max-wait-ms", type=int)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--retry-base-ms", type=float)
    parser.add_argument("--metrics-port", type=int, default=0)
    args = parser.parse_args(argv)
    settings = get_settings()
    configure_logging(settings.logging)
    update = {
        k: v
        for k, v in {
            "max_batch": args.max_batch,
            "max_wait_ms": args.max_wait_ms,
            "retry_base_ms": args.retry_base_ms,
            "metrics_port": args.metrics_port,
        }.items()
        if v is not None
    }
    pool = ECHO_POOL.model_copy(update=update)
    handler = echo_handler(
        echo_topic(args.input),
        echo_topic(args.output),
        args.group,
        pool,
        stage=args.stage,
        delay_ms=args.delay_ms,
    )
    runner = build_runner(handler, settings, pool, registry=TopicRegistry(""))
    runner.install_signal_handlers()
    runner.run()


if __name__ == "__main__":
    main()
