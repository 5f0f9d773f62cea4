"""The shadow run: pool processes of the candidate on shadow topics, the logged questions
submitted there at a bounded rate, and their answers collected.

Nothing of a shadow run reaches users or live state:

- its pools (``ragstream worker retrieval|rerank|generation-*``, the same code as live) read
  and write only ``<kafka.topic_prefix><replay.topic_prefix><run id>.*`` topics, in consumer
  groups under that prefix, and the topics and groups are deleted when the run ends;
- no delivery pool and no API run: no shadow answer is written to the query log, sent to a
  webhook or to a waiting client; the replayed requests carry no ``callback_url``;
- the answer caches are off in the shadow pools (``cache.enabled=false``): no lookup and no
  entry, so a live query is never served a candidate's answer nor a shadow query a live one;
- back-pressure is namespaced by the topic prefix, so shadow lag never answers live
  queries ``429``.

The run submits at most ``rate_per_s`` queries a second with at most ``max_in_flight``
unanswered (:class:`~replay.pacing.Pacer`), after one warm-up query (not reported) has
been answered, so the pools' model loading is not in the latencies.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from kafka.errors import KafkaError
from prometheus_client import Counter, Gauge

from ragstream.errors import TransientError
from ragstream.settings import Settings
from replay.pacing import Pacer
from replay.pools import Overrides, PoolProcesses
from topics.answers import Answer
from topics.consumer import make_consumer
from topics.producer import EventProducer, make_producer
from topics.queries import QueryRequest
from topics.registry import QUERIES, RESPONSES, TopicRegistry
from topics.responses import QueryResponse
from topics.serde import EventDecodeError, decode

log = structlog.get_logger(__name__)

REPLAYED = Counter(
    "ragstream_replay_queries_total",
    "Queries of shadow replays: submitted, then answered, failed or unanswered.",
    ["outcome"],
)
RATE_LIMIT = Gauge(
    "ragstream_replay_rate_limit_per_s", "The submit-rate bound of the running shadow replay."
)
for _outcome in ("submitted", "answered", "failed", "unanswered"):
    REPLAYED.labels(_outcome)

Route = Literal["auto", "evidence", "small", "large"]


@dataclass(frozen=True)
class ShadowPlan:
    """How to run the shadow pools.

    Attributes:
        settings: the candidate's settings, shadow prefix applied (what the pools read).
        overrides: the overrides the pool processes get on top of this process's environment.
        pools: pool names to start.
        route: the tier every replayed query is asked with (``QueryRequest.route``).
        run_id: names the shadow requests (``<run_id>-<n>``).
        rate_per_s: the submit-rate bound.
        max_in_flight: the most unanswered submissions.
        log_dir: where the pools' logs go.
    """

    settings: Settings
    overrides: Overrides
    pools: tuple[str, ...]
    route: Route
    run_id: str
    rate_per_s: float
    max_in_flight: int
    log_dir: Path


@dataclass
class Replayed:
    """One logged query and its shadow answer.

    ``sent_s`` is the submission's monotonic time relative to the first submission (s);
    ``sent_at`` its UTC time; ``response`` is ``None`` when no answer came in time.
    """

    logged: Answer
    request_id: str
    sent_at: dt.datetime
    sent_s: float
    response: QueryResponse | None = None
    received_at: dt.datetime | None = None


class Responses(threading.Thread):
    """Reads the shadow ``rag.responses`` from the beginning; keeps the first response of each
    request id (a duplicate, at-least-once, is ignored)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True, name="replay-responses")
        self.topic = TopicRegistry(settings.kafka.topic_prefix).name(RESPONSES)
        self.consumer = make_consumer(
            settings.kafka, self.topic, group=None, auto_offset_reset="earliest"
        )
        self.lock = threading.Lock()
        self.got: dict[str, tuple[QueryResponse, dt.datetime]] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                for r in records:
                    try:
                        event = decode(QueryResponse, r.value)
                    except EventDecodeError as exc:
                        log.warning("replay.undecodable_response", error=str(exc))
                        continue
                    with self.lock:
                        self.got.setdefault(event.request_id, (event, dt.datetime.now(dt.UTC)))
        self.consumer.close()

    def missing(self, ids: Sequence[str]) -> int:
        """How many of ``ids`` have no response yet."""
        with self.lock:
            return sum(1 for i in ids if i not in self.got)

    def get(self, request_id: str) -> tuple[QueryResponse, dt.datetime] | None:
        with self.lock:
            return self.got.get(request_id)

    def close(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=10)
        else:
            self.consumer.close()


def run_shadow(
    plan: ShadowPlan,
    logged: Sequence[Answer],
    *,
    start_timeout_s: float,
    deadline_s: float,
    nice: int,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[Replayed]:
    """Start the shadow pools, replay ``logged`` (in order) and return each with its answer.

    Raises:
        TransientError: the pools did not answer the warm-up query within ``start_timeout_s``,
            or a pool process died (its log is named).
    """
    pools = PoolProcesses(plan.settings, plan.overrides, plan.pools, plan.log_dir, nice=nice)
    RATE_LIMIT.set(plan.rate_per_s)
    responses: Responses | None = None
    producer: EventProducer | None = None
    try:
        pools.start()
        responses = Responses(plan.settings)
        responses.start()
        producer = EventProducer(make_producer(plan.settings.kafka))
        submit = _submitter(plan, producer, deadline_s)
        progress(f"starting shadow pools {', '.join(plan.pools)} (logs: {plan.log_dir})")
        warm = submit(f"{plan.run_id}-warmup", logged[0])
        what = f"the warm-up query (their logs: {plan.log_dir})"
        _wait_for(responses, [warm], start_timeout_s, pools.check_alive, what)
        progress(f"replaying {len(logged)} queries at most {plan.rate_per_s:g}/s")
        out = _replay(plan, logged, submit, responses, pools.check_alive)
        _wait_for(responses, [r.request_id for r in out], deadline_s + 10, pools.check_alive, None)
        for r in out:
            got = responses.get(r.request_id)
            if got is not None:
                r.response, r.received_at = got
        _count(out)
        return out
    except RuntimeError as exc:  # a pool process exited
        raise TransientError(str(exc)) from exc
    except KafkaError as exc:
        raise TransientError(f"Kafka at {plan.settings.kafka.bootstrap_servers}: {exc}") from exc
    finally:
        if responses is not None:
            responses.close()
        if producer is not None:
            producer.close()
        pools.close()
        RATE_LIMIT.set(0)


def _submitter(
    plan: ShadowPlan, producer: EventProducer, deadline_s: float
) -> Callable[[str, Answer], str]:
    topic = TopicRegistry(plan.settings.kafka.topic_prefix).name(QUERIES)

    def submit(request_id: str, logged: Answer) -> str:
        now = dt.datetime.now(dt.UTC)
        request = QueryRequest(
            request_id=request_id,
            tenant=logged.tenant,
            query=logged.query,
            deadline=now + dt.timedelta(seconds=deadline_s),
            created_at=now,
            route=plan.route,
        )
        producer.send(topic, request)
        producer.flush()
        return request_id

    return submit


def _replay(
    plan: ShadowPlan,
    logged: Sequence[Answer],
    submit: Callable[[str, Answer], str],
    responses: Responses,
    check: Callable[[], None],
) -> list[Replayed]:
    pacer = Pacer(plan.rate_per_s, plan.max_in_flight)
    out: list[Replayed] = []
    first: float | None = None

    def in_flight() -> int:
        return responses.missing([r.request_id for r in out])

    for i, answer in enumerate(logged):
        at = pacer.wait_turn(in_flight, check)
        first = at if first is None else first
        sent_at = dt.datetime.now(dt.UTC)
        rid = submit(f"{plan.run_id}-{i:05d}", answer)
        REPLAYED.labels("submitted").inc()
        out.append(Replayed(answer, rid, sent_at, round(at - first, 4)))
    return out


def _wait_for(
    responses: Responses,
    ids: Sequence[str],
    timeout_s: float,
    check: Callable[[], None],
    what: str | None,
) -> None:
    """Wait until every one of ``ids`` is answered or ``timeout_s`` passed; raise when
    ``what`` is named and some are still unanswered."""
    until = time.monotonic() + timeout_s
    while responses.missing(ids) and time.monotonic() < until:
        check()
        time.sleep(0.1)
    if what is not None and responses.missing(ids):
        raise TransientError(f"the shadow pools did not answer {what} within {timeout_s:.0f} s")


def _count(out: Sequence[Replayed]) -> None:
    for r in out:
        if r.response is None:
            REPLAYED.labels("unanswered").inc()
        else:
            REPLAYED.labels("answered" if r.response.status == "answered" else "failed").inc()
