"""``ragstream ingest``, ``ragstream jobs list|show|retry`` and ``ragstream index rebuild``."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table

from ingest.progress import ProgressLines, Snapshot, format_line
from ragstream.console import USAGE, fail, print_rows
from ragstream.job_status import JOB_STATUSES

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from ingest import jobs
    from ragstream.settings import Settings

TENANT = re.compile(r"[A-Za-z0-9._-]{1,128}")  # the event models' tenant pattern
#: Seconds a job may stay pending before the CLI checks that a Celery worker is running.
PENDING_CHECK_S = 10.0

jobs_app = typer.Typer(help="Bulk ingestion jobs.", no_args_is_help=True)
index_app = typer.Typer(help="The chunk index behind its alias.", no_args_is_help=True)
console = Console()


def _sessions(settings: Settings) -> sessionmaker[Session]:
    from ragstream.db.engine import make_engine, make_session_factory, upgrade_head

    upgrade_head(settings.database_url)
    return make_session_factory(make_engine(settings.database_url))


def ingest_command(
    paths: list[Path] = typer.Argument(..., help="Directories, files or *.manifest.jsonl."),
    tenant: str = typer.Option("default", help="Tenant that owns the documents."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow progress until done."),
) -> None:
    """Submit a Celery bulk job over PATHS and (by default) show its progress.

    A missing path, or one outside the allowed roots (naming the setting that allows more),
    is one line on stderr and exit status 2.
    """
    from ingest import jobs
    from ingest.sources import ALLOWED_ROOTS_SETTING, OutsideRootsError, SourceRejectedError, scan
    from ingest.tasks import run_job
    from ragstream.settings import get_settings

    settings = get_settings()
    if not TENANT.fullmatch(tenant):
        fail(f"tenant {tenant!r} must match {TENANT.pattern}", USAGE)
    for path in paths:  # the operator's own machine: say what is missing, before the roots
        if not path.exists():
            fail(f"{path}: no such file or directory", USAGE)
    try:
        found = scan(
            paths,
            settings.ingest.allowed_roots,
            settings.ingest.extensions,
            settings.ingest.exclude_dirs,
        )
    except OutsideRootsError as exc:
        fail(f"{exc}; add its folder to {ALLOWED_ROOTS_SETTING} to allow it", USAGE)
    except SourceRejectedError as exc:
        fail(str(exc), USAGE)
    files = found.files
    if not files:
        fail(f"nothing to ingest: {found.nothing_reason()}")
    sessions = _sessions(settings)
    job_id = jobs.create_job(sessions, tenant, files)
    try:
        run_job.delay(job_id)
    except Exception as exc:  # broker unreachable: fail the job with the reason, not hang
        reason = f"could not submit to the Celery broker: {type(exc).__name__}: {exc}"
        jobs.fail_job(sessions, job_id, reason)
        fail(f"job {job_id}: {reason}")
    console.print(f"job [bold]{job_id}[/bold]: {len(files)} document(s) for tenant {tenant!r}")
    if wait:
        follow(settings, sessions, job_id)


def follow(settings: Settings, sessions: sessionmaker[Session], job_id: str) -> jobs.JobProgress:
    """Follow the job until it finishes, then print and return its summary: a progress bar on
    a terminal, else plain lines (every 5% of the documents or 30 s; see
    :mod:`ingest.progress`)."""
    t0 = time.monotonic()
    watch = _Watch(settings, sessions, job_id)
    state = _follow_bar(watch, t0) if console.is_terminal else _follow_lines(watch, t0)
    print_summary(sessions, state, time.monotonic() - t0)
    return state


class _Watch:
    """One poll of a followed job: the CLI reaps stale jobs too (no worker, no hang) and
    checks that a Celery worker answers while the job is pending."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session], job_id: str) -> None:
        self.settings, self.sessions, self.job_id = settings, sessions, job_id
        self._last_reap = 0.0
        self._last_ping = time.monotonic()

    def poll(self, state: jobs.JobProgress | None) -> jobs.JobProgress:
        from ingest import jobs
        from ingest.tasks import reap_stale_jobs

        if state is not None:
            time.sleep(0.5)
            if time.monotonic() - self._last_reap > self.settings.ingest.job_watchdog_interval_s:
                reap_stale_jobs(self.settings, self.sessions)
                self._last_reap = time.monotonic()
            if state.status == "pending" and time.monotonic() - self._last_ping > PENDING_CHECK_S:
                _require_worker(self.settings, self.job_id)
                self._last_ping = time.monotonic()
        return jobs.progress(self.sessions, self.job_id)


def _follow_bar(watch: _Watch, t0: float) -> jobs.JobProgress:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("docs · {task.fields[chunks]} chunks · {task.fields[rate]} docs/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        state = watch.poll(None)
        task = bar.add_task("ingest", total=state.total, chunks=0, rate="-")
        while not state.finished:
            state = watch.poll(state)
            finished = state.done + state.failed
            rate = finished / max(1e-9, time.monotonic() - t0)
            bar.update(task, completed=finished, chunks=state.chunks, rate=f"{rate:.1f}")
    return state


def _follow_lines(watch: _Watch, t0: float) -> jobs.JobProgress:
    lines = ProgressLines()
    label = f"ingest {watch.job_id}"
    state = watch.poll(None)
    while True:
        snap = Snapshot.of(state, time.monotonic() - t0)
        if lines.due(snap, final=state.finished):
            print(format_line(label, snap), flush=True)
        if state.finished:
            return state
        state = watch.poll(state)


def _require_worker(settings: Settings, job_id: str) -> None:
    """Exit with a clear message when no Celery worker answers a ping (the job stays
    pending and runs once a worker starts)."""
    from ragstream.celery_app import celery_app

    try:
        replies = celery_app.control.ping(timeout=2.0)
    except Exception:  # a broker problem reads the same as no worker
        replies = []
    if not replies:
        if console.is_terminal:
            console.print()  # off the progress bar's line
        fail(
            f"no Celery worker is running for queue {settings.celery.queue!r}; "
            f"job {job_id} stays pending until one starts (`ragstream celery-worker`)."
        )


def print_summary(
    sessions: sessionmaker[Session], state: jobs.JobProgress, seconds: float | None
) -> None:
    """A table of the job's outcome and its first failures."""
    from ingest import jobs

    job = Column("job", no_wrap=True, min_width=len(state.job_id))  # ids are copied: never cut
    table = Table(job, "status", "documents", "done", "failed", "chunks", "seconds")
    colour = {"succeeded": "green", "failed": "red"}.get(state.status, "yellow")
    table.add_row(
        state.job_id,
        f"[{colour}]{state.status}[/{colour}]",
        str(state.total),
        str(state.done),
        str(state.failed),
        str(state.chunks),
        f"{seconds:.1f}" if seconds is not None else "-",
    )
    console.print(table)
    if state.error:
        console.print(f"[red]job error[/red]: {state.error}")
    fails = jobs.failures(sessions, state.job_id)
    for path, error in fails[:20]:
        console.print(f"[red]failed[/red] {path}: {error}")
    if len(fails) > 20:
        console.print(f"... and {len(fails) - 20} more (ragstream jobs show {state.job_id})")


@jobs_app.command("show")
def show(job_id: str) -> None:
    """Print a job's status, counts and every failed document."""
    from ingest import jobs
    from ragstream.db.models import utcnow
    from ragstream.settings import get_settings

    sessions = _sessions(get_settings())
    try:
        state = jobs.progress(sessions, job_id)
    except KeyError:
        fail(f"no job {job_id}", USAGE)
    elapsed = None
    if state.started_at:
        end = jobs.aware(state.finished_at) if state.finished_at else utcnow()
        elapsed = (end - jobs.aware(state.started_at)).total_seconds()
    print_summary(sessions, state, elapsed)
    for path, error in jobs.failures(sessions, job_id)[20:]:
        console.print(f"[red]failed[/red] {path}: {error}")


@jobs_app.command("list")
def list_command(
    limit: int = typer.Option(20, min=1, help="Show at most this many jobs, newest first."),
    status: str | None = typer.Option(
        None, help=f"Only jobs in this status: {', '.join(JOB_STATUSES)}."
    ),
    tenant: str | None = typer.Option(None, help="Only jobs of this tenant."),
) -> None:
    """List recent bulk jobs: id, tenant, status, document counts, chunks, created, seconds."""
    from ingest import jobs
    from ragstream.settings import get_settings

    if status is not None and status not in JOB_STATUSES:
        fail(f"--status must be one of {', '.join(JOB_STATUSES)}", USAGE)
    found = jobs.recent_jobs(_sessions(get_settings()), limit=limit, status=status, tenant=tenant)
    if not found:
        console.print("no jobs" + (f" with status {status}" if status else ""))
        return
    rows = []
    for job in found:
        colour = {"succeeded": "green", "failed": "red"}.get(job.status, "yellow")
        rows.append(
            [
                job.job_id,
                job.tenant,
                f"[{colour}]{job.status}[/{colour}]",
                str(job.total),
                str(job.done),
                str(job.failed),
                str(job.chunks),
                jobs.aware(job.created_at).strftime("%Y-%m-%d %H:%M:%S"),
                _seconds(job),
            ]
        )
    headers = ["job", "tenant", "status", "documents", "done", "failed", "chunks"]
    print_rows(console, [*headers, "created (UTC)", "seconds"], rows)  # ids never cut


def _seconds(job: jobs.JobProgress) -> str:
    """Seconds the job ran (so far, when it still runs); ``-`` before it started."""
    from ingest import jobs
    from ragstream.db.models import utcnow

    if job.started_at is None:
        return "-"
    end = jobs.aware(job.finished_at) if job.finished_at else utcnow()
    return f"{(end - jobs.aware(job.started_at)).total_seconds():.0f}"


@jobs_app.command("retry")
def retry(job_id: str, wait: bool = typer.Option(True, "--wait/--no-wait")) -> None:
    """Re-run a job's failed documents only."""
    from ingest import jobs
    from ingest.tasks import enqueue_batches
    from ragstream.settings import get_settings

    settings = get_settings()
    sessions = _sessions(settings)
    try:
        n = jobs.reset_failed(sessions, job_id)
    except KeyError:
        fail(f"no job {job_id}", USAGE)
    if not n:
        console.print("no failed documents to retry")
        return
    enqueue_batches(job_id, jobs.pending_item_ids(sessions, job_id), settings.ingest.job_batch_size)
    console.print(f"retrying {n} failed document(s) of job {job_id}")
    if wait:
        follow(settings, sessions, job_id)


@index_app.command("optimize")
def optimize_command(
    segments: int = typer.Option(1, min=1, help="Lucene segments to merge down to."),
) -> None:
    """Force-merge the chunk index after a bulk load or a large delete; blocks until done.

    Each Lucene segment is searched on its own (one HNSW graph each) and deleted documents
    are visited until merged away: on the two manuals (26k chunks in 6 segments, 20k deleted)
    a merge to one segment took BM25 from 13 to 6.5 ms and kNN from 6 to 4 ms a search
    (docs/benchmarks/index.md). Elasticsearch advises force-merging only an index that is not
    being written heavily, so run it after bulk jobs, not during one.
    """
    from ingest.factory import merge_index
    from ragstream.settings import get_settings

    settings = get_settings()
    alias = settings.elasticsearch.index_alias
    started = time.perf_counter()
    try:
        before, after = merge_index(settings, segments)
    except ValueError as exc:
        fail(str(exc))
    console.print(
        f"{alias}: {before['segments']} segments, {before['deleted_docs']} deleted docs -> "
        f"[bold]{after['segments']} segments, {after['deleted_docs']} deleted[/bold] "
        f"({after['docs']} docs, {time.perf_counter() - started:.1f}s)"
    )


@index_app.command("definitions")
def definitions_command(
    roots: list[Path] = typer.Argument(..., help="HTML folders to read (e.g. a manual's root)."),
) -> None:
    """Count the definition entries the parser finds in every HTML page under each folder, by
    kind (what indexing them would add to the index; docs/definitions.md)."""
    from ingest.parsers.definitions import count_entries

    for root in roots:
        if not root.is_dir():
            fail(f"not a folder: {root}")
        pages, entries, kinds = count_entries(root)
        by_kind = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
        console.print(f"{root}: {pages} pages, [bold]{entries} entries[/bold] ({by_kind})")


#: Seconds a writer's bulk request may take beyond the model check interval before the old
#: index is write-blocked after a rebuild's swap (a later write fails there, with its reason).
REWRITE_GRACE_S = 5.0


@index_app.command("rebuild")
def rebuild_command(
    delete_old: bool = typer.Option(
        False, help="Delete the previous physical index after the swap."
    ),
    source: str | None = typer.Option(
        None, help="Index or alias to copy from; default: the index behind the alias."
    ),
    target: str | None = typer.Option(
        None, help="Physical index to create; default: <alias>-v<N+1>."
    ),
    swap: bool = typer.Option(
        True, help="Swap the alias to the new index (--no-swap: a side index for evaluation)."
    ),
    reuse_vectors: bool | None = typer.Option(
        None,
        "--reuse-vectors/--re-embed",
        help="Copy the stored vectors / embed again; default: copy when the source records "
        "the configured model.",
    ),
) -> None:
    """Build a new physical index from the stored chunks (re-embedded with the configured
    model, stemmed fields added) and swap the alias; queries are answered throughout. After
    the swap it waits ``embedding.model_check_interval_s`` + 5 s for running pools and writers
    to follow the new model, then write-blocks the old index and catches up."""
    from ingest.factory import build_index_and_embedder
    from ingest.rebuild import rebuild
    from ragstream.settings import get_settings

    settings = get_settings()
    index, embedder = build_index_and_embedder(settings, for_rebuild=True)
    # Every pool and writer re-reads the alias's model within the check interval; a bulk write
    # already under way gets REWRITE_GRACE_S more before the old index is write-blocked.
    grace_s = settings.embedding.model_check_interval_s + REWRITE_GRACE_S
    with console.status("copying chunks...") as status:
        report = rebuild(
            index,
            embedder,
            delete_old=delete_old,
            on_progress=lambda n: status.update(f"copied {n} chunks"),
            source=source,
            target=target,
            swap=swap,
            reuse_vectors=reuse_vectors,
            grace_s=grace_s,
        )
    swapped = f"alias {index.alias}: " if swap else "no swap: "
    console.print(
        f"{swapped}{report.old_index} -> [bold]{report.new_index}[/bold] "
        f"({index.model_id}, {'vectors copied' if report.reused_vectors else 're-embedded'}); "
        f"{report.copied} chunks copied, {report.caught_up} caught up, "
        f"{report.deleted_after_swap} deleted after the swap, {report.seconds}s"
    )
