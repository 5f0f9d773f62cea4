"""``bench api --load``'s split of an answer's cost: the stack's processes found by command line,
their CPU time per answer, and the trace's stages beside the client's latency."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from bench.query.api_probe import measure_api_load
from bench.query.cpu import ProcessSet, stack_process_name

PY = "/work/main/.venv/bin/python3"
RS = "/work/main/.venv/bin/ragstream"


@pytest.mark.parametrize(
    ("cmdline", "name"),
    [
        ([PY, RS, "api"], "api"),
        ([PY, RS, "worker", "retrieval"], "retrieval"),
        ([PY, RS, "celery-worker", "--queues", "jobs", "-n", "jobs@%h"], "celery jobs"),
        ([PY, RS, "celery-worker"], "celery default"),
        ([PY, RS, "flower"], "flower"),
        (["/bin/sh", "-c", "ragstream worker retrieval"], None),  # the supervisor's shell
        ([PY, RS, "demo", "run"], None),
        ([PY, RS, "query", "What is VACUUM?"], None),
        ([PY, "-m", "pytest"], None),
        ([], None),
    ],
)
def test_a_stack_process_is_named_by_its_command(cmdline: list[str], name: str | None) -> None:
    assert stack_process_name(cmdline) == name


def test_a_load_splits_each_answer_by_process_and_by_stage() -> None:
    """A real child process burns 0.5 s of CPU during the load (the mocked gateway's first
    answer waits for it), none before: its core-ms per answer are counted, and the stages
    plus ``unaccounted`` make up the client's latency."""
    burner = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\n"
         "t = time.process_time()\n"
         "while time.process_time() - t < 0.5: pass\nprint('done', flush=True)\n"
         "sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert burner.stdin is not None and burner.stdout is not None
    assert burner.stdout.readline() == "ready\n"  # its start-up is over before the idle window
    burned: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if not burned:  # the first answer: the burn, start to end
            burner.stdin.write("go\n")
            burner.stdin.flush()
            burned.append(burner.stdout.readline())
        time.sleep(0.01)
        trace = [{"stage": "retrieval", "duration_ms": 4.0},
                 {"stage": "evidence", "duration_ms": 1.0}]  # fmt: skip
        return httpx.Response(200, json={"status": "answered", "trace": trace})

    try:
        result = measure_api_load(
            "http://api.test", "rsk_x", ["a?"], 1, seconds=0.5, idle_s=0.5,
            transport=httpx.MockTransport(handler), processes=ProcessSet({}, {"pool": burner.pid}),
        )  # fmt: skip
    finally:
        burner.kill()
        burner.communicate()  # closes the pipes
    assert burned == ["done\n"]
    answered = result["answered"]
    pool_ms = result["core_ms_by_process"]["pool"] * answered
    assert 450 <= pool_ms <= 700, result  # the 0.5 s burn (clock ticks of 10 ms)
    assert result["stack_core_ms_per_answer"] == result["core_ms_by_process"]["pool"]
    assert "bench" in result["core_ms_by_process"]  # the load generator, apart
    stages: dict[str, Any] = result["stage_ms"]
    assert stages["retrieval"] == 4.0 and stages["evidence"] == 1.0
    assert stages["unaccounted"] >= 5.0  # the 10 ms the gateway took, less the 5 ms of stages
