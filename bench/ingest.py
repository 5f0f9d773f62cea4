"""``ragstream bench ingest``: the write path's throughput against the model's raw encode rate.

One run over a fixed sample of the real corpus (``--docs`` pages spread evenly over both
installed manuals, :data:`SOURCE_DIRS`, copied under ``.local/ingest/`` so they can be edited):

(a) the raw encode rate: the configured embedding model (``embedding.backend``, built by
    :func:`ingest.factory.build_model` with the ingest path's batch size and threads) encoding
    exactly the sample's chunks, in one call, no cache;
(b) the stream path: ingest events on a private Kafka topic through a ``ragstream worker
    ingest`` process (private consumer group);
(c) the Celery batch path: a bulk job on a ``ragstream celery-worker`` process (private queue);
(d) a naive baseline (``--naive``): one document at a time: parse, embed, index, refresh;
(e) re-ingest of the unchanged sample (Celery path);
(f) re-ingest after editing 1% of the documents (Celery path);
(g) re-ingest of the unchanged sample (stream path);
(a') the raw encode rate again, after the paths: ratios are to the faster of (a) and (a').

Each of (b), (c), (d) has its own index (``bench-<run>-<path>``, never the live alias) and an
empty embedding cache (its own key prefix), so none profits from another's vectors; model
loading is excluded (each process is warmed up first). The stream path's result events carry
the pipeline's stage times per batch; their sums are reported as (b)'s ``profile``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from ragstream.settings import PROJECT_ROOT, Settings

console = Console(width=160)
T = TypeVar("T")
#: The installed manuals the sample is drawn from (the corpus of the live index).
SOURCE_DIRS = (
    Path("/usr/share/doc/python3.11/html"),
    Path("/usr/share/doc/postgresql-doc-15/html"),
)


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
    #: Seconds per stage where known: (a) parse and chunk; (b) the pipeline's stage times
    #: summed over its batches (``parse``, ``chunk``, ``embed``, ``index``, ``refresh``,
    #: ``total``).
    profile: dict[str, float] | None = None


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


def even_sample(items: Sequence[T], n: int) -> list[T]:
    """``n`` items spread evenly over ``items`` (all of them when ``n`` is 0 or at least
    ``len(items)``), in order: item ``floor(i * len / n)`` for ``i < n``.

    Raises:
        ValueError: ``n`` is negative.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n == 0 or n >= len(items):
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


def corpus_pages(
    dirs: Sequence[Path] = SOURCE_DIRS, exclude_dirs: Sequence[str] = ("_sources", "_static")
) -> list[tuple[Path, Path]]:
    """``(manual dir, page)`` of every ``*.html`` page of ``dirs`` outside ``exclude_dirs``,
    sorted by manual then path."""
    out: list[tuple[Path, Path]] = []
    for d in dirs:
        pages = sorted(
            p for p in d.rglob("*.html") if not set(p.relative_to(d).parts) & set(exclude_dirs)
        )
        out.extend((d, p) for p in pages)
    return out


def prepare_slice(n_docs: int, root: Path, exclude_dirs: Sequence[str] = ()) -> list[Path]:
    """Copy ``n_docs`` pages spread evenly over both manuals (:func:`even_sample`; 0: every
    page) under ``root/<manual>/<path>``; return the copies.

    Raises:
        RuntimeError: the manuals are not installed.
    """
    pages = corpus_pages(SOURCE_DIRS, tuple(exclude_dirs) or ("_sources", "_static"))
    if not pages:
        raise RuntimeError(f"no HTML pages under {', '.join(map(str, SOURCE_DIRS))}")
    out: list[Path] = []
    for manual, page in even_sample(pages, n_docs):
        target = root / manual.parent.name / page.relative_to(manual)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, target)
        out.append(target)
    return out


def measure_hardware(settings: Settings, files: list[Path]) -> tuple[PathResult, int]:
    """(a): encode exactly the sample's chunks with the configured model, as the ingest path
    builds it (:func:`ingest.factory.build_model`: batch size ``embedding.batch_size``, the
    runtime's default threads), in one call, no cache. Parse and chunk times are its
    ``profile``."""
    from ingest.factory import build_chunker, build_model
    from ingest.parsers import parse

    chunker = build_chunker(settings)
    t0 = time.perf_counter()
    parsed = [d for f in files for d in parse(f.read_bytes(), filename=str(f))]
    t1 = time.perf_counter()
    texts = [c.embed_text for d in parsed for c in chunker.chunk(d)]
    t2 = time.perf_counter()
    model = build_model(settings)
    model.warm_up()
    model.embed(texts[:64])  # warm the kernels
    t3 = time.perf_counter()
    model.embed(texts)
    seconds = time.perf_counter() - t3
    result = _result(
        f"(a) raw encode: {model.model_id.split('@')[0]}", len(files), len(texts), seconds
    )
    result.profile = {"parse": round(t1 - t0, 2), "chunk": round(t2 - t1, 2)}
    return result, len(texts)


def measure_naive(env: _Env, files: list[Path]) -> PathResult:
    """(d): one document at a time, embed (no cache), index, refresh."""
    from ingest.factory import build_chunker, build_index, build_model
    from ingest.ops import IngestOp
    from ingest.pipeline import IngestPipeline
    from ingest.registry import DocumentRegistry
    from ingest.types import ParseOptions
    from ragstream.db.engine import make_engine, make_session_factory, upgrade_head

    s = env.settings
    upgrade_head(s.database_url)
    model = build_model(s)
    model.warm_up()
    pipeline = IngestPipeline(
        build_chunker(s),
        model,
        build_index(s, model.dim, model.model_id),
        DocumentRegistry(make_session_factory(make_engine(s.database_url))),
        parse_options=ParseOptions.from_settings(s.ingest),
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


def batch_profile(timings: Sequence[dict[str, float]]) -> dict[str, float]:
    """Seconds per stage summed over the batches of ``timings`` (each result event of a batch
    carries the same ``timings_ms``; one copy of each distinct dict counts once)."""
    seen: set[str] = set()
    out: dict[str, float] = {}
    for t in timings:
        key = json.dumps(t, sort_keys=True)
        if not t or key in seen:
            continue
        seen.add(key)
        for stage, ms in t.items():
            out[stage] = out.get(stage, 0.0) + ms / 1000
    return {k: round(v, 2) for k, v in out.items()}


def measure_stream(env: _Env, files: list[Path]) -> list[PathResult]:
    """(b) and (g): ingest events through one ingest pool process, then the same again."""
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

    def send_all() -> float:
        results.clear()
        t0 = time.perf_counter()
        for f in files:
            producer.send(
                registry.name(INGEST),
                IngestRequest(tenant="bench", doc_id=str(f), op="upsert", source_path=str(f)),
            )
        producer.flush()
        drain(len(files), 1800)
        return time.perf_counter() - t0

    def outcome(name: str, seconds: float) -> PathResult:
        chunks = sum(r.chunk_count for r in results if r.status == "indexed")
        failed = sum(r.status == "failed" for r in results)
        r = _result(name, len(results), chunks, seconds, note=f"{failed} failed" if failed else "")
        r.profile = batch_profile([dict(x.timings_ms) for x in results])
        return r

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
        first = outcome("(b) stream path: Kafka ingest pool", send_all())
        again = outcome("(g) stream re-ingest, unchanged", send_all())
    finally:
        _stop(pool)
        consumer.close()
        producer.close()
    return [first, again]


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


#: The sentence :func:`edit_page` adds.
EDIT_MARK = "Edited for the benchmark."


def edit_page(html: str) -> str:
    """``html`` with a sentence added to the first paragraph after its first ``<h1`` (else
    ``<h2``): in the main content, which the HTML parser keeps (a sidebar's paragraphs before
    it, or text before ``</body>``, are boilerplate it drops).

    Raises:
        ValueError: no ``</p>`` after a heading.
    """
    start = next((i for i in (html.find("<h1"), html.find("<h2")) if i >= 0), -1)
    end = html.find("</p>", start) if start >= 0 else -1
    if end < 0:
        raise ValueError("no paragraph after a heading to edit")
    return html[:end] + " " + EDIT_MARK + html[end:]


def measure_celery(env: _Env, files: list[Path], edit_fraction: float) -> list[PathResult]:
    """(c), (e), (f) on one Celery worker process."""
    from ingest.parsers import parse
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
        out.append(_result("(e) batch re-ingest, unchanged", state.done, 0, seconds))
        n_edit = max(1, round(len(files) * edit_fraction))
        edited = 0
        for f in files:
            if edited == n_edit:
                break
            try:
                html = edit_page(f.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if EDIT_MARK in " ".join(d.text for d in parse(html.encode(), filename=str(f))):
                f.write_text(html, encoding="utf-8")  # only an edit the parser sees
                edited += 1
        seconds, state = _run_job(env, files)
        out.append(
            _result(
                f"(f) re-ingest after editing {edited} doc(s)", state.done, state.chunks, seconds
            )
        )
    finally:
        _stop(worker)
    return out


def load_average() -> float:
    """The 1-minute load average (``os.getloadavg``)."""
    return round(os.getloadavg()[0], 2)


def run_ingest_bench(
    settings: Settings, n_docs: int, edit_fraction: float = 0.01, *, naive: bool = False
) -> tuple[list[PathResult], dict[str, Any]]:
    """Run (a)-(g) ((d) only with ``naive``); return the results with ratios filled in, and
    the run's facts (backend, model, sample, load averages, times)."""
    run = uuid.uuid4().hex[:6]
    root = PROJECT_ROOT / ".local" / "ingest" / f"bench-{run}"
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_start = load_average()
    files = prepare_slice(n_docs, root / "docs", settings.ingest.exclude_dirs)
    a, _ = measure_hardware(settings, files)
    console.print(a)
    results = [a]
    try:
        for r in measure_stream(_Env(settings, f"{run}-stream", root), files):
            console.print(r)
            results.append(r)
        if naive:
            r = measure_naive(_Env(settings, f"{run}-naive", root), files)
            console.print(r)
            results.append(r)
        for r in measure_celery(_Env(settings, f"{run}-celery", root), files, edit_fraction):
            console.print(r)
            results.append(r)
        again, _ = measure_hardware(settings, files)
        again.name = again.name.replace("(a) raw encode", "(a') raw encode again", 1)
        console.print(again)
        results.append(again)
    finally:
        _cleanup(settings, run)
    fill_ratios(results)
    emb = settings.embedding
    facts = {
        "at": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "backend": emb.backend,
        "model": a.name.split(": ", 1)[-1],
        "batch_size": emb.batch_size,
        "docs": len(files),
        "sample": f"{len(files)} pages spread evenly over " + ", ".join(map(str, SOURCE_DIRS)),
        "load_avg_1m": {"start": load_start, "end": load_average()},
        "cpus": os.cpu_count(),
    }
    return results, facts


def fill_ratios(results: list[PathResult]) -> None:
    """Each path's chunks/s over the raw encode rate (``ratio_to_a``), and each re-ingest's
    time as a share of its path's first ingest ((e), (f) of (c); (g) of (b)) in its ``note``.

    The raw rate is the faster of (a), measured before the paths, and (a'), measured after
    them, when both are there: the machine's speed drifts between minutes (other work on a
    shared host), and the faster one is the stricter denominator.
    """
    raws = [r for r in results if r.name.startswith(("(a)", "(a')"))]
    limit = max(r.chunks_per_s for r in raws)
    for r in results:
        r.ratio_to_a = round(r.chunks_per_s / limit, 3) if r.chunks else None
    by = {r.name[:3]: r for r in results}
    for tag, first in (("(e)", "(c)"), ("(f)", "(c)"), ("(g)", "(b)")):
        if tag in by and first in by:
            share = 100 * by[tag].seconds / by[first].seconds
            by[tag].note = f"{share:.1f}% of {first}'s time"


def _cleanup(settings: Settings, run: str) -> None:
    """Delete the run's indices (``bench-<run>-*``) and its embedding-cache keys
    (``bench:<run>-*``, one prefix per path: :class:`_Env`)."""
    import redis
    from elasticsearch import Elasticsearch

    es = Elasticsearch(settings.elasticsearch.url)
    es.indices.delete(index=f"bench-{run}-*", allow_no_indices=True, expand_wildcards="all")
    es.close()
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=10)
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"bench:{run}-*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            client.delete(*batch)
            batch.clear()
    if batch:
        client.delete(*batch)
    client.close()


def render(results: list[PathResult], facts: dict[str, Any] | None = None) -> Table:
    """A rich table of the results."""
    title = "ingest: write paths vs the model's raw encode rate (a)"
    if facts:
        load = facts["load_avg_1m"]
        title += f"; {facts['backend']}, load {load['start']}-{load['end']}"
    table = Table(title=title)
    for col in ("path", "docs", "chunks", "seconds", "docs/s", "chunks/s", "ratio to (a)", "note",
                "profile (s)"):  # fmt: skip
        table.add_column(col)
    for r in results:
        ratio = "-" if r.ratio_to_a is None else f"{r.ratio_to_a:g}"
        prof = ", ".join(f"{k} {v:g}" for k, v in (r.profile or {}).items())
        table.add_row(r.name, str(r.docs), str(r.chunks), f"{r.seconds:g}", f"{r.docs_per_s:g}",
                      f"{r.chunks_per_s:g}", ratio, r.note, prof)  # fmt: skip
    return table


def write_json(results: list[PathResult], out: Path, facts: dict[str, Any] | None = None) -> None:
    """Write the results (and the run's facts) as JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"bench": "ingest", **(facts or {}), "results": [asdict(r) for r in results]}
    out.write_text(json.dumps(payload, indent=2))
