"""The container path end to end (issue 38): ``make test-deploy``, not part of ``make test``.

``infra/compose.yaml`` + ``infra/compose.local.yaml`` on podman (:mod:`infra.compose`), under a
project of its own on a bridge network of its own: health-gated start of the whole stack, a
small corpus (the first expected page of each of the demo's sample questions, from the Debian
manuals) ingested through ``POST /v1/documents``, the demo's questions answered through the API
and one through the ``openai`` client, a file uploaded (multipart) into the API's container and
ingested by the ingest pool's (the shared ``uploads`` volume), one pool's container killed with
questions in flight and restarted by its restart policy with none of them lost, then ``down -v``
leaving nothing.

Each step's seconds go to ``<infra.local_dir>/compose/deploy-report.json`` (and are printed);
docs/operations/containers.md quotes them. Needs the images of ``make image`` and
``podman-compose``; the tests run in file order and share one stack.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra import compose
from infra.images import TARGETS, image_name
from ragstream.settings import PROJECT_ROOT, get_settings

pytestmark = pytest.mark.timeout(2400)

QUESTIONS = PROJECT_ROOT / "bench" / "evaluation" / "questions.sample.jsonl"
MANUALS = {
    "python-3.11": Path("/usr/share/doc/python3.11/html"),
    "postgresql-15": Path("/usr/share/doc/postgresql-doc-15/html"),
}
#: The pool whose container is killed: one process, on every question's path.
KILLED = "worker-rerank"
IN_FLIGHT = 4


@dataclass
class Deployed:
    """The running stack, its API, and the seconds each step took."""

    stack: compose.Stack
    url: str = ""
    key: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    numbers: dict[str, Any] = field(default_factory=dict)
    down: list[str] | None = None

    def container(self, service: str, n: int = 1) -> str:
        return f"{self.stack.project}_{service}_{n}"


def _questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]


def _corpus() -> dict[str, Path]:
    """``{doc_id: file}``: the first expected page of each sample question."""
    pages = {}
    for q in _questions():
        for page in q.get("expected_pages", [])[:1]:
            pages[f"{q['corpus']}/{page}"] = MANUALS[q["corpus"]] / page
    return pages


def _wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check():
            return time.monotonic() - started
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployed]:
    if shutil.which("podman-compose") is None:
        pytest.skip("podman-compose is not installed (apt-get install podman-compose)")
    missing = [p for p in _corpus().values() if not p.is_file()]
    if missing:
        pytest.skip(f"the manuals are not installed (make docs): {missing[0]}")
    settings = get_settings()
    stack = compose.Stack.create(settings, f"rsdeploy{uuid.uuid4().hex[:6]}")
    for target in TARGETS:
        if stack.podman("image", "exists", image_name(target), check=False).returncode != 0:
            pytest.skip(f"no image {image_name(target)}: make image")
    # Only the API and Flower publish a port: on a random loopback port, so the stack runs
    # beside the single-machine services (8000 and 5555 may be taken).
    stack = replace(
        stack, env={**stack.env, "API_HOST_PORT": "127.0.0.1:", "FLOWER_HOST_PORT": "127.0.0.1:"}
    )
    run = Deployed(stack)
    try:
        waited = compose.up(stack)
        run.seconds["compose up (health-gated, every service)"] = waited["total"]
        run.numbers["waits_s"] = {k: round(v, 1) for k, v in waited.items()}
        port = stack.podman("port", run.container("api"), "8000/tcp").stdout.split(":")[-1]
        run.url = f"http://127.0.0.1:{port.strip()}"
        yield run
    finally:
        if run.down is None:
            run.down = compose.down(stack)
        report = settings.infra.local_dir / "compose" / "deploy-report.json"
        report.parent.mkdir(parents=True, exist_ok=True)
        seconds = {k: round(v, 1) for k, v in run.seconds.items()}
        report.write_text(json.dumps({"seconds": seconds, **run.numbers}, indent=2) + "\n")
        print(json.dumps({"seconds": seconds, **run.numbers}, indent=2))


def test_every_service_runs_and_only_the_api_and_flower_publish_ports(deployed: Deployed) -> None:
    services = compose.active(compose.load(), compose.default_profiles())
    for name, svc in services.items():
        for container in compose.container_names(deployed.stack.project, name, svc):
            state = deployed.stack.podman(
                "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container
            ).stdout.split()
            if name in {"migrate", "topics"}:  # podman 4.3 says "stopped" once cleaned up
                assert state in (["exited", "0"], ["stopped", "0"]), f"{container}: {state}"
            else:
                logs = deployed.stack.logs(container)
                assert state[0] == "running", f"{container}: {state}\n{logs}"
            restarts = deployed.stack.podman(
                "inspect", "--format", "{{.RestartCount}}", container
            ).stdout.strip()
            if restarts != "0":
                deployed.numbers.setdefault("restarted_while_starting", {})[container] = restarts
    published = deployed.stack.podman(
        "ps", "--filter", f"label=io.podman.compose.project={deployed.stack.project}",
        "--format", "{{.Names}} {{.Ports}}",
    ).stdout  # fmt: skip
    ports = {line.split()[0] for line in published.splitlines() if "->" in line}
    assert ports == {deployed.container("api"), deployed.container("flower")}, published
    assert "0.0.0.0" not in published


def test_a_small_corpus_is_ingested_through_the_api(deployed: Deployed) -> None:
    started = time.monotonic()
    deployed.key = deployed.stack.podman(
        "exec", deployed.container("api"), "ragstream", "keys", "create", "--name", "deploy",
        "--role", "cluster-operator", "--principal", "*", "--quiet",
    ).stdout.strip()  # fmt: skip
    headers = {"Authorization": f"Bearer {deployed.key}"}
    corpus = _corpus()
    for doc_id, path in corpus.items():
        body = {"doc_id": doc_id, "text": path.read_text(), "content_type": "text/html"}
        r = httpx.post(f"{deployed.url}/v1/documents", json=body, headers=headers, timeout=30)
        assert r.status_code == 202, r.text

    def indexed() -> bool:
        return all(
            httpx.get(f"{deployed.url}/v1/documents/{d}", headers=headers, timeout=10)
            .json()
            .get("status")
            == "indexed"
            for d in corpus
        )

    _wait_for(indexed, 900, f"{len(corpus)} documents indexed")
    deployed.seconds[f"ingest {len(corpus)} pages (POST /v1/documents until indexed)"] = (
        time.monotonic() - started
    )
    deployed.numbers["corpus_pages"] = len(corpus)
    deployed.numbers["corpus_bytes"] = sum(p.stat().st_size for p in corpus.values())


def _ask(deployed: Deployed, question: str, mode: str = "sync") -> dict[str, Any]:
    r = httpx.post(
        f"{deployed.url}/v1/query",
        json={"query": question, "mode": mode, "timeout_s": 120},
        headers={"Authorization": f"Bearer {deployed.key}"},
        timeout=150,
    )
    assert r.status_code in {200, 202}, r.text
    result: dict[str, Any] = r.json()
    return result


def test_the_demos_questions_are_answered_through_the_api(deployed: Deployed) -> None:
    started = time.monotonic()
    matched, cited = 0, 0
    for q in _questions():
        result = _ask(deployed, q["question"])
        assert result["status"] == "answered", result
        assert result["answer"], result
        matched += any(re.search(p, result["answer"], re.I) for p in q["answer_patterns"])
        docs = {c["doc_id"] for c in result["citations"]}
        cited += any(f"{q['corpus']}/{p}" in docs for p in q.get("expected_pages", []))
    deployed.seconds[f"{len(_questions())} questions, one at a time (POST /v1/query)"] = (
        time.monotonic() - started
    )
    deployed.numbers["answers_matching_patterns"] = matched
    deployed.numbers["answers_citing_an_expected_page"] = cited


def test_the_openai_client_gets_an_answer(deployed: Deployed) -> None:
    from openai import OpenAI

    started = time.monotonic()
    client = OpenAI(base_url=f"{deployed.url}/v1", api_key=deployed.key, max_retries=0)
    completion = client.chat.completions.create(
        model="ragstream",
        messages=[{"role": "user", "content": "How can I read the rows of a CSV file in Python?"}],
        timeout=150,
    )
    assert completion.choices[0].message.content
    # The evidence tier answers (no LLM tokens); its citations ride along as an extra field.
    citations = (completion.model_extra or {}).get("citations", [])
    assert "python-3.11/library/csv.html" in {c["doc_id"] for c in citations}, citations
    deployed.seconds["one question through the openai client"] = time.monotonic() - started


#: The uploaded file: one fact no manual holds, so only the upload can answer the question.
UPLOAD_NAME = "deploy-upload.md"
UPLOAD_TEXT = (
    "# The harbour lantern of Quillon Bay\n\n"
    "The harbour master of Quillon Bay lights the green lantern at 21:40 every evening, "
    "and puts it out at dawn.\n"
)
UPLOAD_QUESTION = "When does the harbour master of Quillon Bay light the green lantern?"


def test_a_multipart_upload_is_ingested_by_the_pool_and_answerable(deployed: Deployed) -> None:
    """The API keeps the file under ingest.upload_root and the ingest pool, another container,
    reads it from there: the `uploads` volume both mount (infra/compose.yaml)."""
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {deployed.key}"}
    r = httpx.post(
        f"{deployed.url}/v1/documents",
        files={"file": (UPLOAD_NAME, UPLOAD_TEXT.encode(), "text/markdown")},
        headers=headers,
        timeout=30,
    )
    assert r.status_code == 202, r.text
    doc_id = r.json()["doc_id"]

    def indexed() -> bool:
        doc = httpx.get(f"{deployed.url}/v1/documents/{doc_id}", headers=headers, timeout=10)
        assert doc.json().get("status") != "failed", doc.text
        return bool(doc.json().get("status") == "indexed")

    _wait_for(indexed, 300, f"the upload {doc_id} indexed")
    deployed.seconds["one multipart upload (POST /v1/documents until indexed)"] = (
        time.monotonic() - started
    )
    # The file the API wrote (<upload_root>/<tenant>/_uploads/documents/<sha256>.<kind>) is
    # one the ingest pool's container sees.
    digest = hashlib.sha256(UPLOAD_TEXT.encode()).hexdigest()
    listed = deployed.stack.podman(
        "exec", deployed.container("worker-ingest"), "find", "/var/lib/ragstream/uploads",
        "-path", f"*/_uploads/documents/{digest}.*",
    ).stdout  # fmt: skip
    assert digest in listed, listed
    result = _ask(deployed, UPLOAD_QUESTION)
    assert result["status"] == "answered", result
    assert "21:40" in result["answer"], result
    assert doc_id in {c["doc_id"] for c in result["citations"]}, result["citations"]


def _restarts(deployed: Deployed, container: str) -> tuple[int, str, int]:
    out = deployed.stack.podman(
        "inspect", "--format", "{{.RestartCount}} {{.State.Status}} {{.State.Pid}}", container
    ).stdout.split()
    return int(out[0]), out[1], int(out[2])


def test_a_killed_pool_container_is_restarted_and_no_question_is_lost(deployed: Deployed) -> None:
    container = deployed.container(KILLED)
    before, status, pid = _restarts(deployed, container)
    assert status == "running" and pid > 0
    asked = [_ask(deployed, q["question"], mode="async") for q in _questions()[:IN_FLIGHT]]
    ids = [a["request_id"] for a in asked]
    started = time.monotonic()
    subprocess.run(["kill", "-KILL", str(pid)], check=True)  # a crash, not `podman stop`
    _wait_for(
        lambda: _restarts(deployed, container)[:2] == (before + 1, "running"),
        120,
        f"{container} restarted",
    )
    deployed.seconds[f"{KILLED} killed (SIGKILL) until running again"] = time.monotonic() - started
    headers = {"Authorization": f"Bearer {deployed.key}"}

    def answered() -> bool:
        states = [
            httpx.get(f"{deployed.url}/v1/queries/{i}", headers=headers, timeout=10).json()
            for i in ids
        ]
        assert all(s.get("status") != "failed" for s in states), states
        return all(s.get("status") == "answered" for s in states)

    _wait_for(answered, 600, f"{len(ids)} questions in flight answered")
    deployed.seconds[f"kill until all {IN_FLIGHT} questions in flight answered"] = (
        time.monotonic() - started
    )


def test_down_leaves_no_container_volume_network_or_pod(deployed: Deployed) -> None:
    started = time.monotonic()
    deployed.down = compose.down(deployed.stack)
    deployed.seconds["compose down -v"] = time.monotonic() - started
    assert deployed.down == []
    assert deployed.stack.state_dir is not None
    assert not (deployed.stack.state_dir / "postgres_password").exists()
