"""``ragstream demo``: the main job end to end on the real manuals.

``ragstream demo run``:

1. migrates the SQL store and creates the topics;
2. starts every process of the ``Procfile`` under the supervisor (:mod:`entry.supervisor`), in
   the background (one process per pool, the API, a Celery worker and Flower), unless they
   already run; a process that crashes is restarted with back-off, the others keep running;
3. waits until the API is ready and every pool has reported in;
4. ingests the Python 3.11 and PostgreSQL 15 HTML manuals as one Celery bulk job, printing a
   plain progress line every 5% of the documents or 30 s (:mod:`ingest.progress`; unchanged
   documents are skipped by content hash on a second run); once ``--early-after`` documents
   (300) are in, it asks one sample question whose expected page is already indexed, through
   the API, while the job goes on (:class:`EarlyQuestion`: the index is live while it grows);
   at the end it writes the job's record with the machine's calibration (:func:`record_ingest`,
   :mod:`bench.demo_ingest`: ``.local/demo/ingest.json``, and ``ingest-full.json`` when no page
   was unchanged);
5. asks ten questions (``bench/evaluation/questions.sample.jsonl``, how-to questions among them)
   and one follow-up (:data:`FOLLOW_UP`: the earlier question asked, then the follow-up sent with
   that turn, question and answer, as ``history``) through
   the HTTP API and prints answers, numbered citations and latencies;
6. leaves everything running and prints the URLs and how to stop, then the ingest's one line:
   pages, chunks, definition entries, failed, minutes, chunks and entries a second, and the
   calibration (:func:`bench.demo_ingest.format_line`).

``ragstream demo status`` shows each process, its state and its restarts; ``ragstream demo
stop`` stops the processes (``make down`` stops the services).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from ragstream.paths import PROJECT_ROOT

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from api.models import QueryResult
    from ingest.jobs import JobProgress
    from ragstream.settings import Settings

console = Console()
demo_app = typer.Typer(help="The main job end to end on the real manuals.", no_args_is_help=True)

MANUALS = (
    Path("/usr/share/doc/python3.11/html"),
    Path("/usr/share/doc/postgresql-doc-15/html"),
)
QUESTIONS = PROJECT_ROOT / "bench" / "evaluation" / "questions.sample.jsonl"
PROCFILE = PROJECT_ROOT / "Procfile"
PID_FILE = "supervisor.pid"
POOLS = ("ingest", "retrieval", "rerank", "generation-small", "generation-large", "delivery")
TENANT = "default"
#: The manual of each ``corpus`` of the sample questions (their ``expected_pages`` are relative
#: to it).
CORPUS_ROOTS = {"python-3.11": MANUALS[0], "postgresql-15": MANUALS[1]}
#: Documents indexed before the early question ("a few hundred pages": the PostgreSQL manual
#: comes first in path order, and its ``app-*`` pages answer pg-s01 and pg-s04 by then).
EARLY_AFTER_DOCS = 300


def _state_dir(settings: Settings) -> Path:
    path = settings.infra.local_dir / "demo"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _running_pid(settings: Settings) -> int | None:
    pid_file = _state_dir(settings) / PID_FILE
    if not pid_file.exists():
        return None
    text = pid_file.read_text().strip()
    if not text.isdigit() or int(text) <= 1:
        return None
    pid = int(text)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    if "entry.supervisor" not in cmdline or str(PROCFILE) not in cmdline:
        return None  # the pid was reused by another program
    if "State:\tZ" in status:
        return None  # a zombie left by a non-reaping init
    return pid


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (the supervisor starts each Procfile process in its own
    session, so a signal to the supervisor's process group does not reach them)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(stat.parent.name))
    return found


def demo_reranker(settings: Settings) -> tuple[dict[str, str], str]:
    """The rerank pool's backend for the demo: the environment the processes get, and a line
    saying which.

    A configured backend (``rerank.backend`` other than ``none``) is kept. Otherwise the
    trained ONNX cross-encoder ``<infra.local_dir>/models/rerank/<rerank.onnx_model>/`` is
    served when it exists, its manifest says it is trained (``ragstream rerank train``) and
    does not say it loses to the fused order on held-out data (:func:`loses_to_fused`);
    otherwise the fused order is kept, and the line says why.
    """
    from workers.rerank.factory import rerank_models_dir

    rerank = settings.rerank
    if rerank.backend != "none":
        return {}, f"rerank: the configured {rerank.backend} backend ({rerank.model or 'default'})"
    model_dir = rerank_models_dir(settings) / rerank.onnx_model
    if not (model_dir / "model.onnx").is_file():
        return {}, (
            f"rerank: no trained model at {model_dir}; keeping the fused order "
            "(train one with `ragstream rerank train`)"
        )
    try:
        manifest = json.loads((model_dir / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError):
        manifest = {}
    if not isinstance(manifest, dict) or manifest.get("trained") is not True:
        return {}, f"rerank: {model_dir} is not a trained model; keeping the fused order"
    if loses_to_fused(manifest):
        return {}, (
            f"rerank: the trained model {model_dir} does not beat the fused order on held-out "
            "data (its manifest's metrics); keeping the fused order"
        )
    env = {"RAGSTREAM_RERANK__BACKEND": "onnx", "RAGSTREAM_RERANK__MODEL": str(model_dir)}
    return env, f"rerank: the trained cross-encoder {model_dir} (rerank.backend=onnx)"


def loses_to_fused(manifest: dict[str, Any]) -> bool:
    """Whether a rerank model's manifest says it does not beat the fused order: its
    ``metrics.beats_fused`` is false, or, without that, its held-out hit@1 over all groups
    (``metrics.held_out.all``) is not above the fused order's. No metrics: ``False``."""
    metrics = manifest.get("metrics") or {}
    if not isinstance(metrics, dict):
        return False
    if isinstance(metrics.get("beats_fused"), bool):
        return not metrics["beats_fused"]
    held = (metrics.get("held_out") or {}).get("all") or {}
    model = (held.get("model") or {}).get("hit@1")
    fused = (held.get("fused") or {}).get("hit@1")
    return isinstance(model, int | float) and isinstance(fused, int | float) and model <= fused


def start_processes(settings: Settings, extra_env: dict[str, str] | None = None) -> int:
    """Start the Procfile under the supervisor (new session, logs in
    ``.local/demo/processes.log``, state in ``.local/demo/supervisor.json``), with
    ``extra_env`` added to the processes' environment."""
    pid = _running_pid(settings)
    if pid is not None:
        console.print(f"processes already running (supervisor pid {pid})")
        return pid
    state = _state_dir(settings)
    log = (state / "processes.log").open("ab")
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)  # passed through to the processes; the Procfile runs `ragstream`
    env.update(extra_env or {})
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "entry.supervisor",
            "--procfile",
            str(PROCFILE),
            "--state-dir",
            str(state),
            "--cwd",
            str(PROJECT_ROOT),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    (state / PID_FILE).write_text(str(proc.pid))
    console.print(f"started the Procfile under the supervisor (pid {proc.pid}); logs: {log.name}")
    return proc.pid


def wait_ready(settings: Settings, timeout_s: float = 300) -> None:
    """Wait for ``/readyz`` and a pressure report of every pool.

    Raises:
        typer.Exit: not ready within ``timeout_s`` (the log tail is printed).
    """
    import httpx
    import redis

    from workers.runtime.pressure import read_pressure

    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    url = f"http://{settings.api.host}:{settings.api.port}/readyz"
    deadline = time.monotonic() + timeout_s
    missing: list[str] = ["api", *POOLS]
    with console.status("waiting for the API and the pools..."):
        while time.monotonic() < deadline:
            missing = []
            try:
                if httpx.get(url, timeout=5).status_code != 200:
                    missing.append("api")
            except httpx.HTTPError:
                missing.append("api")
            prefix = settings.kafka.topic_prefix
            missing += [p for p in POOLS if read_pressure(client, prefix + p).members == 0]
            if not missing:
                console.print("API ready; every pool reported in")
                return
            if _running_pid(settings) is None:
                break
            time.sleep(1.0)
    tail = (_state_dir(settings) / "processes.log").read_text(errors="replace")[-4000:]
    console.print(f"[red]not ready[/red]: {', '.join(missing)}\n{tail}")
    raise typer.Exit(1)


def demo_key(settings: Settings) -> str:
    """The demo's cluster-operator API key for tenant ``default`` (created once, kept in
    ``.local/demo``; a kept key of another role is replaced, so the console's Operations page
    opens with the whole deployment)."""
    from api.auth import create_key, lookup
    from ragstream.db.engine import make_engine, make_session_factory

    sessions = make_session_factory(make_engine(settings.database_url))
    path = _state_dir(settings) / "api_key"
    if path.exists():
        key = path.read_text().strip()
        found = lookup(sessions, key)
        if found is not None and found.is_cluster_operator and found.principals is None:
            return key
    # The demo's owner runs the deployment and loads the whole knowledge base: a
    # cluster-operator key that reads every document (``*``), so it can also set who reads one
    # (docs/permissions.md) and sees every process on the Operations page.
    key, _ = create_key(sessions, TENANT, name="demo", role="cluster-operator", principals=["*"])
    path.write_text(key)
    path.chmod(0o600)
    return key


def load_questions(path: Path = QUESTIONS) -> list[dict[str, Any]]:
    """The sample questions (JSON lines: ``id``, ``corpus``, ``question``,
    ``expected_pages``, ...)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pick_early_question(
    questions: Sequence[dict[str, Any]],
    indexed: set[str],
    roots: dict[str, Path] = CORPUS_ROOTS,
) -> dict[str, Any] | None:
    """The first question (file order) with an expected page among ``indexed`` (absolute
    paths of the documents already in the index), or ``None``."""
    for question in questions:
        root = roots.get(str(question.get("corpus")))
        if root is None:
            continue
        if any(str(root / page) in indexed for page in question.get("expected_pages", [])):
            return question
    return None


class EarlyQuestion:
    """Decides when the demo asks its one question while the bulk job still runs: once, after
    ``early_after`` documents are indexed, before the job ends, and only a question whose
    expected page is already indexed (so the answer can come from the growing index).

    Args:
        questions: The sample questions.
        early_after: Documents done before asking; 0 never asks.
    """

    def __init__(self, questions: Sequence[dict[str, Any]], early_after: int) -> None:
        self.questions = list(questions)
        self.early_after = early_after
        self.asked: dict[str, Any] | None = None
        self._checked_at_done = -1

    def choose(self, state: JobProgress, indexed: Callable[[], set[str]]) -> dict[str, Any] | None:
        """The question to ask now (at most once), or ``None``. ``indexed()`` lists the
        indexed documents' paths; it is called only when the answer could change (past the
        threshold, more documents done than at the last call)."""
        if self.asked is not None or self.early_after <= 0 or state.finished:
            return None
        if state.done < self.early_after or state.done == self._checked_at_done:
            return None
        self._checked_at_done = state.done
        self.asked = pick_early_question(self.questions, indexed())
        return self.asked


def indexed_paths(sessions: sessionmaker[Session], job_id: str) -> set[str]:
    """Paths of the job's documents that are in the index (indexed now or unchanged)."""
    from sqlalchemy import select

    from ragstream.db.models import IngestJobItem

    stmt = select(IngestJobItem.path).where(
        IngestJobItem.job_id == job_id, IngestJobItem.status.in_(("indexed", "unchanged"))
    )
    with sessions() as session:
        return set(session.scalars(stmt))


def _ask(settings: Settings, key: str, question: str) -> QueryResult:
    from entry.client import HttpClient

    base = f"http://{settings.api.host}:{settings.api.port}"
    with HttpClient(base, key, timeout_s=330) as client:
        return client.query(question, timeout_s=180)


def _print_early(question: dict[str, Any], future: Future[QueryResult]) -> None:
    from entry.client import ApiRequestError
    from entry.query import print_result

    console.rule(f"[bold]early answer, index still growing: {question['question']}")
    try:
        print_result(future.result())
    except ApiRequestError as exc:
        console.print(f"[red]{exc}[/red]")
    console.rule()


def watch_job(
    settings: Settings,
    sessions: sessionmaker[Session],
    job_id: str,
    key: str,
    early_after: int,
) -> JobProgress:
    """Follow a bulk job to its end with plain progress lines (:mod:`ingest.progress`), ask
    the early question in a thread when :class:`EarlyQuestion` says so, print its answer as
    soon as it comes, and the job's summary at the end. Returns the final progress."""
    from ingest import jobs
    from ingest.cli import PENDING_CHECK_S, _require_worker, print_summary
    from ingest.progress import ProgressLines, Snapshot, format_line
    from ingest.tasks import reap_stale_jobs

    t0 = last_reap = last_ping = time.monotonic()
    state = jobs.progress(sessions, job_id)
    lines = ProgressLines()
    early = EarlyQuestion(load_questions(), early_after)
    pending: Future[QueryResult] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="early-question") as pool:
        while True:
            now = time.monotonic()
            snap = Snapshot.of(state, now - t0)
            if lines.due(snap, final=state.finished):
                console.print(format_line("ingest", snap), markup=False, highlight=False)
            if state.finished:
                break
            question = early.choose(state, lambda: indexed_paths(sessions, job_id))
            if question is not None:
                console.print(
                    f"{state.done} pages indexed: asking {question['id']} over what is "
                    "indexed so far (the index is live while it grows)",
                    markup=False,
                    highlight=False,
                )
                pending = pool.submit(_ask, settings, key, question["question"])
            if pending is not None and pending.done() and early.asked is not None:
                _print_early(early.asked, pending)
                pending = None
            if now - last_reap > settings.ingest.job_watchdog_interval_s:
                reap_stale_jobs(settings, sessions)  # no worker, no hang
                last_reap = now
            if state.status == "pending" and now - last_ping > PENDING_CHECK_S:
                _require_worker(settings, job_id)
                last_ping = now
            time.sleep(1.0)
            state = jobs.progress(sessions, job_id)
        if pending is not None and early.asked is not None:
            _print_early(early.asked, pending)  # waits for it: the ten questions follow
    print_summary(sessions, state, time.monotonic() - t0)
    return state


def ingest_manuals(
    settings: Settings, key: str, early_after: int = EARLY_AFTER_DOCS
) -> dict[str, Any]:
    """One Celery bulk job over both manuals, followed by :func:`watch_job` (progress lines,
    the early question after ``early_after`` documents), then the index merged. Returns the
    job's record (:func:`record_ingest`)."""
    from ingest import jobs
    from ingest.sources import discover
    from ingest.tasks import run_job
    from ragstream.db.engine import make_engine, make_session_factory

    missing = [str(m) for m in MANUALS if not m.is_dir()]
    if missing:
        console.print(f"[red]missing manuals[/red] {missing}: run `make docs`")
        raise typer.Exit(1)
    ingest = settings.ingest
    files = discover(list(MANUALS), ingest.allowed_roots, ingest.extensions, ingest.exclude_dirs)
    sessions = make_session_factory(make_engine(settings.database_url))
    job_id = jobs.create_job(sessions, TENANT, files)
    run_job.delay(job_id)
    console.print(
        f"ingest job [bold]{job_id}[/bold]: {len(files)} pages of the Python 3.11 and "
        "PostgreSQL 15 manuals (unchanged pages are skipped)"
    )
    t0 = time.monotonic()
    watch_job(settings, sessions, job_id, key, early_after)
    record = record_ingest(settings, sessions, job_id, time.monotonic() - t0)
    optimize_index(settings)
    return record


def record_ingest(
    settings: Settings, sessions: sessionmaker[Session], job_id: str, watched_s: float
) -> dict[str, Any]:
    """The finished job's record (:mod:`bench.demo_ingest`: pages, chunks, definition entries,
    failed, minutes, rates) with the machine's calibration measured now
    (:func:`bench.calibration.measure`), written under ``.local/demo/``; ``watched_s`` stands
    in for the job's time when its row lacks one."""
    from bench.calibration import measure
    from bench.demo_ingest import build_record, job_counts, job_seconds, write_record
    from ingest import jobs

    with console.status("measuring the machine's calibration (CPU loop, encoder)..."):
        calibration = measure(settings)
    seconds = job_seconds(sessions, job_id) or watched_s
    status = jobs.progress(sessions, job_id).status
    counts = job_counts(sessions, job_id)
    record = build_record(counts, seconds, job_id=job_id, status=status, calibration=calibration)
    written = write_record(record, _state_dir(settings))
    console.print(f"ingest record: {', '.join(str(p) for p in written)}")
    return record


def optimize_index(settings: Settings) -> None:
    """Merge the chunk index into one segment after the bulk load (``ragstream index
    optimize``): fewer segments and no deleted chunks make every search faster."""
    from ingest.factory import merge_index

    with console.status("merging the index into one segment..."):
        before, after = merge_index(settings)
    console.print(
        f"index merged: {before['segments']} -> {after['segments']} segment(s), "
        f"{before['deleted_docs']} -> {after['deleted_docs']} deleted chunks"
    )


#: The conversation the demo asks after the sample questions: an earlier question (a sample
#: question) and its follow-up, sent with the earlier turn (question and answer) as ``history``.
FOLLOW_UP = (
    "How do I create a new database from the command line?",
    "And how do I remove it again?",
)


def ask_questions(settings: Settings, key: str, limit: int = 10) -> None:
    """Ask ``limit`` sample questions, then the :data:`FOLLOW_UP` conversation's follow-up,
    through the API; print answers, citations, latency."""
    from entry.client import ApiRequestError, HttpClient
    from entry.query import print_result

    questions = load_questions()
    base = f"http://{settings.api.host}:{settings.api.port}"
    latencies: list[tuple[str, float, str]] = []
    with HttpClient(base, key, timeout_s=330) as client:
        for i, q in enumerate(questions[:limit], 1):
            console.rule(f"[bold]{i}. {q['question']}")
            try:
                result = client.query(q["question"], timeout_s=180)
            except ApiRequestError as exc:
                console.print(f"[red]{exc}[/red]")
                latencies.append((q["id"], float("nan"), exc.code))
                continue
            print_result(result)
            latencies.append((q["id"], result.latency_ms or float("nan"), result.status))
        earlier, follow_up = FOLLOW_UP
        console.rule(f"[bold]{limit + 1}. follow-up of {earlier!r}: {follow_up}")
        try:
            first = client.query(earlier, timeout_s=180)
            print_result(first)
            console.print(f"[bold]then: {follow_up}")
            turn = {"question": earlier, "answer": first.answer or ""}
            result = client.query(follow_up, timeout_s=180, history=[turn])
            print_result(result)
            latencies.append(("follow-up", result.latency_ms or float("nan"), result.status))
        except ApiRequestError as exc:
            console.print(f"[red]{exc}[/red]")
            latencies.append(("follow-up", float("nan"), exc.code))
    table = Table("question", "latency ms", "status", title="latencies through the API")
    for qid, ms, status in latencies:
        table.add_row(qid, f"{ms:.0f}", status)
    console.print(table)


def procfile_metrics_ports(procfile: Path = PROCFILE) -> dict[str, int]:
    """``{process: port}`` of the Procfile processes that set their own metrics port
    (``RAGSTREAM_POOLS__<POOL>__METRICS_PORT=<port>``, e.g. the second retrieval process)."""
    found = {}
    for line in procfile.read_text(encoding="utf-8").splitlines():
        name, _, command = line.partition(":")
        match = re.search(r"RAGSTREAM_POOLS__\w+__METRICS_PORT=(\d+)", command)
        if match and not name.lstrip().startswith("#"):
            found[name.strip()] = int(match.group(1))
    return found


def print_urls(settings: Settings) -> None:
    """Where to look, and how to stop."""
    api = f"http://{settings.api.host}:{settings.api.port}"
    pools = settings.pools
    ports = {
        "ingest": pools.ingest.metrics_port,
        "retrieval": pools.retrieval.metrics_port,
        "rerank": pools.rerank.metrics_port,
        "generation-small": pools.generation_small.metrics_port,
        "generation-large": pools.generation_large.metrics_port,
        "delivery": pools.delivery.metrics_port,
    }
    ports.update(procfile_metrics_ports())
    console.rule("[bold green]ragstream is running")
    console.print(f"Console (browser):   {api}/  (sign in with the API key below)")
    console.print(f"API docs (OpenAPI):  {api}/docs")
    console.print(f"API metrics:         {api}/metrics")
    console.print(f"Flower (Celery):     http://127.0.0.1:{settings.celery.flower_port}")
    for pool, port in ports.items():
        console.print(f"{pool + ' metrics:':<21}http://127.0.0.1:{port}/metrics")
    console.print(f"API key (tenant {TENANT}): {_state_dir(settings) / 'api_key'}")
    console.print('Ask:   ragstream query "How do I create a virtual environment?" --stream')
    console.print(f"Logs:  {_state_dir(settings) / 'processes.log'}")
    console.print("Stop:  make stop   (processes)   ·   make down   (services)")


@demo_app.command("run")
def run(
    questions: int = typer.Option(10, help="How many sample questions to ask."),
    skip_ingest: bool = typer.Option(False, help="Do not (re-)ingest the manuals."),
    early_after: int = typer.Option(
        EARLY_AFTER_DOCS, help="Documents indexed before one early question (0: none)."
    ),
) -> None:
    """Start everything, ingest the manuals, ask questions, leave it running."""
    from ragstream.db.engine import upgrade_head
    from ragstream.settings import get_settings
    from topics.admin import ensure_registry_topics, make_admin

    settings = get_settings()
    upgrade_head(settings.database_url)
    admin = make_admin(settings.kafka)
    ensure_registry_topics(admin, settings.kafka)
    admin.close()
    rerank_env, rerank_line = demo_reranker(settings)
    console.print(rerank_line)
    start_processes(settings, rerank_env)
    wait_ready(settings)
    key = demo_key(settings)
    record = None if skip_ingest else ingest_manuals(settings, key, early_after)
    ask_questions(settings, key, questions)
    print_urls(settings)
    console.print(rerank_line)
    if record is not None:
        from bench.demo_ingest import format_line

        console.print(format_line(record), markup=False, highlight=False)


@demo_app.command("stop")
def stop() -> None:
    """Stop the Procfile processes started by ``demo run`` (SIGTERM, then SIGKILL)."""
    from ragstream.settings import get_settings

    settings = get_settings()
    pid = _running_pid(settings)
    if pid is None:
        console.print("no demo processes are running")
        return
    children = _children(pid)
    os.kill(pid, signal.SIGTERM)  # the supervisor stops every process it started, then exits
    deadline = time.monotonic() + 60
    while _running_pid(settings) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)  # whatever did not stop in time
    for child in children:  # each leads its own process group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child, signal.SIGKILL)
    (_state_dir(settings) / PID_FILE).unlink(missing_ok=True)
    console.print("stopped")


@demo_app.command("status")
def status() -> None:
    """Each Procfile process: state, pid, restarts and last exit (from the supervisor)."""
    from entry.supervisor import read_state
    from ragstream.settings import get_settings

    settings = get_settings()
    pid = _running_pid(settings)
    data = read_state(_state_dir(settings))
    if pid is None or data is None:
        console.print("no demo processes are running")
        return
    table = Table(title=f"demo processes (supervisor pid {pid})")
    for column in ("process", "state", "pid", "restarts", "last exit", "exited at"):
        table.add_column(column)
    processes = data.get("processes")
    for name, proc in (processes if isinstance(processes, dict) else {}).items():
        exited = proc.get("last_exit_at")
        table.add_row(
            name,
            str(proc.get("state")),
            str(proc.get("pid") or "-"),
            str(proc.get("restarts", 0)),
            "-" if proc.get("last_exit_code") is None else str(proc["last_exit_code"]),
            time.strftime("%H:%M:%S", time.localtime(exited)) if exited else "-",
        )
    console.print(table)
