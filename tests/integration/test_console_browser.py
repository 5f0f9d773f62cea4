"""The console in a real browser (Debian's Chromium and chromedriver, as
``test_api_docs_browser.py`` drives them) against a private stack: every pool as a process, the
API in this process, a cluster-operator key (and tenant operator keys for the scoping tests).

One walk through the three pages: sign in; ask a question (evidence tier) and see the streamed
answer, open a citation ``[n]`` and find the evidence span highlighted in its passage at its
offsets, with a link to the source document; on the knowledge-base page upload a small file and
watch its document reach ``indexed``, and a small zip archive and watch its bulk job (a Celery
worker on the test's own queue) reach ``succeeded``; open the operations page and find every
Procfile pool with its lag. Any error in the browser console fails the test. The screenshots of
the three pages are the docs' (``docs/img/console-*.png``, embedded by ``docs/console.md``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.ops import WORKER_COMMAND
from entry.supervisor import parse_procfile
from index.schema import chunk_id
from ragstream.celery_app import configure_celery
from ragstream.settings import PROJECT_ROOT, get_settings
from tests.integration.stack import (
    RAGSTREAM,
    Stack,
    free_port,
    get_json,
    index_document,
    make_stack,
    wait_for,
)
from tests.integration.test_api_docs_browser import CHROMEDRIVER, CHROMIUM, FLAGS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="Debian's chromium and chromium-driver are not installed (make browser)",
    ),
]
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a dev dependency")
By = pytest.importorskip("selenium.webdriver.common.by").By
WebDriverWait = pytest.importorskip("selenium.webdriver.support.ui").WebDriverWait
_errors = pytest.importorskip("selenium.common.exceptions")
Stale, NoSuchElement = _errors.StaleElementReferenceException, _errors.NoSuchElementException

IMAGES = PROJECT_ROOT / "docs" / "img"
WAIT_S = 60
DOCS = {
    "ports": "# Connections\n\nThe server listens on TCP port 5432 by default. The port is set "
    "with the port configuration parameter.",
    "vacuum": "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. The autovacuum "
    "launcher starts workers every autovacuum_naptime, which defaults to one minute.",
}
UPLOAD = "okapi-console.md"
UPLOAD_TEXT = "# Okapi\n\nThe okapi is the only living relative of the giraffe.\n"
ARCHIVE = "console-archive.zip"
ARCHIVE_FILES = {
    "quokka.md": "# Quokka\n\nThe quokka is a small macropod of Rottnest Island.\n",
    "tuatara.md": "# Tuatara\n\nThe tuatara is the last living rhynchocephalian.\n",
}


def procfile_pools() -> set[str]:
    """The pools the Procfile runs (``ragstream worker <pool>`` lines)."""
    commands = parse_procfile((PROJECT_ROOT / "Procfile").read_text())
    return {m.group(1) for c in commands.values() if (m := WORKER_COMMAND.search(c))}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Each pool serves its metrics on a port of its own, so the operations page scrapes them.
    ports = {
        f"RAGSTREAM_POOLS__{pool.upper().replace('-', '_')}__METRICS_PORT": str(free_port())
        for pool in procfile_pools()
    }
    tmp = tmp_path_factory.mktemp("console")
    queue = f"console-jobs-{os.getpid()}-{int(time.time())}"
    s = make_stack(
        tmp, "console", **ports,
        # Bulk jobs go to this test's own Celery queue and worker; uploads land under tmp.
        RAGSTREAM_CELERY__QUEUE=queue,
        RAGSTREAM_INGEST__ALLOWED_ROOTS=json.dumps([str(tmp / "roots")]),
        RAGSTREAM_INGEST__UPLOAD_ROOT=str(tmp / "roots"),
    )  # fmt: skip
    configure_celery(s.settings)  # the in-process API submits to the test's queue
    assert s.log_dir is not None
    worker_log = (s.log_dir / "celery.log").open("wb")
    worker = subprocess.Popen(
        [RAGSTREAM, "celery-worker", "--queues", "jobs", "-n", f"{queue}@%h", "--concurrency", "1"],
        env=s.env, stdout=worker_log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    s.start_pools()
    try:
        s.wait_ready()
        wait_for(
            lambda: "ready" in (s.log_dir / "celery.log").read_text(errors="replace"),  # type: ignore[operator]
            timeout_s=120,
            what="the Celery worker ready",
        )
        s.api()
        s.keys["op"] = s.key(s.name + "-console", role="cluster-operator", rate_per_minute=0)
        url = s.apis[0].url
        for doc_id, text in DOCS.items():
            index_document(url, s.keys["op"], doc_id, text)
        yield s
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        worker_log.close()
        configure_celery(get_settings())
        s.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="ragstream-console-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    )
    driver.set_window_size(1280, 1000)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def no_console_errors(driver: Any, page: str) -> None:
    """Fail on any error the page logged in the browser console since the last call."""
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, f"{page}: browser console errors: {errors}"


def wait(driver: Any, fn: Any, what: str, timeout_s: float = WAIT_S) -> Any:
    """``fn(driver)`` once truthy; an element replaced by the page's refresh while ``fn`` reads
    it (stale) or not there yet counts as not yet."""
    return WebDriverWait(
        driver, timeout_s, poll_frequency=0.2, ignored_exceptions=(Stale, NoSuchElement)
    ).until(fn, message=what)


def test_console_ask_upload_and_operations(stack: Stack, browser: Any, tmp_path: Path) -> None:
    driver = browser
    url = stack.apis[0].url
    driver.get(f"{url}/")
    no_console_errors(driver, "sign-in")

    # Sign in: the key is checked against GET /v1/me, the pages appear.
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "key").send_keys(stack.keys["op"])
    driver.find_element(By.ID, "signin").click()
    wait(driver, lambda d: d.find_element(By.ID, "question").is_displayed(), "the Ask page")
    assert "operator key" in driver.find_element(By.ID, "who").text

    # Ask (evidence tier): the answer streams in with its evidence, tier and latency.
    driver.find_element(By.CSS_SELECTOR, "#route option[value='evidence']").click()
    driver.find_element(By.ID, "question").send_keys(
        "Which TCP port does the server listen on by default?"
    )
    driver.find_element(By.ID, "ask").click()
    answer = wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#conversation .turn .answer:not(.streaming)"),
        "the answer",
    )[0]
    assert "5432" in answer.text, answer.text
    turn = driver.find_element(By.CSS_SELECTOR, "#conversation .turn")
    assert "tier evidence" in turn.find_element(By.CSS_SELECTOR, ".tier").text
    assert "ms" in turn.find_element(By.CSS_SELECTOR, ".latency").text
    stages = [td.text for td in turn.find_elements(By.CSS_SELECTOR, ".trace tr td:first-child")]
    assert stages[:3] == ["retrieval", "rerank", "evidence"], stages
    # The query log records the answer from the response topic, beside the stream that showed
    # it: it reads answered soon after, not necessarily at once.
    wait_for(
        lambda: (
            get_json(f"{url}/v1/queries?limit=1", stack.keys["op"])[1]["items"][0]["status"]
            == "answered"
        ),
        timeout_s=30,
        what="the query log to record the answer",
    )

    # A citation opens its passage with the evidence span highlighted at its offsets.
    cite = answer.find_elements(By.CSS_SELECTOR, "a.cite")
    assert cite, f"no [n] link in {answer.text!r}"
    cite[0].click()
    mark = wait(
        driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#passage-text mark.evidence-span"),
        "a highlighted evidence span",
    )[0]  # fmt: skip
    passage = driver.find_element(By.ID, "passage-text").text
    assert "5432" in mark.text and mark.text in passage and len(mark.text) < len(passage), (
        mark.text,
        passage,
    )
    doc_link = driver.find_element(By.ID, "passage-doc")
    assert "doc=ports" in (doc_link.get_attribute("href") or "")
    # A follow-up carries the conversation; the log holds the standalone question answered.
    driver.find_element(By.ID, "question").send_keys("And which parameter sets it?")
    driver.find_element(By.ID, "ask").click()
    wait(
        driver,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversation .turn .meta")) == 2,
        "the follow-up's answer",
    )
    asked = get_json(f"{url}/v1/queries?limit=1", stack.keys["op"])[1]["items"][0]["query"]
    assert asked == (
        "Which parameter sets the TCP port? | context: "
        "Which TCP port does the server listen on by default?"
    ), asked
    # The past questions are listed (GET /v1/queries) for reopening, as they were typed.
    wait(
        driver,
        lambda d: (
            [a.text for a in d.find_elements(By.CSS_SELECTOR, "#history li a")][:2]
            == [
                "And which parameter sets it?",
                "Which TCP port does the server listen on by default?",
            ]
        ),
        "past questions",
    )
    IMAGES.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(IMAGES / "console-ask.png"))
    no_console_errors(driver, "ask")

    # The source document link opens it on the knowledge-base page.
    doc_link.click()
    detail = wait(
        driver, lambda d: d.find_element(By.ID, "doc-detail").is_displayed(), "the document"
    )
    assert detail
    wait(
        driver,
        lambda d: "indexed" in d.find_element(By.ID, "doc-detail").text,
        "the document's status",
    )

    # Upload a small file: its row goes uploading -> accepted -> indexed.
    path = tmp_path / UPLOAD
    path.write_text(UPLOAD_TEXT)
    driver.find_element(By.ID, "file-input").send_keys(str(path))
    status = f"#uploads li[data-file='{UPLOAD}'] .upload-status"
    wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, status).text == "indexed",
        "the uploaded document indexed",
        timeout_s=120,
    )
    row = f"#documents tr[data-doc='{UPLOAD}']"
    wait(
        driver,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, f"{row} .status").text == "indexed"
            and d.find_elements(By.CSS_SELECTOR, f"{row} button.delete")
        ),
        "the upload indexed in the documents list, with a delete button",
    )

    # Upload an archive: a bulk job whose row shows its progress until it succeeded.
    archive = tmp_path / ARCHIVE
    with zipfile.ZipFile(archive, "w") as zf:
        for name, text in ARCHIVE_FILES.items():
            zf.writestr(name, text)
    driver.find_element(By.ID, "file-input").send_keys(str(archive))
    status = f"#uploads li[data-file='{ARCHIVE}'] .upload-status"
    wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, status).text == "succeeded",
        "the archive's job succeeded",
        timeout_s=120,
    )
    job = "#jobs tbody tr:first-child"
    wait(
        driver,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, f"{job} .job-status").text == "succeeded"
            and "2/2" in d.find_element(By.CSS_SELECTOR, job).text
            and d.find_element(By.CSS_SELECTOR, f"{job} .bar > span").get_attribute("style")
            == "width: 100%;"
        ),
        "the job's row: succeeded, 2/2 documents, a full progress bar",
    )
    driver.save_screenshot(str(IMAGES / "console-kb.png"))
    no_console_errors(driver, "knowledge base")

    # Operations: every Procfile pool with its lag (a number, from Kafka).
    driver.find_element(By.CSS_SELECTOR, "#nav a[data-page='ops']").click()
    pools = procfile_pools()
    for pool in sorted(pools):
        cell = f"#pools tr[data-pool='{pool}'] .lag"
        wait(
            driver,
            lambda d, c=cell: d.find_element(By.CSS_SELECTOR, c).text.strip().isdigit(),
            f"pool {pool} with its lag",
        )
    # The pools' own metrics endpoints answered: the retrieval pool's batch latency is known.
    p50p95 = "#pools tr[data-pool='retrieval'] .p50p95"
    wait(
        driver,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, p50p95).text.split(" / ")[0].replace(".", "").isdigit()
        ),
        "the retrieval pool's batch p50",
    )
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#dlq tr[data-dlq]"), "the DLQs")
    # A second poll: the windowed rate and the trend charts have two samples.
    wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#pools tr[data-pool='retrieval'] polyline"),
        "the retrieval pool's trend chart",
    )
    driver.save_screenshot(str(IMAGES / "console-ops.png"))
    no_console_errors(driver, "operations")


def test_another_tenant_sees_none_of_it_and_a_user_key_no_operations(stack: Stack) -> None:
    url = stack.apis[0].url
    op = stack.keys["op"]
    other = stack.key(stack.name + "-other", rate_per_minute=0)
    httpx.post(
        f"{url}/v1/query",
        json={"query": "Which TCP port does the server listen on?", "route": "evidence"},
        headers={"Authorization": f"Bearer {op}"},
        timeout=60,
    )
    for path in ("/v1/documents", "/v1/ingest/jobs", "/v1/queries"):
        status, body = get_json(f"{url}{path}", other)
        assert status == 200 and body["items"] == [], (path, body)
    assert get_json(f"{url}/v1/documents", op)[1]["items"]
    assert get_json(f"{url}/v1/queries", op)[1]["items"]
    # A passage of the first tenant is not found with the other tenant's key.
    chunk = get_json(f"{url}/v1/documents/ports", op)[1]
    assert chunk["chunk_count"] == 1
    found = httpx.post(
        f"{url}/v1/query",
        json={"query": "Which TCP port does the server listen on?", "route": "evidence"},
        headers={"Authorization": f"Bearer {op}"},
        timeout=60,
    ).json()
    chunk_id = found["evidence"][0]["chunk_id"]
    assert get_json(f"{url}/v1/chunks/{chunk_id}", op)[0] == 200
    assert get_json(f"{url}/v1/chunks/{chunk_id}", other)[0] == 404
    # A user key: its own data, no operations.
    assert get_json(f"{url}/v1/ops/status", other)[0] == 403
    assert get_json(f"{url}/v1/ops/status", op)[0] == 200


def test_a_user_key_is_told_the_operations_page_needs_an_operator_key(
    stack: Stack, browser: Any
) -> None:
    driver = browser
    user = stack.key(stack.name + "-console", rate_per_minute=0)
    driver.get(f"{stack.apis[0].url}/console/ops")
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "key").send_keys(user)
    driver.find_element(By.ID, "signin").click()
    note = wait(
        driver,
        lambda d: (
            d.find_element(By.ID, "ops-forbidden").is_displayed()
            and d.find_element(By.ID, "ops-forbidden")
        ),
        "the 403 note",
    )
    assert note.text.startswith("403") and "operator key" in note.text
    assert not driver.find_element(By.ID, "ops-body").is_displayed()
    assert not driver.find_elements(By.CSS_SELECTOR, "#pools tbody tr")
    assert "user key" in driver.find_element(By.ID, "who").text


def test_operators_inspect_and_replay_a_dead_letter(stack: Stack) -> None:
    from kafka import TopicPartition

    from topics.consumer import make_consumer
    from topics.dlq import SourceRecord, dead_letter_headers
    from topics.producer import EventProducer, make_producer
    from topics.registry import TOKENS, TopicRegistry

    url, op = stack.apis[0].url, stack.keys["op"]
    registry = TopicRegistry(stack.settings.kafka.topic_prefix)
    # rag.tokens: only the API reply routers read it, and they skip a record that is no event
    # (no pool dead-letters the replayed record again).
    source, dlq = registry.name(TOKENS), registry.dlq(TOKENS)
    record = SourceRecord(source, 0, 7, b"doc-1", b"not an event", [("x", b"1")])
    producer = EventProducer(make_producer(stack.settings.kafka))
    producer.send_raw(
        dlq, record.key, record.value, dead_letter_headers(record, ValueError("bad"), 3, "p")
    )
    producer.flush()
    producer.close()

    depth = wait_for(
        lambda: next(
            (
                d["depth"]
                for d in get_json(f"{url}/v1/ops/status", op)[1]["dlq"]
                if d["topic"] == dlq and d["depth"]
            ),
            None,
        ),
        timeout_s=30,
        what="the DLQ depth",
    )
    assert depth == 1
    status, letters = get_json(f"{url}/v1/ops/dlq/{dlq}", op)
    assert status == 200 and letters["total"] == 1, letters
    letter = letters["letters"][0]
    assert letter["key"] == "doc-1" and letter["context"]["error.message"] == "bad"
    assert letter["context"]["source.topic"] == source

    consumer = make_consumer(stack.settings.kafka, group=None)
    try:
        tps = [
            TopicPartition(source, p) for p in sorted(consumer.partitions_for_topic(source) or [])
        ]
        before = sum(consumer.end_offsets(tps).values())
        r = httpx.post(
            f"{url}/v1/ops/dlq/{dlq}/replay", headers={"Authorization": f"Bearer {op}"}, timeout=60
        )
        done = r.json()
        assert r.status_code == 200 and (done["topic"], done["replayed"]) == (dlq, 1), r.text
        assert done["failed_again"] == 0 and done["remaining"] == 0  # no pool reads rag.tokens
        assert sum(consumer.end_offsets(tps).values()) >= before + 1  # back on its topic
    finally:
        consumer.close()
    again = httpx.post(
        f"{url}/v1/ops/dlq/{dlq}/replay", headers={"Authorization": f"Bearer {op}"}, timeout=60
    )
    assert again.json()["replayed"] == 0  # the replay group remembers: never twice
    assert get_json(f"{url}/v1/ops/dlq/nope.dlq", op)[0] == 404


def _tenant_letters(stack: Stack) -> tuple[str, str, str]:
    """Dead letters of two tenants and one of none in the DLQ of ``rag.tokens`` (which only the
    API's reply routers read: a replayed letter does not come back); ``(dlq, tenant a, b)``."""
    from topics.dlq import SourceRecord, dead_letter_headers
    from topics.producer import EventProducer, make_producer
    from topics.registry import TOKENS, TopicRegistry

    registry = TopicRegistry(stack.settings.kafka.topic_prefix)
    source, dlq = registry.name(TOKENS), registry.dlq(TOKENS)
    a, b = stack.name + "-console", stack.name + "-b"
    producer = EventProducer(make_producer(stack.settings.kafka))
    for n, value in enumerate(
        [
            json.dumps({"tenant": a, "secret": "a-1"}).encode(),
            json.dumps({"tenant": b, "secret": "b-1"}).encode(),
            json.dumps({"tenant": b, "secret": "b-2"}).encode(),
            b"\xff no tenant",
        ]
    ):
        record = SourceRecord(source, 0, 100 + n, f"k{n}".encode(), value, [])
        headers = dead_letter_headers(record, ValueError(f"bad {n}"), 1, "p")
        producer.send_raw(dlq, record.key, record.value, headers)
    producer.flush()
    producer.close()
    return dlq, a, b


def _dlq_depth(url: str, key: str, dlq: str) -> int | None:
    status, body = get_json(f"{url}/v1/ops/status", key)
    assert status == 200, body
    return next((d["depth"] for d in body["dlq"] if d["topic"] == dlq), None)


def test_a_tenant_operator_sees_and_replays_only_its_tenants_letters(stack: Stack) -> None:
    url, cluster = stack.apis[0].url, stack.keys["op"]
    dlq, a, b = _tenant_letters(stack)
    op_a = stack.key(a, role="operator", rate_per_minute=0)
    op_b = stack.key(b, role="operator", rate_per_minute=0)
    wait_for(lambda: _dlq_depth(url, op_b, dlq) == 2, timeout_s=30, what="b's two letters")
    assert _dlq_depth(url, op_a, dlq) == 1
    assert (_dlq_depth(url, cluster, dlq) or 0) >= 4
    _, body = get_json(f"{url}/v1/ops/status", op_a)
    assert body["scope"] == "tenant" and body["tenant"] == a
    assert (
        body["processes"]["processes"] == [] and "cluster operators" in body["processes"]["error"]
    )
    assert all(p["partitions"] == [] and p["history"] == [] for p in body["pools"])
    assert all(isinstance(p["lag"], int) for p in body["pools"]), body["pools"]
    listed = get_json(f"{url}/v1/ops/dlq/{dlq}", op_b)[1]
    assert listed["total"] == 2 and {x["key"] for x in listed["letters"]} == {"k1", "k2"}
    seen = json.dumps(get_json(f"{url}/v1/ops/dlq/{dlq}", op_a)[1])
    assert "k0" in seen and "k1" not in seen and "k3" not in seen
    everything = get_json(f"{url}/v1/ops/dlq/{dlq}", cluster)[1]
    assert {"k0", "k1", "k2", "k3"} <= {x["key"] for x in everything["letters"]}

    def replay(key: str) -> dict[str, Any]:
        r = httpx.post(
            f"{url}/v1/ops/dlq/{dlq}/replay?settle_ms=0",
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    assert replay(op_b)["replayed"] == 2  # b's letters only
    assert replay(op_b)["replayed"] == 0  # b's replay group remembers
    assert replay(op_a)["replayed"] == 1
    assert get_json(f"{url}/v1/me", op_a)[1]["role"] == "operator"


def test_a_tenant_operators_operations_page_shows_only_its_tenant(
    stack: Stack, browser: Any
) -> None:
    driver = browser
    url = stack.apis[0].url
    dlq, _, b = _tenant_letters(stack)
    op_b = stack.key(b, role="operator", rate_per_minute=0)
    driver.get(f"{url}/console/ops")
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "key").send_keys(op_b)
    driver.find_element(By.ID, "signin").click()
    wait(
        driver,
        lambda d: f"tenant {b} only" in d.find_element(By.ID, "ops-updated").text,
        "the page scoped to the tenant",
    )
    note = driver.find_element(By.ID, "processes-note").text
    assert "cluster operators" in note, note
    assert not driver.find_elements(By.CSS_SELECTOR, "#processes tbody tr")
    cell = f"#dlq tr[data-dlq='{dlq}'] td:nth-child(2)"
    wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, cell).text.strip().isdigit(),
        "the tenant's letters counted",
    )
    shown = int(driver.find_element(By.CSS_SELECTOR, cell).text)
    assert shown == _dlq_depth(url, op_b, dlq)  # b's letters, as the API counts them for b
    assert shown < (_dlq_depth(url, stack.keys["op"], dlq) or 0)  # not every tenant's
    no_console_errors(driver, "tenant operations")


def test_a_passage_quoted_with_the_chunk_before_shows_both_chunks(
    stack: Stack, browser: Any
) -> None:
    # A definition long enough for three chunks; the second continues it (context expansion).
    sentences = " ".join(
        f"Workload {i} of the scheduler keeps its queue in memory until the budget is spent."
        for i in range(30)
    )
    text = f"# Memory\n\nMemory budget (integer)\n\n{sentences} The default is 64 megabytes."
    url = stack.apis[0].url
    key = stack.keys["op"]
    doc = index_document(url, key, "budget", text)
    tenant = get_json(f"{url}/v1/me", key)[1]["tenant"]
    first, second = (chunk_id(tenant, "budget", doc["version"], n) for n in (0, 1))
    texts = [get_json(f"{url}/v1/chunks/{c}", key)[1]["text"] for c in (first, second)]
    # The term from the chunk before, a sentence from the passage itself: as the evidence
    # selector quotes a passage read with its preceding part.
    term = "Memory budget (integer)"
    own = texts[1].index("Workload 20")
    evidence = [
        {"n": 1, "chunk_id": first, "start": texts[0].index(term),
         "end": texts[0].index(term) + len(term)},
        {"n": 1, "chunk_id": second, "start": own, "end": texts[1].index(".", own) + 1},
    ]  # fmt: skip
    result = {
        "citations": [{"n": 1, "chunk_id": second, "doc_id": "budget", "title": "Memory"}],
        "evidence": evidence,
    }
    driver = browser
    driver.get(f"{url}/")
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.ID, "signin").click()
    wait(driver, lambda d: d.find_element(By.ID, "question").is_displayed(), "the Ask page")
    driver.execute_script("openPassage(arguments[0], 1)", result)
    marks = wait(
        driver,
        lambda d: len(m := d.find_elements(By.CSS_SELECTOR, "#passage-text mark")) == 2 and m,
        "two highlighted spans",
    )
    assert [m.text for m in marks] == [term, texts[1][own : texts[1].index(".", own) + 1]]
    assert len(driver.find_elements(By.CSS_SELECTOR, "#passage-text hr.chunk-break")) == 1
    meta = driver.find_element(By.ID, "passage-meta").text
    assert "chunks 0, 1" in meta, meta
    no_console_errors(driver, "a passage of two chunks")


def test_a_blank_question_is_refused_and_past_questions_show_what_was_typed(
    stack: Stack, browser: Any
) -> None:
    """Issue 39: a question of spaces did nothing and said nothing; the past questions showed
    a follow-up as rewritten ("Which parameter sets the TCP port?"), not as typed."""
    url = stack.apis[0].url
    tenant = get_json(f"{url}/v1/me", stack.keys["op"])[1]["tenant"]
    # A key of its own principals: its query log holds only this test's questions.
    key = stack.key(tenant, rate_per_minute=0, principals=["user:typed-questions"])
    driver = browser
    driver.get(f"{url}/")
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.ID, "signin").click()
    wait(driver, lambda d: d.find_element(By.ID, "question").is_displayed(), "the Ask page")
    driver.find_element(By.CSS_SELECTOR, "#route option[value='evidence']").click()

    driver.find_element(By.ID, "question").send_keys("   ")
    driver.find_element(By.ID, "ask").click()
    state = wait(
        driver,
        lambda d: (e := d.find_element(By.ID, "ask-state")).text and e,
        "a message about the blank question",
    )
    assert "empty" in state.text and "error" in (state.get_attribute("class") or ""), state.text
    time.sleep(1)  # nothing is sent: no turn, nothing in the query log
    assert not driver.find_elements(By.CSS_SELECTOR, "#conversation .turn")
    assert get_json(f"{url}/v1/queries", key)[1]["items"] == []

    question = driver.find_element(By.ID, "question")
    question.clear()
    question.send_keys("Which TCP port does the server listen on by default?")
    driver.find_element(By.ID, "ask").click()
    wait(
        driver,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversation .turn .meta")) == 1,
        "the first answer",
    )
    assert driver.find_element(By.ID, "ask-state").text == ""  # the message is gone
    driver.find_element(By.ID, "question").send_keys("And which parameter sets it?")
    driver.find_element(By.ID, "ask").click()
    wait(
        driver,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversation .turn .meta")) == 2,
        "the follow-up's answer",
    )
    items = get_json(f"{url}/v1/queries", key)[1]["items"]
    assert items[0]["question"] == "And which parameter sets it?", items[0]
    assert items[0]["query"].startswith("Which parameter sets the TCP port?"), items[0]
    driver.find_element(By.ID, "new-conversation").click()
    driver.execute_script("loadHistory(true)")
    wait(
        driver,
        lambda d: (
            [a.text for a in d.find_elements(By.CSS_SELECTOR, "#history li a")]
            == [
                "And which parameter sets it?",
                "Which TCP port does the server listen on by default?",
            ]
        ),
        "past questions as typed",
    )
    no_console_errors(driver, "blank question and past questions")


def test_feedback_on_an_answer_shows_in_the_past_questions(stack: Stack, browser: Any) -> None:
    """Issue 50: "Helpful? Yes / No" under an answer stores the key's feedback (``POST
    /v1/queries/{id}/feedback``); the past questions show each query's tally as a badge, and a
    reopened answer shows what this key said."""
    url = stack.apis[0].url
    tenant = get_json(f"{url}/v1/me", stack.keys["op"])[1]["tenant"]
    # A key of its own principals: its query log holds only this test's question.
    key = stack.key(tenant, rate_per_minute=0, principals=["user:feedback-giver"])
    driver = browser
    driver.get(f"{url}/")
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.ID, "signin").click()
    wait(driver, lambda d: d.find_element(By.ID, "question").is_displayed(), "the Ask page")
    driver.find_element(By.CSS_SELECTOR, "#route option[value='evidence']").click()
    driver.find_element(By.ID, "question").send_keys(
        "Which TCP port does the server listen on by default?"
    )
    driver.find_element(By.ID, "ask").click()
    turn = wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#conversation .turn .feedback"),
        "the answer with its feedback buttons",
    )[0]
    assert not driver.find_elements(By.CSS_SELECTOR, "#history .feedback-badge")  # none yet
    turn.find_element(By.CSS_SELECTOR, "button.feedback-yes").click()
    wait(
        driver,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, ".turn .feedback-state").text == "you said: helpful"
        ),
        "the feedback stored",
    )
    badge = wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#history li .feedback-badge"),
        "the feedback badge in the past questions",
    )[0]
    assert badge.text == "helpful 1 · not 0", badge.text
    items = get_json(f"{url}/v1/queries", key)[1]["items"]
    assert items[0]["feedback"] == {"helpful": 1, "not_helpful": 0}, items[0]
    shown = get_json(f"{url}/v1/queries/{items[0]['request_id']}", key)[1]["feedback"]
    assert [(f["helpful"], f["mine"]) for f in shown] == [(True, True)], shown

    # No instead: the key's feedback is replaced, and a reopened answer says so.
    driver.find_element(By.CSS_SELECTOR, ".turn button.feedback-no").click()
    wait(
        driver,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, "#history li .feedback-badge").text
            == "helpful 0 · not 1"
        ),
        "the badge after the change of mind",
    )
    driver.find_element(By.ID, "new-conversation").click()
    driver.find_element(By.CSS_SELECTOR, "#history li a").click()
    wait(
        driver,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, ".turn .feedback-state").text == "you said: not helpful"
        ),
        "the reopened answer's feedback",
    )
    driver.save_screenshot(str(IMAGES / "console-feedback.png"))
    no_console_errors(driver, "feedback")


def test_the_search_page_lists_passages_with_the_query_words_marked(
    stack: Stack, browser: Any
) -> None:
    """Issue 51: the Search page calls ``POST /v1/search`` and lists the passages best first,
    each with its title, source, score and text, the query's words in ``<mark>`` and nothing of
    the passage parsed as HTML; no answer."""
    url = stack.apis[0].url
    driver = browser
    driver.get(f"{url}/console/search")
    wait(driver, lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "key").send_keys(stack.keys["op"])
    driver.find_element(By.ID, "signin").click()
    wait(driver, lambda d: d.find_element(By.ID, "search-query").is_displayed(), "the Search page")
    assert "active" in (
        driver.find_element(By.CSS_SELECTOR, "#nav a[data-page='search']").get_attribute("class")
        or ""
    )
    query = "Which TCP port does the server listen on?"
    driver.find_element(By.ID, "search-query").send_keys(query)
    driver.find_element(By.CSS_SELECTOR, "#search-top-k option[value='5']").click()
    driver.find_element(By.ID, "search").click()
    hits = wait(
        driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results .search-hit"),
        "the passages",
    )  # fmt: skip
    found = httpx.post(
        f"{url}/v1/search", json={"query": query, "top_k": 5},
        headers={"Authorization": f"Bearer {stack.keys['op']}"}, timeout=30,
    ).raise_for_status().json()["data"]  # fmt: skip
    assert [h.get_attribute("data-chunk") for h in hits] == [d["chunk_id"] for d in found]
    first, best = hits[0], found[0]
    assert "5432" in first.find_element(By.CSS_SELECTOR, ".hit-text").text
    # The document id where the document has no title or source.
    title = first.find_element(By.CSS_SELECTOR, ".hit-title").text
    assert title == (best["title"] or best["doc_id"])
    assert first.find_element(By.CSS_SELECTOR, ".hit-source").text == (
        best["source"] or best["doc_id"]
    )
    assert first.find_element(By.CSS_SELECTOR, ".hit-score").text.startswith("score 0.0")
    text = first.find_element(By.CSS_SELECTOR, ".hit-text")
    marked = [m.text.lower() for m in text.find_elements(By.TAG_NAME, "mark")]
    assert {"tcp", "port", "server"} <= set(marked), marked
    assert "does" not in marked and "which" not in marked  # too common to mark
    # Text nodes and <mark> only: the passage is never parsed as HTML.
    tags = driver.execute_script(
        "return [...arguments[0].querySelectorAll('*')].map((e) => e.tagName)", text
    )
    assert set(tags) == {"MARK"}, tags
    assert text.text.replace("\n", " ").split() == best["text"].replace("\n", " ").split()
    assert not driver.find_elements(By.CSS_SELECTOR, "#search-page .answer")
    assert f"{len(found)} passages" in driver.find_element(By.ID, "search-state").text
    no_console_errors(driver, "search")
