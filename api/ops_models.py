"""The bodies of the console's operations data (``GET /v1/ops/status``), shared by the
cluster-wide collector (:mod:`api.ops`) and a tenant operator's view (:mod:`api.ops_tenant`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ProcessOut(BaseModel):
    """One supervised process; times are UNIX seconds."""

    name: str
    command: str
    pool: str | None = Field(default=None, description="The pool it runs, if a pool process.")
    state: str
    pid: int | None = None
    restarts: int = 0
    started_at: float | None = None
    last_exit_code: int | None = None
    last_exit_at: float | None = None


class ProcessesOut(BaseModel):
    """The supervisor's processes (empty, with ``error``, when no supervisor runs here)."""

    supervisor_pid: int | None = None
    running: bool = False
    updated_at: float | None = None
    processes: list[ProcessOut] = Field(default_factory=list)
    error: str | None = None


class PartitionLag(BaseModel):
    """Consumer lag of one partition: ``end`` minus ``committed`` (records)."""

    partition: int
    lag: int
    end: int
    committed: int | None = None


class PoolOut(BaseModel):
    """One pool: lag from Kafka, members from Redis, the rest from its metrics endpoints
    (``null`` when no endpoint answered). Windowed numbers cover ``window_s`` seconds."""

    name: str
    topic: str
    group: str
    members: int = 0
    lag: int | None = None
    partitions: list[PartitionLag] = Field(default_factory=list)
    max_batch: int
    max_wait_ms: int
    metrics_endpoints: list[int] = Field(default_factory=list, description="Ports scraped.")
    window_s: float = 0.0
    since_start: bool = Field(
        default=False,
        description="Batch size, p50/p95 and errors are totals since the pool started "
        "(scraped for less than a window yet); throughput is over `window_s` either way.",
    )
    throughput_per_s: float | None = None
    batch_size_mean: float | None = None
    batch_p50_ms: float | None = None
    batch_p95_ms: float | None = None
    errors: float | None = Field(default=None, description="Handler errors in the window.")
    errors_total: float | None = None
    dead_letters_total: float | None = None
    in_flight: float | None = None
    history: list[list[float]] = Field(
        default_factory=list, description="`[unix_s, events/s, lag]` samples, oldest first."
    )
    error: str | None = None


class DlqOut(BaseModel):
    """Depth of one dead-letter topic (``null`` when it could not be read)."""

    topic: str
    source: str
    depth: int | None = None
    error: str | None = None


class ProbeOut(BaseModel):
    """One LLM server's health probe."""

    name: str
    healthy: bool
    detail: str
    latency_ms: float


class IndexOut(BaseModel):
    """The chunk index: its alias, the physical index behind it, its model and size."""

    alias: str
    physical: str | None = None
    model_id: str | None = None
    dims: int | None = None
    configured_model: str = ""
    chunk_count: int | None = None
    error: str | None = None


class OpsStatus(BaseModel):
    """Everything the Operations page shows, collected at ``collected_at`` (UNIX s).

    ``scope``: ``cluster`` (a ``cluster-operator`` key: the whole deployment) or ``tenant``
    (an ``operator`` key: only ``tenant``'s lag, dead letters and chunks, no processes;
    :mod:`api.ops_tenant`)."""

    collected_at: float
    scope: Literal["cluster", "tenant"] = "cluster"
    tenant: str | None = None
    processes: ProcessesOut
    pools: list[PoolOut]
    dlq: list[DlqOut]
    llm: list[ProbeOut]
    index: IndexOut
