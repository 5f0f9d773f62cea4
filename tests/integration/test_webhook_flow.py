"""End to end: responses on Kafka -> delivery pool -> Celery worker -> a local receiver that
verifies every signature; ingest jobs announce their completion the same way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis
from celery import Celery
from kafka import KafkaProducer

from ingest import jobs
from ingest.sources import SourceFile
from ragstream.settings import PoolSettings, Settings
from tests.integration.hookkit import HookEnv, Receiver, deliveries, hook_env, receivers
from tests.integration.kafkakit import committed_total, wait_for
from topics.admin import ensure_topics, make_admin
from topics.producer import EventProducer, make_producer
from topics.registry import RESPONSES, TopicRegistry
from topics.responses import Citation, QueryResponse
from topics.serde import encode
from workers.pools.delivery import delivery_handler
from workers.runtime.runner import PoolRunner
from workers.webhooks import endpoints, signing
from workers.webhooks.outbox import CeleryScheduler
from workers.webhooks.ssrf import parse_networks

__all__ = ["hook_env", "receivers"]  # fixtures

LOOPBACK = parse_networks(["127.0.0.1/32"])


@dataclass
class Pool:
    """A delivery pool running in a thread on private topics, and a producer to feed it."""

    registry: TopicRegistry
    group: str
    runner: PoolRunner[QueryResponse]
    thread: threading.Thread
    producer: KafkaProducer
    sent: int = 0

    def send(self, *responses: QueryResponse) -> None:
        for r in responses:
            self.producer.send(self.registry.name(RESPONSES), key=r.key(), value=encode(r))
            self.sent += 1
        self.producer.flush()

    def consumed_all(self, settings: Settings) -> bool:
        topic = self.registry.name(RESPONSES)
        return committed_total(settings, self.group, topic, RESPONSES.partitions) == self.sent


@pytest.fixture
def pool(hook_env: HookEnv, unique_name: Callable[[str], str]) -> Iterator[Pool]:
    settings = hook_env.settings
    registry = TopicRegistry(unique_name("wh") + ".")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    client = redis.Redis.from_url(settings.redis.url)
    scheduler = CeleryScheduler(client, marker_ttl_s=settings.webhooks.schedule_marker_ttl_s)
    group = unique_name("g")
    handler = delivery_handler(
        hook_env.sessions,
        pool=PoolSettings(max_batch=16, max_wait_ms=50),
        scheduler=scheduler,
        group=group,
    )
    runner = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=EventProducer(make_producer(settings.kafka)),
        registry=registry,
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    yield Pool(registry, group, runner, thread, producer)
    producer.close()
    runner.stop()
    thread.join(timeout=30)
    client.close()


def _callback_key(env: HookEnv, tenant: str) -> list[str]:
    """The tenant's callback key, created as ``POST /v1/webhooks/callback-secret`` does."""
    key = signing.create_tenant_secret(env.sessions, tenant)
    assert key is not None
    return [key]


def _endpoint_key(endpoint: endpoints.Endpoint) -> list[str]:
    assert endpoint.secret is not None
    return [endpoint.secret]


def _answer(
    request_id: str, tenant: str = "acme", callback_url: str | None = None
) -> QueryResponse:
    return QueryResponse(
        tenant=tenant,
        request_id=request_id,
        status="answered",
        answer="5432 [1]",
        citations=(Citation(n=1, doc_id="ports", chunk_id="c1"),),
        tier="small",
        callback_url=callback_url,
    )


def test_answer_webhook_is_signed_retried_and_sent_once_despite_replays(
    hook_env: HookEnv, pool: Pool, receivers: Callable[..., Receiver]
) -> None:
    hook_env.start_worker()
    receiver = receivers([500, 200], keys=_callback_key(hook_env, "acme"))
    first = _answer("r1", callback_url=receiver.url)
    pool.send(first)
    assert wait_for(
        lambda: [r.status for r, _ in deliveries(hook_env.sessions)] == ["succeeded"], 60
    ), hook_env.log()
    [(row, attempts)] = deliveries(hook_env.sessions)
    assert attempts == [(1, 500), (2, 200)] and row.attempt_count == 2
    assert receiver.rejected == 0 and receiver.verified == 2
    assert {r.webhook_id for r in receiver.received} == {row.webhook_id}
    payload = receiver.received[-1].payload
    assert payload["type"] == "query.completed"
    assert payload["data"]["request_id"] == "r1" and payload["data"]["status"] == "answered"
    assert payload["data"]["answer"] == "5432 [1]"
    assert payload["data"]["citations"][0]["chunk_id"] == "c1"

    # The same answer replayed, and a duplicate with another text: nothing new goes out.
    pool.send(first, first.model_copy(update={"answer": "a second answer"}))
    assert wait_for(lambda: pool.consumed_all(hook_env.settings), 60)
    time.sleep(4)  # longer than a back-off step and two sweeps of the worker
    assert receiver.verified == 2
    assert len(deliveries(hook_env.sessions)) == 1


def test_registered_endpoints_receive_their_own_tenants_answers_only(
    hook_env: HookEnv, pool: Pool, receivers: Callable[..., Receiver]
) -> None:
    acme_hook, globex_hook, callback = receivers(), receivers(), receivers()
    sessions = hook_env.sessions
    acme_hook.keys = _endpoint_key(
        endpoints.register(sessions, "acme", acme_hook.url, ["query.completed"], allow=LOOPBACK)
    )
    globex_hook.keys = _endpoint_key(
        endpoints.register(sessions, "globex", globex_hook.url, ["*"], allow=LOOPBACK)
    )
    endpoints.register(  # a type acme did not ask for on another URL: not a target
        sessions, "acme", callback.url + "/jobs", ["ingest.job.completed"], allow=LOOPBACK
    )
    callback.keys = _callback_key(hook_env, "acme")
    hook_env.start_worker()
    # A callback URL that is also a registered endpoint is posted to once.
    pool.send(_answer("a1", "acme"), _answer("a2", "acme", callback_url=acme_hook.url))
    pool.send(_answer("a3", "acme", callback_url=callback.url))
    assert wait_for(lambda: acme_hook.verified == 3 and callback.verified == 1, 60), hook_env.log()
    assert globex_hook.verified == 0
    assert {r.payload["data"]["request_id"] for r in acme_hook.received} == {"a1", "a2", "a3"}
    assert all(r.payload["data"]["tenant"] == "acme" for r in acme_hook.received)

    pool.send(_answer("g1", "globex"))
    assert wait_for(lambda: globex_hook.verified == 1, 60)
    assert globex_hook.received[0].payload["data"]["tenant"] == "globex"
    assert wait_for(lambda: pool.consumed_all(hook_env.settings), 30)
    assert acme_hook.verified == 3 and callback.verified == 1
    rows = deliveries(sessions)
    assert len(rows) == 5 and {r.status for r, _ in rows} == {"succeeded"}
    assert acme_hook.rejected == globex_hook.rejected == callback.rejected == 0


def test_ingest_job_completion_is_announced_to_callback_and_endpoints(
    hook_env: HookEnv, receivers: Callable[..., Receiver]
) -> None:
    from ingest.tasks import run_job

    callback, endpoint = receivers(keys=_callback_key(hook_env, "acme")), receivers()
    sessions = hook_env.sessions
    endpoint.keys = _endpoint_key(
        endpoints.register(sessions, "acme", endpoint.url, ["ingest.job.completed"], allow=LOOPBACK)
    )
    hook_env.start_worker()
    outside = ["/etc/hostname", "/etc/os-release"]  # outside ingest.allowed_roots: both fail
    job_id = jobs.create_job(
        sessions, "acme", [SourceFile(p, p) for p in outside], callback_url=callback.url
    )
    run_job.delay(job_id)
    assert wait_for(lambda: callback.verified == 1 and endpoint.verified == 1, 90), hook_env.log()
    data = callback.received[0].payload["data"]
    assert callback.received[0].payload["type"] == "ingest.job.completed"
    assert (data["job_id"], data["status"]) == (job_id, "completed_with_failures")
    assert (data["total_documents"], data["done_documents"], data["failed_documents"]) == (2, 0, 2)
    assert sorted(f["path"] for f in data["failures"]) == outside
    assert all(f["error"] for f in data["failures"]) and data["failures_truncated"] is False
    assert endpoint.received[0].payload == callback.received[0].payload
    assert callback.received[0].webhook_id != endpoint.received[0].webhook_id

    # Announcing the same outcome again (a redelivered task) sends nothing new.
    from ingest.tasks import announce_finished

    announce_finished(job_id)
    time.sleep(4)
    assert callback.verified == 1 and endpoint.verified == 1
    assert len(deliveries(sessions)) == 2


def test_a_delivery_left_pending_by_a_dead_broker_is_sent_by_the_sweeper(
    hook_env: HookEnv, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(keys=_callback_key(hook_env, "acme"))
    dead = Celery("dead-broker")
    dead.conf.broker_url = "redis://127.0.0.1:1/0"
    dead.conf.broker_transport_options = {"max_retries": 0}
    client = redis.Redis.from_url(hook_env.settings.redis.url)
    try:
        handler = delivery_handler(
            hook_env.sessions,
            pool=PoolSettings(),
            scheduler=CeleryScheduler(client, marker_ttl_s=3600, app=dead),
        )
        handler.fn([_answer("p1", callback_url=receiver.url)])  # no exception: the log is written
    finally:
        client.close()
    [(row, attempts)] = deliveries(hook_env.sessions)
    assert (row.status, attempts) == ("pending", [])
    hook_env.start_worker()  # its sweeper schedules deliveries pending for over 2 s
    assert wait_for(lambda: receiver.verified == 1, 60), hook_env.log()
    assert wait_for(lambda: deliveries(hook_env.sessions)[0][0].status == "succeeded", 30)
    time.sleep(3)  # later sweeps find it delivered: no second request
    assert receiver.verified == 1
