"""The chaos suite (issue 15): a steady bounded load of queries through the HTTP API while the
pools are killed in turn, the broker is restarted, Elasticsearch is frozen, the webhook receiver
goes away and poison events land on ``rag.queries``; every request id is followed to its end.

Everything the faults touch is private to the run, so the shared services of ``make up`` (that
other tests use at the same time) are never stopped or frozen:

- a Kafka broker and an Elasticsearch node of their own on free ports, with data under
  ``<tmp>/services`` and the checkout's installed binaries (``infra.install_dir``), started and
  stopped with :mod:`infra` like the shared ones;
- the pool processes (``ragstream worker POOL``) and a Celery webhook worker under
  :class:`entry.supervisor.Supervisor`, which restarts each one after ``kill -9`` with back-off;
- topics ``<name>.*``, index alias ``<name>``, a SQLite store and a Celery queue of the run,
  and an API server in this process (:mod:`tests.integration.stack`).

Redis (caches, the Celery broker) is the shared one, under keys and a queue of the run.

A request is *accepted* when ``POST /v1/query`` (async) answers 202 with its id, then followed
with ``GET /v1/queries/{id}`` until it is *answered* or *failed* with a typed error code; one
still pending when the drain time is over *never finished*. A refusal at submission (a 503 or
429 with ``Retry-After`` while the broker is down or the pools lag) is counted apart; it is not
accepted. One query in ``callback_every`` registers a ``callback_url``: its signed deliveries
are counted per request id at a receiver behind a switchable proxy; a request id delivered more
than once is a *duplicate*. Pass: 0 never finished and 0 duplicate deliveries.
"""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import os
import random
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kafka import KafkaConsumer, KafkaProducer
from rich.console import Console
from rich.table import Table

from entry.supervisor import Supervisor
from infra.manager import services as infra_services
from infra.manager import up as infra_up
from infra.service import Service
from ragstream.retry import RetryPolicy
from ragstream.settings import Settings
from tests.integration.hookkit import Receiver
from tests.integration.stack import RAGSTREAM, Stack, get_json, make_stack, wait_for
from tests.integration.tcpproxy import Proxy
from topics.registry import QUERIES, TopicRegistry

#: A few pages of the PostgreSQL manual (``make docs``) make the corpus of the run.
MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")
PAGES = ("sql-vacuum.html", "runtime-config-connection.html", "wal-configuration.html")
QUESTIONS = (
    "Which TCP port does the server listen on by default?",
    "What does VACUUM FULL do?",
    "Which parameter sets the maximum number of concurrent connections?",
    "What does VACUUM VERBOSE print?",
    "What does checkpoint_timeout control?",
    "How does VACUUM ANALYZE differ from VACUUM?",
    "What is the default value of max_wal_size?",
    "What does wal_writer_delay do?",
    "What does listen_addresses specify?",
    "When is a checkpoint started?",
)
#: Values of ``rag.queries`` events that are not events: undecodable, valid JSON of the wrong
#: shape, and a query event without its required fields.
POISON = (b"\xff\xfe not json", b'["a", "list"]', b'{"tenant": "x", "query": 7}')
POOLS_CI = ("ingest", "retrieval", "rerank", "delivery")
POOLS_FULL = (*POOLS_CI, "generation-small", "generation-large")
WEBHOOKS = "webhooks"
#: After the last request finished, how long deliveries still due are waited for: several
#: sweeps (5 s) and back-off steps (at most 10 s) of the run's settings.
WEBHOOK_GRACE_S = 45.0


@dataclass(frozen=True)
class Size:
    """How hard and how long a run is.

    ``rate_qps``: queries submitted a second, at most ``max_in_flight`` unfinished at once;
    ``kill``: the processes killed in turn (each restarted by the supervisor and back in its
    consumer group before the next); ``pause_s`` between faults; ``es_freeze_s`` (SIGSTOP ..
    SIGCONT of the node); ``receiver_away_s`` (the webhook receiver refuses connections, from
    the first pool kill on); ``deadline_s``: the queries' deadline; ``drain_s``: how long, after
    the load stops, unfinished requests are still followed.
    """

    name: str
    rate_qps: float
    max_in_flight: int
    pools: tuple[str, ...]
    kill: tuple[str, ...]
    pause_s: float
    es_freeze_s: float
    receiver_away_s: float
    deadline_s: float
    drain_s: float
    callback_every: int = 3
    poison_every: int = 100


SIZES = {
    # make test: the processes of the evidence tier's path (the default; no LLM).
    "ci": Size(
        "ci",
        rate_qps=3,
        max_in_flight=24,
        pools=POOLS_CI,
        kill=("retrieval", "rerank", "delivery", WEBHOOKS),
        pause_s=3,
        es_freeze_s=10,
        receiver_away_s=20,
        deadline_s=60,
        drain_s=120,
    ),
    # make chaos: every pool, the durations.
    "full": Size(
        "full",
        rate_qps=4,
        max_in_flight=48,
        pools=POOLS_FULL,
        kill=(*POOLS_FULL, WEBHOOKS),
        pause_s=10,
        es_freeze_s=30,
        receiver_away_s=60,
        deadline_s=120,
        drain_s=240,
    ),
}


def service_port(taken: set[int]) -> int:
    """A free TCP port below the kernel's ephemeral range, not in ``taken`` (added to it).

    Not an ephemeral port (``stack.free_port``): while the broker is down, its clients' reconnects
    to an ephemeral port can get that very port as their own source port (TCP self-connect) and
    hold it, so the broker could not bind it again.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(1000):
        port = random.randrange(max(1024, low - 12_000), low)
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


def private_settings(settings: Settings, local_dir: Path) -> Settings:
    """``settings`` with a Kafka broker and an Elasticsearch node of their own: free ports, data
    under ``local_dir``, the binaries the checkout installed, small heaps; the clients' URLs
    point at them."""
    local_dir.mkdir(parents=True, exist_ok=True)
    taken: set[int] = set()
    infra = settings.infra.model_copy(
        update={
            "local_dir": local_dir,
            "install_dir": settings.infra.install_dir or settings.infra.local_dir,
            "kafka_port": service_port(taken),
            "kafka_controller_port": service_port(taken),
            "kafka_heap_mb": 256,
            "elasticsearch_port": service_port(taken),
            "elasticsearch_transport_port": service_port(taken),
            "elasticsearch_heap_mb": 512,
        }
    )
    kafka = settings.kafka.model_copy(
        update={"bootstrap_servers": f"{infra.host}:{infra.kafka_port}"}
    )
    es = settings.elasticsearch.model_copy(
        update={"url": f"http://{infra.host}:{infra.elasticsearch_port}"}
    )
    return settings.model_copy(update={"infra": infra, "kafka": kafka, "elasticsearch": es})


@dataclass
class Private:
    """The run's broker and node (:mod:`infra` services under a private ``local_dir``)."""

    settings: Settings
    kafka: Service
    es: Service

    @classmethod
    @contextlib.contextmanager
    def started(cls, settings: Settings, local_dir: Path) -> Iterator[Private]:
        """Start both (in parallel, waiting until healthy); stop both on exit."""
        mine = private_settings(settings, local_dir)
        kafka, es = infra_services(mine, only=("kafka", "elasticsearch"))
        try:
            infra_up(mine, only=("kafka", "elasticsearch"))
            yield cls(mine, kafka, es)
        finally:
            for service in (kafka, es):
                pid = service.running_pid()
                if pid is not None:  # a frozen node ignores SIGTERM
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
                service.stop()

    def restart_kafka(self) -> float:
        """``kill -9`` the broker, start it again; return the seconds it was away."""
        pid = self.kafka.running_pid()
        assert pid is not None, "the private broker is not running"
        started = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: self.kafka.running_pid() is None, 30, what="broker gone")
        # A killed JVM with a large heap holds its listening sockets until its exit has
        # finished unmapping memory, after its PID looks gone: wait for the ports themselves.
        host = self.kafka.infra.host
        wait_for(lambda: all(_bindable(host, p) for p in self.kafka.ports), 30, what="ports free")
        self.kafka.ensure_up()
        return time.monotonic() - started

    def freeze_es(self, seconds: float) -> None:
        """SIGSTOP the node for ``seconds``, then SIGCONT."""
        pid = self.es.running_pid()
        assert pid is not None, "the private Elasticsearch is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)


def _bindable(host: str, port: int) -> bool:
    """Whether ``host:port`` can be listened on now (nobody holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class Request:
    """One accepted request: when, with a callback or not, and how it ended."""

    request_id: str
    accepted_at: float
    callback: bool
    status: str = "pending"
    code: str = ""
    cached: bool = False
    finished_at: float | None = None


@dataclass
class Counts:
    """What a run counted; :meth:`table` prints it, :attr:`passed` is the pass condition."""

    size: str
    seconds: float = 0.0
    submitted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    #: When each refusal (and each untyped submit error) happened, monotonic seconds.
    refused_at: list[float] = field(default_factory=list)
    submit_errors: dict[str, int] = field(default_factory=dict)
    requests: dict[str, Request] = field(default_factory=dict)
    deliveries: collections.Counter[str] = field(default_factory=collections.Counter)
    webhook_ids: dict[str, set[str]] = field(default_factory=dict)
    poison_sent: int = 0
    poison_dead_lettered: int = 0
    faults: list[tuple[str, float]] = field(default_factory=list)
    restarts: dict[str, int] = field(default_factory=dict)

    def by_status(self, status: str) -> list[Request]:
        return [r for r in self.requests.values() if r.status == status]

    @property
    def never_finished(self) -> int:
        return len(self.by_status("pending"))

    @property
    def duplicates(self) -> int:
        """Request ids whose answer reached the receiver more than once."""
        return sum(1 for n in self.deliveries.values() if n > 1)

    @property
    def callbacks_finished(self) -> list[Request]:
        return [r for r in self.requests.values() if r.callback and r.status != "pending"]

    @property
    def undelivered(self) -> int:
        """Finished requests with a callback that the receiver never got."""
        return sum(1 for r in self.callbacks_finished if self.deliveries[r.request_id] == 0)

    @property
    def passed(self) -> bool:
        return self.never_finished == 0 and self.duplicates == 0

    def table(self) -> str:
        """The counts as a text table (rich)."""
        failed = collections.Counter(r.code for r in self.by_status("failed"))
        latencies = sorted(
            (r.finished_at or 0) - r.accepted_at for r in self.requests.values() if r.finished_at
        )
        p50 = latencies[len(latencies) // 2] if latencies else 0.0
        p99 = latencies[int(len(latencies) * 0.99)] if latencies else 0.0
        table = Table(title=f"chaos run ({self.size}, {self.seconds:.0f} s)", show_lines=False)
        table.add_column("count")
        table.add_column("n", justify="right")
        rows: list[tuple[str, object]] = [
            ("submitted", self.submitted),
            ("refused at submit (typed 503/429)", _fmt(self.refused)),
            ("submit errors (untyped)", _fmt(self.submit_errors)),
            ("accepted (202, request id)", len(self.requests)),
            ("answered", len(self.by_status("answered"))),
            ("  of them from an answer cache", sum(r.cached for r in self.requests.values())),
            ("failed with a typed error", _fmt(failed)),
            ("never finished", self.never_finished),
            ("latency accepted->finished p50 / p99 s", f"{p50:.1f} / {p99:.1f}"),
            ("with callback_url, finished", len(self.callbacks_finished)),
            ("webhook deliveries", sum(self.deliveries.values())),
            ("duplicate deliveries (request ids)", self.duplicates),
            ("callbacks never delivered", self.undelivered),
            (
                "poison events sent / dead-lettered",
                f"{self.poison_sent} / {self.poison_dead_lettered}",
            ),
        ]
        for name, value in rows:
            table.add_row(name, str(value))
        faults = Table(title="faults, s after the load began")
        faults.add_column("fault")
        faults.add_column("at s", justify="right")
        for name, at in self.faults:
            faults.add_row(name, f"{at:.0f}")
        out = io.StringIO()
        console = Console(file=out, width=88, force_terminal=False, color_system=None)
        console.print(table)
        console.print(faults)
        restarts = ", ".join(f"{k} {v}" for k, v in sorted(self.restarts.items()))
        console.print(f"restarts by the supervisor: {restarts}")
        verdict = "PASS" if self.passed else "FAIL"
        console.print(
            f"{verdict}: never finished {self.never_finished}, duplicates {self.duplicates}"
        )
        return out.getvalue()


def _fmt(counter: dict[str, int]) -> str:
    total = sum(counter.values())
    if not counter:
        return "0"
    return f"{total} (" + ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) + ")"


class Load:
    """Submits queries at ``rate_qps`` (at most ``max_in_flight`` unfinished) and follows each
    accepted one; one in ``callback_every`` carries ``callback_url``; one event in
    ``poison_every`` on ``rag.queries`` is poison, produced straight to the topic."""

    def __init__(
        self,
        url: str,
        key: str,
        size: Size,
        counts: Counts,
        callback_url: str,
        poison: Callable[[bytes], None],
    ) -> None:
        self.url, self.key, self.size, self.counts = url, key, size, counts
        self.callback_url = callback_url
        self.poison = poison
        self.stop_submitting = threading.Event()
        self.stop_following = threading.Event()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._submit_loop, name="chaos-submit", daemon=True),
            threading.Thread(target=self._follow_loop, name="chaos-follow", daemon=True),
        ]
        self.client = httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def pending(self) -> list[Request]:
        with self.lock:
            return [r for r in self.counts.requests.values() if r.status == "pending"]

    def _submit_loop(self) -> None:
        interval = 1.0 / self.size.rate_qps
        n = itertools.count()
        next_at = time.monotonic()
        while not self.stop_submitting.is_set():
            next_at += interval
            self.stop_submitting.wait(max(0.0, next_at - time.monotonic()))
            if len(self.pending()) >= self.size.max_in_flight:
                continue
            i = next(n)
            if i % self.size.poison_every == self.size.poison_every - 1:
                self.poison(POISON[(i // self.size.poison_every) % len(POISON)])
                with self.lock:
                    self.counts.poison_sent += 1
                continue
            self._submit(i)

    def _submit(self, i: int) -> None:
        callback = i % self.size.callback_every == 0
        body: dict[str, Any] = {
            "query": f"{QUESTIONS[i % len(QUESTIONS)]} (chaos {i})",  # no exact-cache hits
            "mode": "async",
        }
        if callback:
            body["callback_url"] = self.callback_url
        with self.lock:
            self.counts.submitted += 1
        try:
            r = self.client.post(f"{self.url}/v1/query", json=body)
        except httpx.HTTPError as exc:
            with self.lock:
                name = type(exc).__name__
                self.counts.submit_errors[name] = self.counts.submit_errors.get(name, 0) + 1
                self.counts.refused_at.append(time.monotonic())
            return
        data = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        now = time.monotonic()
        with self.lock:
            if r.status_code in (200, 202) and "request_id" in data:
                req = Request(data["request_id"], now, callback)
                if data.get("status") in ("answered", "failed"):
                    req.status, req.finished_at = data["status"], now
                self.counts.requests[req.request_id] = req
            elif r.status_code in (429, 503) and "retry-after" in r.headers:
                code = f"{r.status_code} {data.get('error', {}).get('code', '?')}"
                self.counts.refused[code] = self.counts.refused.get(code, 0) + 1
                self.counts.refused_at.append(now)
            else:
                code = f"HTTP {r.status_code}"
                self.counts.submit_errors[code] = self.counts.submit_errors.get(code, 0) + 1
                self.counts.refused_at.append(now)

    def _follow_loop(self) -> None:
        while not self.stop_following.wait(0.5):
            for req in self.pending():
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    r = self.client.get(f"{self.url}/v1/queries/{req.request_id}")
                    if r.status_code != 200:
                        continue  # 404 until the delivery pool logs it
                    data = r.json()
                    if data["status"] in ("answered", "failed"):
                        with self.lock:
                            req.status = data["status"]
                            req.code = (data.get("error") or {}).get("code", "")
                            req.cached = bool(data.get("cached"))
                            req.finished_at = time.monotonic()

    def close(self) -> None:
        self.stop_submitting.set()
        self.stop_following.set()
        for t in self.threads:
            t.join(timeout=30)
        self.client.close()


class Processes:
    """The pools and the webhook worker under :class:`Supervisor`, output to one log file."""

    def __init__(self, stack: Stack, pools: tuple[str, ...], queue: str) -> None:
        assert stack.log_dir is not None
        self.log_path = stack.log_dir / "supervisor.log"
        self.out = self.log_path.open("w", encoding="utf-8")
        commands = {pool: f"exec {RAGSTREAM} worker {pool}" for pool in pools}
        commands[WEBHOOKS] = (
            f"exec {sys.executable} -m entry.cli celery-worker --queues webhooks -n {queue}@%h"
        )
        self.supervisor = Supervisor(
            commands,
            cwd=Path.cwd(),
            state_dir=stack.log_dir,
            env=stack.env,
            backoff=RetryPolicy(max_attempts=2**31, base_ms=500, cap_ms=10_000, jitter=False),
            stop_timeout_s=30,
            out=self.out,
        )
        self.thread = threading.Thread(target=self.supervisor.run, daemon=True)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ready(self, name: str, after: int = 0) -> bool:
        """Whether process ``name`` logged that it is serving after byte ``after`` of the log:
        a pool got its partitions, the Celery worker is ready."""
        mark = "ready" if name == WEBHOOKS else "assigned"
        text = self.text()[after:]
        return any(mark in line for line in text.splitlines() if line[9:].startswith(f"{name} |"))

    def start(self, timeout_s: float = 300) -> None:
        self.thread.start()
        for name in self.supervisor.states:
            wait_for(lambda n=name: self.ready(n), timeout_s, 0.5, f"{name} ready")

    def kill(self, name: str, timeout_s: float = 180) -> None:
        """``kill -9`` process ``name``; wait until the supervisor restarted it and it serves."""
        state = self.supervisor.states[name]
        pid, restarts = state.pid, state.restarts
        assert pid is not None, f"{name} is not running"
        offset = len(self.text())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: state.restarts > restarts, 60, 0.2, f"{name} restarted")
        wait_for(lambda: self.ready(name, offset), timeout_s, 0.5, f"{name} serving again")

    def stop(self) -> None:
        self.supervisor.stop()
        self.thread.join(timeout=90)
        self.out.close()


def html_corpus() -> dict[str, str]:
    """``{doc_id: html}`` of :data:`PAGES`."""
    return {re.sub(r"\.html$", "", p): (MANUAL / p).read_text(errors="replace") for p in PAGES}


def dead_lettered(settings: Settings, topic: str) -> int:
    """Records on ``topic`` (read from the beginning until 3 s without one)."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        auto_offset_reset="earliest",
        group_id=None,
        consumer_timeout_ms=3000,
    )
    try:
        return sum(1 for _ in consumer)
    finally:
        consumer.close()


def run(size: Size, tmp: Path, log: Callable[[str], None] = print) -> Counts:
    """One chaos run of ``size`` under ``tmp``; return the counts (the caller asserts)."""
    counts = Counts(size.name)
    queue = f"chaos-{os.getpid()}-{int(time.time())}"
    settings = Settings()
    # Under the checkout's .local (git-ignored), not tmp: Elasticsearch runs as the service
    # user, who cannot enter pytest's private temporary folders.
    services_dir = settings.infra.local_dir / "chaos" / queue
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, services_dir, ignore_errors=True)
        private = cleanup.enter_context(Private.started(settings, services_dir))
        _run(size, tmp, log, counts, queue, private)
    return counts


@dataclass
class Rig:
    """A run's stack on its broker(s) and node(s): the processes under the supervisor, the
    webhook receiver behind its proxy, the API with a key and a callback secret, the corpus
    indexed, and a producer for poison events."""

    stack: Stack
    procs: Processes
    receiver: Receiver
    proxy: Proxy
    poison: KafkaProducer
    api_url: str
    key: str
    topic: str

    def send_poison(self, value: bytes) -> None:
        self.poison.send(self.topic, value=value)

    def load(self, size: Size, counts: Counts) -> Load:
        return Load(
            self.api_url, self.key, size, counts, f"{self.proxy.url}/hook", self.send_poison
        )


#: The stack settings of every run (see docs/operations.md, Chaos).
RUN_ENV = {
    # A killed consumer's partitions go to its restarted successor after this long.
    "RAGSTREAM_KAFKA__SESSION_TIMEOUT_MS": "10000",
    # Every question through the whole path: no semantic cache hit (a cosine similarity
    # never exceeds 1; the numbered variants of ten questions are paraphrases to it).
    "RAGSTREAM_CACHE__SEMANTIC_THRESHOLD": "1.01",
    # The follower polls every pending request twice a second with the same key: the
    # per-key rate limit (600/min) would refuse the load, which is not what is tried here.
    "RAGSTREAM_API__RATE_PER_MINUTE": "0",
    # Enough attempts to outlast the receiver's absence.
    "RAGSTREAM_WEBHOOKS__BACKOFF_BASE_S": "1",
    "RAGSTREAM_WEBHOOKS__BACKOFF_CAP_S": "10",
    "RAGSTREAM_WEBHOOKS__MAX_ATTEMPTS": "20",
    "RAGSTREAM_WEBHOOKS__TIMEOUT_S": "5",
    "RAGSTREAM_WEBHOOKS__SWEEP_INTERVAL_S": "5",
    "RAGSTREAM_WEBHOOKS__SWEEP_AFTER_S": "20",
}


@contextlib.contextmanager
def rig(
    size: Size,
    tmp: Path,
    log: Callable[[str], None],
    queue: str,
    services: Settings,
    **env: str,
) -> Iterator[Rig]:
    """Start the run's stack on the brokers and Elasticsearch of ``services`` (their client
    settings), with :data:`RUN_ENV` and ``env`` on top; ingest the corpus; stop it all on exit."""
    stack = make_stack(
        tmp,
        "chaos",
        RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS=services.kafka.bootstrap_servers,
        RAGSTREAM_ELASTICSEARCH__URL=services.elasticsearch.url,
        RAGSTREAM_CELERY__QUEUE=queue,
        RAGSTREAM_API__QUERY_DEADLINE_S=str(size.deadline_s),
        **{**RUN_ENV, **env},
    )
    procs = Processes(stack, size.pools, queue)
    receiver = Receiver()
    proxy = Proxy(("127.0.0.1", receiver.server.server_address[1]))
    poison = KafkaProducer(bootstrap_servers=services.kafka.bootstrap_servers)
    topic = stack.settings.kafka.topic_prefix + QUERIES.name
    try:
        started = time.monotonic()
        procs.start()
        api = stack.api()
        key = stack.key(stack.name + "-acme")
        log(f"processes ready in {time.monotonic() - started:.0f} s")
        headers = {"Authorization": f"Bearer {key}"}
        secret = httpx.post(f"{api.url}/v1/webhooks/callback-secret", headers=headers)
        assert secret.status_code == 201, secret.text
        receiver.keys = [secret.json()["secret"]]
        corpus = html_corpus()
        for doc_id, html in corpus.items():
            r = httpx.post(
                f"{api.url}/v1/documents",
                json={"doc_id": doc_id, "text": html, "content_type": "text/html"},
                headers=headers,
                timeout=30,
            )
            assert r.status_code == 202, r.text
        for doc_id in corpus:
            wait_for(
                lambda d=doc_id: (
                    get_json(f"{api.url}/v1/documents/{d}", key)[1].get("status") == "indexed"
                ),
                180,
                0.5,
                f"{doc_id} indexed",
            )
        log(f"corpus indexed at {time.monotonic() - started:.0f} s")
        yield Rig(stack, procs, receiver, proxy, poison, api.url, key, topic)
    finally:
        poison.close()
        procs.stop()
        proxy.close()
        receiver.close()
        stack.close()


def drain(size: Size, load: Load, counts: Counts, receiver: Receiver) -> None:
    """Stop submitting; follow the unfinished requests for ``drain_s`` at most, wait a little
    for webhook deliveries still due, then stop following and tally the deliveries."""
    load.stop_submitting.set()
    end = time.monotonic() + size.drain_s
    while time.monotonic() < end and load.pending():
        time.sleep(1)
    # Deliveries still due get a few sweeps and back-off steps more, not the whole drain.
    end = min(end, time.monotonic() + WEBHOOK_GRACE_S)
    while time.monotonic() < end and _webhooks_due(counts, receiver):
        time.sleep(1)
    time.sleep(3)  # a late duplicate would land here
    load.close()
    _tally(counts, receiver)


def _run(
    size: Size, tmp: Path, log: Callable[[str], None], counts: Counts, queue: str, private: Private
) -> None:
    log(
        f"private broker {private.settings.kafka.bootstrap_servers}, "
        f"node {private.settings.elasticsearch.url}"
    )
    with rig(size, tmp, log, queue, private.settings) as r:
        load = r.load(size, counts)
        try:
            t0 = time.monotonic()

            def fault(name: str) -> None:
                counts.faults.append((name, time.monotonic() - t0))
                log(f"{time.monotonic() - t0:6.1f} s  {name}")

            load.start()
            time.sleep(size.pause_s)
            away = threading.Thread(
                target=_away, args=(r.proxy, size.receiver_away_s, fault), daemon=True
            )
            away.start()
            for name in size.kill:
                fault(f"kill -9 {name}")
                r.procs.kill(name)
                fault(f"{name} serving again")
                time.sleep(size.pause_s)
            away.join()
            fault("kill -9 broker")
            gone_s = private.restart_kafka()
            fault(f"broker back ({gone_s:.0f} s)")
            time.sleep(size.pause_s)
            fault(f"SIGSTOP elasticsearch for {size.es_freeze_s:.0f} s")
            private.freeze_es(size.es_freeze_s)
            fault("SIGCONT elasticsearch")
            time.sleep(size.pause_s)
            fault("load stopped, draining")
            drain(size, load, counts, r.receiver)
            fault("drained")
            counts.seconds = time.monotonic() - t0
            r.poison.flush()
            counts.poison_dead_lettered = dead_lettered(
                private.settings, TopicRegistry(r.stack.settings.kafka.topic_prefix).dlq(QUERIES)
            )
            counts.restarts = {n: s.restarts for n, s in r.procs.supervisor.states.items()}
        finally:
            load.close()


def _away(proxy: Proxy, seconds: float, fault: Callable[[str], None]) -> None:
    fault(f"webhook receiver away for {seconds:.0f} s")
    proxy.down()
    time.sleep(seconds)
    proxy.up()
    fault("webhook receiver back")


def _tally(counts: Counts, receiver: Receiver) -> None:
    with receiver.lock:
        received = list(receiver.received)
    counts.deliveries = collections.Counter(r.payload["data"]["request_id"] for r in received)
    counts.webhook_ids = {}
    for r in received:
        counts.webhook_ids.setdefault(r.payload["data"]["request_id"], set()).add(r.webhook_id)


def _webhooks_due(counts: Counts, receiver: Receiver) -> bool:
    _tally(counts, receiver)
    return counts.undelivered > 0
