"""Real health probes of the services ragstream talks to.

Each probe makes one cheap round trip (a Kafka metadata request, Elasticsearch
``_cluster/health``, Redis ``PING``, SQL ``SELECT 1``, the LLM server's ``GET /health``) and
returns a :class:`Probe`; none raises. :func:`probe_all` is the API's readiness (the services
every request needs); ``ragstream health`` adds :func:`probe_llm_servers`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ragstream.settings import Settings


@dataclass(frozen=True, slots=True)
class Probe:
    """Outcome of one health probe: ``latency_ms`` is the round trip in milliseconds."""

    name: str
    healthy: bool
    detail: str
    latency_ms: float


def _timed(name: str, check: Callable[[], str]) -> Probe:
    start = time.perf_counter()
    try:
        detail = check()
        healthy = True
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        healthy = False
    return Probe(name, healthy, detail, (time.perf_counter() - start) * 1000.0)


def probe_kafka(bootstrap_servers: str, timeout_s: float = 5.0) -> Probe:
    """Send a metadata request to the Kafka cluster; detail names the brokers and topic count."""

    def check() -> str:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=int(timeout_s * 1000),
            client_id="ragstream-health",
        )
        try:
            cluster = admin.describe_cluster()
            topics = admin.list_topics()
        finally:
            admin.close()
        brokers = len(cluster.get("brokers", []))
        return f"{brokers} broker(s), {len(topics)} topic(s)"

    return _timed("kafka", check)


def probe_elasticsearch(url: str | list[str], timeout_s: float = 5.0) -> Probe:
    """GET ``_cluster/health`` at ``url`` (one node's URL, or a cluster's list); green or yellow
    is healthy, red is not."""

    def check() -> str:
        from elasticsearch import Elasticsearch

        with Elasticsearch(url, request_timeout=timeout_s) as es:
            health = es.cluster.health()
        status = str(health["status"])
        if status == "red":
            raise RuntimeError("cluster status red")
        return f"status {status}, {health['number_of_nodes']} node(s)"

    return _timed("elasticsearch", check)


def probe_redis(url: str, timeout_s: float = 5.0) -> Probe:
    """Send ``PING`` and expect ``PONG``."""

    def check() -> str:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=timeout_s)
        try:
            if not client.ping():
                raise RuntimeError("PING was not answered with PONG")
            version = client.info("server").get("redis_version", "?")
        finally:
            client.close()
        return f"PONG (redis {version})"

    return _timed("redis", check)


def probe_sql(url: str) -> Probe:
    """Run ``SELECT 1`` on the metadata store."""

    def check() -> str:
        from sqlalchemy import text

        from ragstream.db.engine import make_engine

        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        finally:
            engine.dispose()
        return engine.dialect.name

    return _timed("sql", check)


def probe_llm(name: str, base_url: str, timeout_s: float = 5.0) -> Probe:
    """``GET {base_url}/health`` of an OpenAI-compatible LLM server: llama.cpp answers 200
    ``{"status": "ok"}`` once its model is loaded (503 while loading), ``vllm serve`` 200."""

    def check() -> str:
        import httpx

        response = httpx.get(f"{base_url.rstrip('/')}/health", timeout=timeout_s)
        if response.status_code != 200:
            raise RuntimeError(f"GET /health: HTTP {response.status_code} {response.text[:200]}")
        try:
            status = response.json().get("status", "ok")
        except ValueError:
            status = "ok"
        return f"{base_url}: {status}"

    return _timed(name, check)


def probe_llm_servers(settings: Settings) -> list[Probe]:
    """Probe each distinct LLM server the generation tiers use (a tier without ``base_url``
    uses ``settings.llm``'s); one probe per URL, named ``llm`` plus the tiers on it."""
    tiers: dict[str, list[str]] = {}
    for tier in ("small", "large"):
        url = getattr(settings.generation, tier).base_url or settings.llm.base_url
        tiers.setdefault(url, []).append(tier)
    return [probe_llm(f"llm ({', '.join(names)})", url) for url, names in tiers.items()]


def probe_all(settings: Settings) -> list[Probe]:
    """Probe Kafka, Elasticsearch, Redis and the SQL store named by ``settings``."""
    return [
        probe_kafka(settings.kafka.bootstrap_servers),
        probe_elasticsearch(settings.elasticsearch.hosts),
        probe_redis(settings.redis.url),
        probe_sql(settings.database_url),
    ]
