"""``ragstream bench rss``: the process trees of a stack found from its PID files."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from rich.console import Console
from typer.testing import CliRunner

from bench.rss import (
    DEMO_DIR,
    SERVICE_PID_FILES,
    SUPERVISOR_PID,
    SUPERVISOR_STATE,
    measure_stack,
    payload,
    render,
)
from entry.cli import app
from entry.demo import PID_FILE, _state_dir
from entry.supervisor import STATE_FILE
from infra.manager import services
from ragstream.settings import InfraSettings, Settings, get_settings

#: A process that starts one child and sleeps: a tree of two.
PARENT = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
)


def _tree() -> subprocess.Popen[bytes]:
    """Start :data:`PARENT` and wait until its child exists."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT])
    deadline = time.monotonic() + 10
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return parent


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, int]]:
    """A fake stack: a service tree, a dead service PID, a supervisor and one Procfile tree."""
    service, postgres, supervisor, api = _tree(), _tree(), _tree(), _tree()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name, pid in (("llm", service.pid), ("kafka", dead.pid)):
        (tmp_path / name / "run").mkdir(parents=True)
        (tmp_path / name / "run" / f"{name}.pid").write_text(f"{pid}\n")
    (tmp_path / "postgres" / "data").mkdir(parents=True)
    (tmp_path / "postgres" / "data" / "postmaster.pid").write_text(
        f"{postgres.pid}\n{tmp_path}/postgres/data\n1796172060\n5433\n"
    )
    demo = tmp_path / DEMO_DIR
    demo.mkdir()
    (demo / SUPERVISOR_PID).write_text(f"{supervisor.pid}\n")
    state = {
        "supervisor_pid": supervisor.pid,
        "processes": {
            "api": {"command": "ragstream api", "pid": api.pid, "state": "running"},
            "rerank": {"command": "ragstream worker rerank", "pid": None, "state": "backoff"},
        },
    }
    (demo / SUPERVISOR_STATE).write_text(json.dumps(state))
    yield {"llm": service.pid, "supervisor": supervisor.pid, "api": api.pid}
    for parent in (service, postgres, supervisor, api):
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()


def test_every_live_tree_is_measured_with_its_children(
    stack: dict[str, int], tmp_path: Path
) -> None:
    rows = measure_stack(tmp_path)
    found = {(r.kind, r.name): r for r in rows}
    # the dead kafka PID and the rerank process in back-off are not rows
    assert list(found) == [
        ("service", "llm"),
        ("service", "postgres"),
        ("process", "supervisor"),
        ("process", "api"),
    ]
    assert found["service", "llm"].processes == 2  # the root and its child
    assert found["process", "api"].processes == 2
    assert found["process", "supervisor"].processes == 1  # its tree is the Procfile rows
    own = psutil.Process(stack["api"]).memory_info().rss
    assert found["process", "api"].rss_bytes > own  # the child's RSS is added
    document = payload(rows, "after-ingest")
    assert document["total_rss_bytes"] == sum(r.rss_bytes for r in rows)
    assert document["label"] == "after-ingest"


def test_the_table_fits_80_columns(stack: dict[str, int], tmp_path: Path) -> None:
    console = Console(width=80, record=True)
    console.print(render(payload(measure_stack(tmp_path))))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert "supervisor" in text
    assert "4 trees" in text


def test_the_command_writes_json_and_fails_on_an_empty_stack(
    stack: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSTREAM_INFRA__LOCAL_DIR", str(tmp_path))
    get_settings.cache_clear()
    out = tmp_path / "rss.json"
    try:
        result = CliRunner().invoke(app, ["bench", "rss", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert [r["name"] for r in json.loads(out.read_text())["rows"]] == [
            "llm",
            "postgres",
            "supervisor",
            "api",
        ]
        monkeypatch.setenv("RAGSTREAM_INFRA__LOCAL_DIR", str(tmp_path / "empty"))
        get_settings.cache_clear()
        result = CliRunner().invoke(app, ["bench", "rss"])
        assert result.exit_code == 1
        assert "no running service" in result.output
    finally:
        get_settings.cache_clear()


def test_the_file_layout_is_the_one_infra_and_the_demo_write(tmp_path: Path) -> None:
    """``bench`` cannot import ``infra`` or ``entry``; the names it reads must be theirs."""
    settings = Settings(infra=InfraSettings(local_dir=tmp_path, postgres=True))
    for service in services(settings):
        relative = service.pid_file.relative_to(tmp_path)
        assert any(relative.match(pattern) for pattern in SERVICE_PID_FILES), relative
    assert _state_dir(settings) == tmp_path / DEMO_DIR
    assert (STATE_FILE, PID_FILE) == (SUPERVISOR_STATE, SUPERVISOR_PID)
