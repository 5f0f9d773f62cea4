"""A supervisor for the single-machine stack: runs the Procfile, restarts what crashes.

``python -m entry.supervisor --procfile Procfile --state-dir .local/demo`` starts every
Procfile process (``name: command``, run by ``/bin/sh -c`` in its own session, so a signal
reaches the whole process group) and keeps it running: a process that exits, whatever its
status, is restarted after an exponential back-off (1 s doubling to 60 s; a process that ran
``reset_after_s`` (60 s) since its last start is restarted after the base delay again), and
the restart is logged. One crash never stops the other processes (honcho, used before, stops
every process when one dies; issue 15, item 4).

Every output line of a process goes to the supervisor's stdout prefixed with its name. The
state, ``{name: {pid, state, restarts, last_exit_code, ...}}``, is written to
``<state-dir>/supervisor.json`` on every change; ``ragstream demo status`` prints it.
SIGTERM/SIGINT: SIGTERM every process group, wait up to ``stop_timeout_s`` (30 s), SIGKILL
what is left, exit.

Processes can be added and removed while it runs (:meth:`Supervisor.add`,
:meth:`Supervisor.remove`, from any thread): a removed process gets SIGTERM (SIGKILL after
``stop_timeout_s``) and is not restarted. ``--autoscale`` adds and removes processes of the
Procfile's pools on their consumer groups' lag (``entry/autoscale.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from ragstream.retry import RetryPolicy

STATE_FILE = "supervisor.json"
POLL_S = 0.2


def parse_procfile(text: str) -> dict[str, str]:
    """``{name: command}`` of a Procfile's ``name: command`` lines (comments and blanks skipped).

    Raises:
        ValueError: a line without a name, or a name given twice.
    """
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, command = line.partition(":")
        name = name.strip()
        if not sep or not name or not command.strip():
            raise ValueError(f"not a Procfile line: {line!r}")
        if name in found:
            raise ValueError(f"process {name!r} defined twice")
        found[name] = command.strip()
    return found


@dataclass
class ProcessState:
    """What the supervisor knows of one process (written to ``supervisor.json``).

    ``state``: ``running``, ``backoff`` (exited, restart due at ``restart_at``, UNIX seconds),
    ``removing`` (SIGTERM sent by :meth:`Supervisor.remove`, SIGKILL at ``restart_at``) or
    ``stopped``. ``restarts`` counts restarts since the supervisor started.
    """

    command: str
    pid: int | None = None
    state: str = "stopped"
    restarts: int = 0
    started_at: float | None = None
    last_exit_code: int | None = None
    last_exit_at: float | None = None
    restart_at: float | None = None
    failures: int = field(default=0, repr=False)


class Supervisor:
    """Runs ``commands`` and restarts each one that exits, with back-off.

    Args:
        commands: ``{name: shell command}``.
        cwd: working directory of the processes.
        state_dir: where ``supervisor.json`` is written.
        env: environment of the processes (default: this one's).
        backoff: delays between restarts (default: 1 s doubling to 60 s, no jitter).
        reset_after_s: a process that ran this long is no longer counted as crash-looping.
        out: where the processes' prefixed output and the supervisor's log lines go.
    """

    def __init__(
        self,
        commands: dict[str, str],
        *,
        cwd: Path,
        state_dir: Path,
        env: dict[str, str] | None = None,
        backoff: RetryPolicy | None = None,
        reset_after_s: float = 60.0,
        stop_timeout_s: float = 30.0,
        out: IO[str] | None = None,
    ) -> None:
        self._cwd = cwd
        self._state_path = state_dir / STATE_FILE
        self._env = env
        self._backoff = backoff or RetryPolicy(
            max_attempts=2**31, base_ms=1000, cap_ms=60_000, jitter=False
        )
        self._reset_after_s = reset_after_s
        self._stop_timeout_s = stop_timeout_s
        self._out = out or sys.stdout
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._pumps: list[threading.Thread] = []
        #: ``(add|remove, name, command)`` asked from other threads, done by :meth:`step`.
        self._changes: list[tuple[str, str, str]] = []
        self.states = {name: ProcessState(command) for name, command in commands.items()}
        state_dir.mkdir(parents=True, exist_ok=True)

    # -- logging and state -------------------------------------------------------------------

    def log(self, event: str, **fields: object) -> None:
        """One ``supervisor | event key=value ...`` line."""
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        self._write(f"{time.strftime('%H:%M:%S')} supervisor | {event} {text}".rstrip())

    def _write(self, line: str) -> None:
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def _save(self) -> None:
        data = {
            "supervisor_pid": os.getpid(),
            "updated_at": time.time(),
            "processes": {name: asdict(s) for name, s in self.states.items()},
        }
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self._state_path)

    # -- processes ---------------------------------------------------------------------------

    def _start(self, name: str) -> None:
        state = self.states[name]
        proc = subprocess.Popen(
            ["/bin/sh", "-c", state.command],
            cwd=self._cwd,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._procs[name] = proc
        state.pid, state.state, state.started_at, state.restart_at = (
            proc.pid,
            "running",
            time.time(),
            None,
        )
        self._pumps = [p for p in self._pumps if p.is_alive()]
        pump = threading.Thread(target=self._pump, args=(name, proc), daemon=True)
        pump.start()
        self._pumps.append(pump)
        self.log("process.started", name=name, pid=proc.pid, restarts=state.restarts)

    def _pump(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for raw in proc.stdout:
                self._write(
                    f"{time.strftime('%H:%M:%S')} {name} | {raw.decode(errors='replace')}".rstrip()
                )

    def _reap(self, name: str, code: int) -> None:
        state = self.states[name]
        now = time.time()
        ran_s = now - (state.started_at or now)
        state.failures = 1 if ran_s >= self._reset_after_s else state.failures + 1
        delay_s = self._backoff.delay_ms(state.failures) / 1000
        state.pid, state.state, state.last_exit_code = None, "backoff", code
        state.last_exit_at, state.restart_at = now, now + delay_s
        self.log(
            "process.exited",
            name=name,
            exit_code=code,
            ran_s=round(ran_s, 1),
            restart_in_s=round(delay_s, 1),
            restarts=state.restarts,
        )

    def add(self, name: str, command: str) -> None:
        """Start ``command`` as process ``name`` at the next :meth:`step` (any thread).

        Raises:
            ValueError: ``name`` is already supervised.
        """
        with self._lock:
            if name in self.states or any(c[1] == name for c in self._changes if c[0] == "add"):
                raise ValueError(f"process {name!r} already exists")
            self._changes.append(("add", name, command))

    def remove(self, name: str) -> None:
        """Stop process ``name`` for good at the next :meth:`step` (any thread): SIGTERM to its
        group, SIGKILL after ``stop_timeout_s``; it is forgotten once it exited."""
        with self._lock:
            self._changes.append(("remove", name, ""))

    def _apply_changes(self) -> bool:
        with self._lock:
            changes, self._changes = self._changes, []
        for kind, name, command in changes:
            if kind == "add":
                self.states[name] = ProcessState(command)
                self._start(name)
                continue
            state = self.states.get(name)
            if state is None:
                continue
            proc = self._procs.get(name)
            if proc is None:  # waiting for a restart: nothing to stop
                del self.states[name]
                self.log("process.removed", name=name)
                continue
            state.state, state.restart_at = "removing", time.time() + self._stop_timeout_s
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            self.log("process.removing", name=name, pid=proc.pid)
        return bool(changes)

    def step(self) -> None:
        """Apply added and removed processes, reap exited ones and restart those whose
        back-off is over."""
        changed = self._apply_changes()
        for name, proc in list(self._procs.items()):
            code = proc.poll()
            if code is not None:
                del self._procs[name]
                if self.states[name].state == "removing":
                    del self.states[name]
                    self.log("process.removed", name=name, exit_code=code)
                else:
                    self._reap(name, code)
                changed = True
        now = time.time()
        for name, state in self.states.items():
            if (
                state.state == "removing"
                and state.restart_at is not None
                and now >= state.restart_at
            ):
                state.restart_at = None
                lingering = self._procs.get(name)
                if lingering is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(lingering.pid, signal.SIGKILL)
        for name, state in self.states.items():
            if (
                state.state == "backoff"
                and state.restart_at is not None
                and now >= state.restart_at
            ):
                state.restarts += 1
                self._start(name)
                changed = True
        if changed:
            self._save()

    def run(self) -> None:
        """Start everything, supervise until :meth:`stop`, then stop every process."""
        self.log("supervisor.started", pid=os.getpid(), processes=len(self.states))
        for name in self.states:
            self._start(name)
        self._save()
        try:
            while not self._stopping.wait(POLL_S):
                self.step()
        finally:
            self._stop_all()

    def stop(self, *_: object) -> None:
        """Ask :meth:`run` to stop every process and return (safe from a signal handler)."""
        self._stopping.set()

    def _stop_all(self) -> None:
        for proc in self._procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout_s
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self._procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for pump in self._pumps:  # the pipes close once every process is gone
            pump.join(timeout=5)
        for state in self.states.values():
            state.pid, state.state, state.restart_at = None, "stopped", None
        self._procs.clear()
        self._save()
        self.log("supervisor.stopped")


def read_state(state_dir: Path) -> dict[str, object] | None:
    """The last ``supervisor.json`` written in ``state_dir``, or ``None``."""
    path = state_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def main(argv: list[str] | None = None) -> None:
    """``python -m entry.supervisor --procfile P --state-dir D [--cwd C]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procfile", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--cwd", type=Path, default=Path.cwd())
    parser.add_argument(
        "--autoscale",
        action="store_true",
        help="add and remove pool processes on their consumer groups' lag (settings.scaling)",
    )
    args = parser.parse_args(argv)
    commands = parse_procfile(args.procfile.read_text(encoding="utf-8"))
    supervisor = Supervisor(commands, cwd=args.cwd, state_dir=args.state_dir)
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, supervisor.stop)
    scaler = None
    if args.autoscale:
        from entry.autoscale import lag_autoscaler

        scaler = lag_autoscaler(supervisor, commands)
        threading.Thread(target=scaler.run, name="autoscale", daemon=True).start()
    try:
        supervisor.run()
    finally:
        if scaler is not None:
            scaler.stop()


if __name__ == "__main__":
    main()
