"""``ragstream bench ingest``: the write path's throughput against the hardware limit.

One run over a fixed slice of the real corpus (the first ``--docs`` pages of the Python 3.11
manual's ``library/``, copied under ``.local/ingest/`` so they can be edited):

(a) the hardware limit: the configured model (``settings.embedding``) encoding exactly the
    slice's chunks;
(b) the stream path: ingest events through a ``ragstream worker ingest`` process;
(c) the Celery batch path: a bulk job on a ``ragstream celery-worker`` process;
(d) a naive baseline: one document at a time: parse, embed, index, refresh;
(e) re-ingest of the unchanged slice (Celery path);
(f) re-ingest after editing 1% of the documents (Celery path).

Each of (b), (c), (d) has its own index and an empty embedding cache, so none profits from
another's vectors; model loading is excluded (each process is warmed up first).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragstream.settings import PROJECT_ROOT, Settings

console = Console(width=160)
SOURCE_DIR = Path("/usr/share/doc/python3.11/html/library")


@dataclass
class PathResult:
    """One measured path: documents and chunks per second and the ratio to (a)."""

    name: str
    docs: int
    chunks: int
    seconds: float
    docs_per_s: float
    chunks_per_s: float
    ratio_to_a: float | None = None
    note: str = ""


def _result(name: str, docs: int, chunks: int, seconds: float, note: str = "") -> PathResult:
    return PathResult(name, docs, chunks, round(seconds, 2), round(docs / seconds, 2),
                      round(chunks / seconds, 2), note=note)  # fmt: skip


class _Env:
    """An isolated configuration (index alias, cache prefix, SQL file, topics, queue)."""

    def __init__(self, base: Settings, name: str, root: Path) -> None:
        self.name = name
        self.values = {
            "RAGSTREAM_DATABASE__URL": f"sqlite:///{root / (name + '.db')}",
            "RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS": f"bench-{name}",
            "RAGSTREAM_EMBEDDING__CACHE_KEY_PREFIX": f"bench:{name}:emb:",
            "RAGSTREAM_CELERY__QUEUE": f"bench-{name}",
            "RAGSTREAM_KAFKA__TOPIC_PREFIX": f"bench-{name}.",
            "RAGSTREAM_INGEST__JOB_BATCH_SIZE": "16",
        }
        overrides: dict[str, Any] = {
            "database": base.database.model_copy(
                update={"url": self.values["RAGSTREAM_DATABASE__URL"]}
            ),
            "elasticsearch": base.elasticsearch.model_copy(update={"index_alias": f"bench-{name}"}),
            "embedding": base.embedding.model_copy(
                update={"cache_key_prefix": f"bench:{name}:emb:"}
            ),
            "celery": base.celery.model_copy(update={"queue": f"bench-{name}"}),
            "kafka": base.kafka.model_copy(update={"topic_prefix": f"bench-{name}."}),
            "ingest": base.ingest.model_copy(update={"job_batch_size": 16}),
        }
        self.settings = base.model_copy(update=overrides)
        self.logs = root / f"{name}.log"

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        with self.logs.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "entry.cli", *args],
                env={**os.environ, **self.values},
                stdout=out,
                stderr=out,
                start_new_session=True,
            )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def prepare_slice(n_docs: int, root: Path) -> list[Path]:
    """Copy the first ``n_docs`` pages of the Python manual's library/ under ``root``."""
    pages = sorted(SOURCE_DIR.glob("*.html"))[:n_docs]
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for p in pages:
        target = root / p.name
        shutil.copyfile(p, target)
        out.append(target)
    return out


def measure_hardware(settings: Settings, files: list[Path]) -> tuple[PathResult, int]:
    """(a): encode exactly the slice's chunks with the configured raw model (no cache)."""
    from ingest.factory import build_chunker, build_model
    from ingest.parsers import parse

    chunker = build_chunker(settings)
    texts = [
        c.embed_text
        for f in files
        for d in parse(f.read_bytes(), filename=str(f))
        for c in chunker.chunk(d)
    ]
    model = build_model(settings)
    model.warm_up()
    model.embed(texts[:64])  # warm the kernels
    t0 = time.perf_counter()
    model.embed(texts)
    return _result(
        "(a) hardware limit: encode only", len(files), len(texts), time.perf_counter() - t0
    ), len(texts)


def measure_naive(env: _Env, files: list[Path]) -> PathResult:
    """(d): one document at a time, embed (no cache), index, refresh."""
    from ingest.factory import build_chunker, build_index, build_model
    from ingest.pipeline import IngestOp, IngestPipeline
    from ingest.registry import DocumentRegistry
    from ragstream.db.engine import make_engine, make_session_factory, upgrade_head

    s = env.settings
    upgrade_head(s.database_url)
    model = build_model(s)
    model.warm_up()
    pipeline = IngestPipeline(
        build_chunker(s),
        model,
        build_index(s, model.dim),
        DocumentRegistry(make_session_factory(make_engine(s.database_url))),
    )
    chunks = 0
    t0 = time.perf_counter()
    for f in files:
        [[out]] = pipeline.apply(
            [IngestOp("bench", str(f), data=f.read_bytes(), filename=str(f), source=str(f))]
        )
        chunks += out.chunk_count
    return _result(
        "(d) naive: one doc at a time + refresh", len(files), chunks, time.perf_counter() - t0
    )


def measure_stream(env: _Env, files: list[Path]) -> PathResult:
    """(b): ingest events through one ingest pool process."""
    from ragstream.db.engine import upgrade_head
    from topics.admin import ensure_topics, make_admin
    from topics.consumer import make_consumer
    from topics.ingest import IngestRequest, IngestResult
    from topics.producer import EventProducer, make_producer
    from topics.registry import INGEST, INGEST_RESULTS, TopicRegistry
    from topics.serde import decode

    s = env.settings
    upgrade_head(s.database_url)
    registry = TopicRegistry(s.kafka.topic_prefix)
    admin = make_admin(s.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    consumer = make_consumer(
        s.kafka, registry.name(INGEST_RESULTS), group=None, auto_offset_reset="earliest"
    )
    producer = EventProducer(make_producer(s.kafka))
    results: list[IngestResult] = []

    def drain(n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(results) < n and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=200).values():
                results.extend(decode(IngestResult, r.value) for r in recs)

    pool = env.spawn("worker", "ingest")
    try:
        producer.send(
            registry.name(INGEST),
            IngestRequest(tenant="warmup", doc_id="w", op="upsert", text="warm up"),
        )
        producer.flush()
        drain(1, 300)
        if not results:
            raise RuntimeError(f"ingest pool produced no result; see {env.logs}")
        results.clear()
        t0 = time.perf_counter()
        for f in files:
            producer.send(
                registry.name(INGEST),
                IngestRequest(tenant="bench", doc_id=str(f), op="upsert", source_path=str(f)),
            )
        producer.flush()
        drain(len(files), 900)
        seconds = time.perf_counter() - t0
    finally:
        _stop(pool)
        consumer.close()
        producer.close()
    chunks = sum(r.chunk_count for r in results)
    failed = sum(r.status == "failed" for r in results)
    return _result("(b) stream path: Kafka ingest pool", len(results), chunks, seconds,
                   note=f"{failed} failed" if failed else "")  # fmt: skip


def _run_job(env: _Env, files: list[Path]) -> tuple[float, Any]:
    from ingest import jobs
    from ingest.sources import SourceFile
    from ingest.tasks import run_job
    from ragstream.celery_app import configure_celery
    from ragstream.db.engine import make_engine, make_session_factory

    configure_celery(env.settings)
    sessions = make_session_factory(make_engine(env.settings.database_url))
    job_id = jobs.create_job(sessions, "bench", [SourceFile(str(f), str(f)) for f in files])
    t0 = time.perf_counter()
    run_job.delay(job_id)
    _wait(lambda: jobs.progress(sessions, job_id).finished, 1800, f"job {job_id}")
    return time.perf_counter() - t0, jobs.progress(sessions, job_id)


def measure_celery(env: _Env, files: list[Path], edit_fraction: float) -> list[PathResult]:
    """(c), (e), (f) on one Celery worker process."""
    from ragstream.db.engine import upgrade_head

    upgrade_head(env.settings.database_url)
    worker = env.spawn("celery-worker")
    out = []
    try:
        _wait(
            lambda: env.logs.exists() and "ready" in env.logs.read_text(errors="replace"),
            120,
            "celery worker",
        )
        warm = files[-1].parent / "warmup.txt"
        warm.write_text("warm up the worker's model")
        _run_job(env, [warm])
        seconds, state = _run_job(env, files)
        out.append(_result("(c) batch path: Celery bulk job", state.done, state.chunks, seconds,
                           note=f"{state.failed} failed" if state.failed else ""))  # fmt: skip
        seconds, state = _run_job(env, files)
        out.append(_result("(e) re-ingest, unchanged", state.done, 0, seconds))
        n_edit = max(1, round(len(files) * edit_fraction))
        for f in files[:n_edit]:
            f.write_text(
                f.read_text(encoding="utf-8").replace(
                    "</body>", "<p>Edited for the benchmark.</p></body>"
                ),
                encoding="utf-8",
            )
        seconds, state = _run_job(env, files)
        out.append(
            _result(
                f"(f) re-ingest after editing {n_edit} doc(s)", state.done, state.chunks, seconds
            )
        )
    finally:
        _stop(worker)
    return out


def run_ingest_bench(
    settings: Settings, n_docs: int, edit_fraction: float = 0.01
) -> list[PathResult]:
    """Run (a)-(f); return the results with ratios filled in."""
    run = uuid.uuid4().hex[:6]
    root = PROJECT_ROOT / ".local" / "ingest" / f"bench-{run}"
    files = prepare_slice(n_docs, root / "docs")
    a, _ = measure_hardware(settings, files)
    console.print(a)
    results = [a]
    for name, fn in (("stream", measure_stream), ("naive", measure_naive)):
        r = fn(_Env(settings, f"{run}-{name}", root), files)
        console.print(r)
        results.append(r)
    for r in measure_celery(_Env(settings, f"{run}-celery", root), files, edit_fraction):
        console.print(r)
        results.append(r)
    for r in results:
        r.ratio_to_a = round(r.chunks_per_s / a.chunks_per_s, 3) if r.chunks else None
    c = next(r for r in results if r.name.startswith("(c)"))
    for r in results:
        if r.name.startswith(("(e)", "(f)")):
            r.note = f"{100 * r.seconds / c.seconds:.1f}% of (c)'s time"
    _cleanup(settings, run)
    return results


def _cleanup(settings: Settings, run: str) -> None:
    from elasticsearch import Elasticsearch

    es = Elasticsearch(settings.elasticsearch.url)
    es.indices.delete(index=f"bench-{run}-*", allow_no_indices=True)
    es.close()


def render(results: list[PathResult]) -> Table:
    """A rich table of the results."""
    table = Table(title="ingest: write path vs the hardware limit (a)")
    for col in ("path", "docs", "chunks", "seconds", "docs/s", "chunks/s", "ratio to (a)", "note"):
        table.add_column(col)
    for r in results:
        ratio = "-" if r.ratio_to_a is None else f"{r.ratio_to_a:g}"
        table.add_row(r.name, str(r.docs), str(r.chunks), f"{r.seconds:g}", f"{r.docs_per_s:g}",
                      f"{r.chunks_per_s:g}", ratio, r.note)  # fmt: skip
    return table


def write_json(results: list[PathResult], out: Path) -> None:
    """Write the results as JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"bench": "ingest", "results": [asdict(r) for r in results]}, indent=2)
    )
