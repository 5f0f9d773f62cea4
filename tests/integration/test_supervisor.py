"""The single-machine supervisor (issue 15, item 4): a process killed with SIGKILL is
restarted with back-off and logged, and the other processes keep running."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from entry.supervisor import Supervisor, parse_procfile, read_state
from ragstream.retry import RetryPolicy
from ragstream.settings import PROJECT_ROOT
from tests.integration.kafkakit import wait_for

SLEEPER = f"exec {sys.executable} -c 'import time; print(\"up\", flush=True); time.sleep(300)'"


def test_a_killed_process_is_restarted_and_the_others_keep_running(tmp_path: Path) -> None:
    out = io.StringIO()
    supervisor = Supervisor(
        {"a": SLEEPER, "b": SLEEPER},
        cwd=tmp_path,
        state_dir=tmp_path,
        backoff=RetryPolicy(max_attempts=100, base_ms=300, cap_ms=2000, jitter=False),
        stop_timeout_s=5,
        out=out,
    )
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: all(s.state == "running" for s in supervisor.states.values()), 10)
        a_pid, b_pid = supervisor.states["a"].pid, supervisor.states["b"].pid
        assert a_pid and b_pid
        os.kill(a_pid, signal.SIGKILL)
        assert wait_for(lambda: supervisor.states["a"].restarts == 1, 10), out.getvalue()
        assert wait_for(lambda: supervisor.states["a"].state == "running", 10)
        a = supervisor.states["a"]
        assert a.pid not in (None, a_pid) and a.last_exit_code == -signal.SIGKILL
        # b was never touched: same pid, still alive, no restart.
        assert supervisor.states["b"].pid == b_pid and supervisor.states["b"].restarts == 0
        os.kill(b_pid, 0)
        log = out.getvalue()
        assert "process.exited name=a exit_code=-9" in log and "restart_in_s=0.3" in log
        assert "a | up" in log and "b | up" in log  # output is prefixed by process name
        state = read_state(tmp_path)
        assert state is not None
        processes = state["processes"]
        assert isinstance(processes, dict) and processes["a"]["restarts"] == 1
        # A crash loop backs off: a second kill right after the restart waits twice as long.
        os.kill(a.pid or 0, signal.SIGKILL)
        assert wait_for(lambda: supervisor.states["a"].restarts == 2, 10)
        assert "restart_in_s=0.6" in out.getvalue()
    finally:
        supervisor.stop()
        thread.join(timeout=20)
    assert not thread.is_alive()
    assert all(s.state == "stopped" and s.pid is None for s in supervisor.states.values())
    with pytest.raises(ProcessLookupError):
        os.kill(b_pid, 0)


STUBBORN = (
    f"exec {sys.executable} -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    f' print("up", flush=True); time.sleep(300)\''
)


def test_added_processes_run_and_removed_ones_stop_for_good(tmp_path: Path) -> None:
    out = io.StringIO()
    supervisor = Supervisor(
        {"a": SLEEPER}, cwd=tmp_path, state_dir=tmp_path, stop_timeout_s=2, out=out
    )
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        supervisor.add("a+1", SLEEPER)
        supervisor.add("a+2", STUBBORN)  # ignores SIGTERM: killed after stop_timeout_s
        with pytest.raises(ValueError, match="already exists"):
            supervisor.add("a+1", SLEEPER)
        assert wait_for(lambda: len(supervisor.states) == 3, 10)
        assert wait_for(lambda: all(s.state == "running" for s in supervisor.states.values()), 10)
        pids = {name: state.pid for name, state in supervisor.states.items()}
        supervisor.remove("a+1")
        supervisor.remove("a+2")
        assert wait_for(lambda: list(supervisor.states) == ["a"], 15), out.getvalue()
        for name in ("a+1", "a+2"):
            with pytest.raises(ProcessLookupError):
                os.kill(pids[name] or 0, 0)
        time.sleep(1.5)  # not restarted
        assert list(supervisor.states) == ["a"] and supervisor.states["a"].pid == pids["a"]
        log = out.getvalue()
        assert "process.removed name=a+1 exit_code=-15" in log
        assert "process.removed name=a+2 exit_code=-9" in log
    finally:
        supervisor.stop()
        thread.join(timeout=20)


def test_procfile_parsing() -> None:
    text = "# comment\n\napi: ragstream api\nr2: X=1 ragstream worker retrieval\n"
    assert parse_procfile(text) == {"api": "ragstream api", "r2": "X=1 ragstream worker retrieval"}
    with pytest.raises(ValueError, match="twice"):
        parse_procfile("a: x\na: y\n")
    with pytest.raises(ValueError, match="not a Procfile line"):
        parse_procfile("no command here\n")


def test_sigterm_stops_the_supervisor_and_every_process(tmp_path: Path) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"one: {SLEEPER}\ntwo: X=1 {SLEEPER.removeprefix('exec ')}\n")
    args = ["--procfile", str(procfile), "--state-dir", str(tmp_path), "--cwd", str(tmp_path)]
    with (tmp_path / "out.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "entry.supervisor", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        )

        def pids() -> list[int]:
            state = read_state(tmp_path) or {}
            procs = state.get("processes")
            found = [p.get("pid") for p in procs.values()] if isinstance(procs, dict) else []
            return [p for p in found if isinstance(p, int)]

        try:
            assert wait_for(lambda: len(pids()) == 2, 20), (tmp_path / "out.log").read_text()
            children = pids()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert "supervisor.stopped" in (tmp_path / "out.log").read_text()
