"""Shadow replay on the real services (issue 24, item 2): ``ragstream replay`` answers the
logged queries of a private stack again, beside that stack's live traffic, and

- the live queries all succeed and their latency stays near what it was without the replay;
- the replay never submits faster than its bound;
- nothing of the shadow run reaches the live system: no query-log row, no webhook delivery,
  no answer-cache entry, no record on a live topic, and its shadow topics are gone after it;
- the report says what the candidate changed (here every answer becomes a refusal);
- a missing alias, an unknown tier or model and an empty selection fail with a clear error
  before any process starts.

The live stack runs with its answer caches off, so live latency compares like with like (no
phase is served from the other's cache entries); the replay command runs with the caches on in
its environment, so only the replay's own override keeps its pools off the caches.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from kafka import KafkaConsumer, TopicPartition
from sqlalchemy import func, select

from ragstream.db.engine import make_engine, make_session_factory
from ragstream.db.models import QueryLog, WebhookDelivery
from tests.integration.stack import Stack, make_stack, wait_for
from topics.admin import make_admin
from topics.registry import QUERIES, TopicRegistry

DOCS = {
    "vacuum": "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. The autovacuum "
    "launcher starts workers every autovacuum_naptime, which defaults to one minute.",
    "ports": "# Connections\n\nThe server listens on TCP port 5432 by default. The port is set "
    "with the port configuration parameter.",
    "zebra": "# Zebras\n\nThe Grevy's zebra is the largest living wild equid.",
}
QUESTIONS = (
    "Which TCP port does the server listen on by default?",
    "How often does the autovacuum launcher start workers?",
    "What does VACUUM reclaim?",
    "What is the largest living wild equid?",
    "Which configuration parameter sets the port?",
    "What does autovacuum_naptime default to?",
)
LIVE_QUERIES = 24  # per phase, at LIVE_RATE a second
LIVE_RATE = 2.0
REPLAY_RATE = 2.0
RAGSTREAM = [sys.executable, "-m", "entry.cli"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(
        tmp_path_factory.mktemp("replay"),
        "replay",
        RAGSTREAM_CACHE__ENABLED="false",
        RAGSTREAM_CELERY__QUEUE=f"replay-test-{os.getpid()}",  # webhook tasks go nowhere
    )
    s.start_pools(("ingest", "retrieval", "rerank", "delivery"))
    try:
        s.wait_ready()
        s.api()
        tenant = s.name + "-acme"
        s.keys["acme"] = s.key(tenant)
        url = s.apis[0].url
        headers = {"Authorization": f"Bearer {s.keys['acme']}"}
        hook = httpx.post(
            f"{url}/v1/webhooks",
            json={"url": "http://127.0.0.1:9/hook", "event_types": ["*"]},
            headers=headers,
            timeout=30,
        )
        assert hook.status_code == 201, hook.text
        for doc_id, text in DOCS.items():
            r = httpx.post(
                f"{url}/v1/documents",
                json={"doc_id": doc_id, "text": text, "content_type": "text/markdown"},
                headers=headers,
                timeout=30,
            )
            assert r.status_code == 202, r.text
        for doc in DOCS:
            wait_for(
                lambda d=doc: (
                    httpx.get(f"{url}/v1/documents/{d}", headers=headers, timeout=30)
                    .json()
                    .get("status")
                    == "indexed"
                ),
                timeout_s=120,
                what=f"document {doc} indexed",
            )
        yield s
    finally:
        s.close()


def _live(stack: Stack, n: int, tag: str) -> list[tuple[bool, float]]:
    """``n`` live queries through the API at ``LIVE_RATE`` a second (open loop): each one's
    ``(answered, latency in s)``."""
    url = f"{stack.apis[0].url}/v1/query"
    headers = {"Authorization": f"Bearer {stack.keys['acme']}"}

    def ask(i: int) -> tuple[bool, float]:
        t0 = time.perf_counter()
        r = httpx.post(
            url, json={"query": QUESTIONS[i % len(QUESTIONS)]}, headers=headers, timeout=120
        )
        ok = r.status_code == 200 and r.json().get("status") == "answered"
        return ok, time.perf_counter() - t0

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"live-{tag}") as pool:
        futures = []
        for i in range(n):
            time.sleep(max(0.0, start + i / LIVE_RATE - time.perf_counter()))
            futures.append(pool.submit(ask, i))
        return [f.result() for f in futures]


def _replay(stack: Stack, out: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in stack.env.items() if k != "RAGSTREAM_CACHE__ENABLED"}
    return subprocess.Popen(
        [*RAGSTREAM, "replay", "--tenant", stack.name + "-acme", "--out", str(out), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _logged(stack: Stack) -> dict[str, int]:
    sessions = make_session_factory(make_engine(stack.settings.database_url))
    with sessions() as s:
        rows = dict(
            s.execute(select(QueryLog.status, func.count()).group_by(QueryLog.status)).all()
        )
        rows["deliveries"] = s.scalar(select(func.count()).select_from(WebhookDelivery)) or 0
    return rows


def _value(client: redis.Redis, key: Any) -> bytes:
    """A cache entry's bytes: a string's value, or a hash's fields and values."""
    if client.type(key) == b"hash":
        items: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
        return b"".join(k + v for k, v in items.items())
    return client.get(key) or b""  # type: ignore[return-value]


def _live_queries_produced(stack: Stack) -> int:
    topic = TopicRegistry(stack.settings.kafka.topic_prefix).name(QUERIES)
    consumer = KafkaConsumer(bootstrap_servers=stack.settings.kafka.bootstrap_servers)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return sum(consumer.end_offsets(parts).values())
    finally:
        consumer.close()


def test_failures_are_named_before_anything_starts(stack: Stack, tmp_path: Path) -> None:
    cases = [
        (["--alias", stack.name + "-missing"], f"index alias '{stack.name}-missing' does not"),
        (["--tier", "huge"], "unknown tier 'huge'"),
        (["--model", "gpt-9"], "unknown model 'gpt-9'"),
        (["--set", "retrieval.bm25_wieght=1"], "unknown setting 'retrieval.bm25_wieght'"),
        (["--since", "2000-01-01", "--until", "2000-01-02"], "no logged query of tenant"),
    ]
    for args, message in cases:
        proc = _replay(stack, tmp_path / "failed", *args)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, err)
        assert message in " ".join(err.split()), (args, err)
        assert "Traceback" not in err
    assert not (tmp_path / "failed" / "logs").exists()  # no pool process was started


@pytest.mark.timeout(900)
def test_replay_beside_live_traffic_harms_nothing_and_reports_the_change(
    stack: Stack, tmp_path: Path
) -> None:
    # Phase A: live traffic alone; it is also what the query log will hold to replay.
    before = _live(stack, LIVE_QUERIES, "a")
    assert all(ok for ok, _ in before), before
    wait_for(lambda: _logged(stack).get("answered", 0) >= LIVE_QUERIES, what="queries logged")
    logged_a = _logged(stack)
    assert logged_a.get("answered") == LIVE_QUERIES and logged_a["deliveries"] == LIVE_QUERIES

    # Phase B: the same live traffic while the replay runs (every answer refused: the
    # candidate's evidence gate is set above any score).
    out = tmp_path / "report"
    proc = _replay(
        stack, out, "--since", "1h", "--rate", str(REPLAY_RATE), "--max-in-flight", "2",
        "--set", "evidence.min_confidence=100",
    )  # fmt: skip
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    wait_for(
        lambda: any("replaying" in line for line in err_lines) or proc.poll() is not None,
        timeout_s=300,
        what="the replay's shadow pools warm",
    )
    assert proc.poll() is None, "".join(err_lines)
    during = _live(stack, LIVE_QUERIES, "b")
    stdout, _ = proc.communicate(timeout=300)
    reader.join(timeout=10)
    assert proc.returncode == 0, "".join(err_lines) + stdout

    # Live traffic unharmed: every query answered, latency near the phase without the replay.
    assert all(ok for ok, _ in during), during
    p50_a = statistics.median(t for _, t in before)
    p50_b = statistics.median(t for _, t in during)
    print(f"live p50 without the replay {p50_a * 1000:.0f} ms, beside it {p50_b * 1000:.0f} ms")
    assert p50_b <= 2 * p50_a + 0.25, (p50_a, p50_b)

    report = json.loads((out / "report.json").read_text())
    s = report["summary"]
    # The bound held: never more than ceil(rate) submissions in any second, none closer than
    # 1/rate apart.
    sent = sorted(q["sent_s"] for q in report["queries"])
    assert s["rate"]["max_in_any_1s"] <= math.ceil(REPLAY_RATE)
    assert min(b - a for a, b in itertools.pairwise(sent)) >= 1 / REPLAY_RATE - 0.005
    assert s["replayed"] == LIVE_QUERIES and s["unanswered"] == 0

    # What the candidate changed: every answer refused, their citations lost.
    refused_before = s["refusals"]["before"]
    assert s["refusals"]["after"] == LIVE_QUERIES
    assert s["refusals"]["gained"] == LIVE_QUERIES - refused_before > 0
    assert s["answers"]["changed"] == LIVE_QUERIES - refused_before
    assert s["citations"]["lost"] > 0 and s["citations"]["gained"] == 0
    assert s["latency_ms"]["before"]["n"] == LIVE_QUERIES and s["latency_ms"]["after"]["p50"]
    md = (out / "report.md").read_text()
    assert md.count("\n### ") == s["answers"]["changed"]

    # Nothing reached the live system.
    run_id = report["run"]["id"]
    wait_for(lambda: _logged(stack).get("answered", 0) >= 2 * LIVE_QUERIES, what="phase B logged")
    time.sleep(2)  # a leaked shadow answer would have been logged long before this
    logged_b = _logged(stack)
    assert logged_b.get("answered") == 2 * LIVE_QUERIES, logged_b  # the live ones only
    assert sum(v for k, v in logged_b.items() if k != "deliveries") == 2 * LIVE_QUERIES
    assert logged_b["deliveries"] == 2 * LIVE_QUERIES  # one webhook per live answer only
    assert _live_queries_produced(stack) == 2 * LIVE_QUERIES
    tenant = stack.name + "-acme"
    client = redis.Redis.from_url(stack.settings.redis.url)
    try:
        cached = [
            k
            for pattern in (f"ragstream:answer:{tenant}:*", f"ragstream:semcache:{tenant}:*")
            for k in client.scan_iter(pattern, count=1000)
            if run_id.encode() in _value(client, k)
        ]
        pending = list(client.scan_iter(f"ragstream:semcache-pending:{run_id}*"))
    finally:
        client.close()
    assert cached == [] and pending == []
    admin = make_admin(stack.settings.kafka)
    try:
        assert [t for t in admin.list_topics() if run_id in t] == []
    finally:
        admin.close()
