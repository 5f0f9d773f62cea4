"""Process and port helpers: PID files, liveness, port owners, detached spawn, stop.

Everything here is Linux-specific (it reads ``/proc``), like the services themselves.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from infra.errors import InfraError

log = structlog.get_logger(__name__)

#: Runs ``"$@"`` in the background with its output appended to ``$1`` and prints its PID.
#: The started process is re-parented to init when the shell exits, so it is never a child
#: (or a zombie) of the Python process that called :func:`spawn_detached`.
_SPAWN_SCRIPT = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'

#: TCP state code for LISTEN in ``/proc/net/tcp``.
_TCP_LISTEN = "0A"


def cmdline(pid: int) -> str:
    """Return the command line of ``pid`` with NULs as spaces, or ``""`` if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def is_alive(pid: int, marker: str | None = None) -> bool:
    """Tell whether ``pid`` is a live (non-zombie) process.

    Args:
        pid: Process id.
        marker: When given, the process only counts if its command line contains this
            substring; this guards against a PID file that names a recycled PID.

    Returns:
        ``True`` if the process exists, is not a zombie and matches ``marker``.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # Field 3 (after the parenthesised command name) is the state; Z and X are dead.
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state in ("Z", "X"):
        return False
    return marker is None or marker in cmdline(pid)


def read_pid(pid_file: Path) -> int | None:
    """Return the PID stored on the first line of ``pid_file``, or ``None``."""
    try:
        first = pid_file.read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def write_pid(pid_file: Path, pid: int) -> None:
    """Write ``pid`` to ``pid_file``, creating its folder."""
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{pid}\n")


def port_in_use(host: str, port: int) -> bool:
    """Tell whether ``host:port`` cannot be bound because something already holds it.

    A bind test (with ``SO_REUSEADDR``, so TIME_WAIT leftovers do not count) also catches a
    listener on the wildcard address.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Tell whether a TCP connect to ``host:port`` succeeds within ``timeout_s`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            next(fh, None)
            for line in fh:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == _TCP_LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                    inodes.add(inode)
    return inodes


def port_owners(port: int) -> dict[int, str]:
    """Find the processes that listen on TCP ``port``.

    Returns:
        ``{pid: command line}``; empty when nobody listens or the sockets belong to
        processes this user cannot inspect.
    """
    inodes = _listening_inodes(port)
    if not inodes:
        return {}
    wanted = {f"socket:[{inode}]" for inode in inodes}
    owners: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        owners[int(proc.name)] = " ".join(cmdline(int(proc.name)).split())[:120]
                        break
    return owners


def spawn_detached(
    argv: Sequence[str],
    log_file: Path,
    *,
    env: Mapping[str, str],
    cwd: Path,
    user: str | None = None,
) -> int:
    """Start ``argv`` detached from this process, in a new session, output to ``log_file``.

    Args:
        argv: Program and arguments (no shell parsing happens).
        log_file: stdout and stderr are appended here.
        env: The complete environment of the new process.
        cwd: Working directory.
        user: Run as this user (and its primary group, no supplementary groups); needs root.

    Returns:
        PID of the started program (not of a wrapper).

    Raises:
        InfraError: The wrapper shell failed or printed no PID.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    group = None
    extra_groups: list[int] | None = None
    if user is not None:
        group = pwd.getpwnam(user).pw_gid
        extra_groups = []
    done = subprocess.run(
        ["/bin/sh", "-c", _SPAWN_SCRIPT, "sh", str(log_file), *argv],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
        user=user,
        group=group,
        extra_groups=extra_groups,
        check=False,
    )
    out = done.stdout.strip()
    if done.returncode != 0 or not out.isdigit():
        raise InfraError(f"could not start {argv[0]}: {done.stderr.strip() or out}")
    return int(out)


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Poll until ``pid`` has exited; return ``False`` if it is still alive at the timeout."""
    deadline = time.monotonic() + timeout_s
    while is_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def terminate(pid: int, *, name: str, timeout_s: float = 30.0, sig: int = signal.SIGTERM) -> None:
    """Stop ``pid``: send ``sig`` (SIGTERM), wait up to ``timeout_s`` seconds, then SIGKILL.

    Args:
        pid: Process to stop; a PID that is already gone is fine.
        name: Service name, for the log.
        timeout_s: Grace period before SIGKILL, in seconds.
        sig: The polite signal (PostgreSQL wants SIGINT for a fast shutdown).
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
        if wait_gone(pid, timeout_s):
            log.info("service stopped", service=name, pid=pid)
            return
        log.warning("service ignored signal, killing", service=name, pid=pid, signal=int(sig))
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 10.0)


def file_size(path: Path) -> int:
    """Return the size of ``path`` in bytes, 0 if it does not exist."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tail(path: Path, lines: int = 30, start: int = 0) -> str:
    """Return the last ``lines`` lines of ``path`` written after byte offset ``start``.

    Args:
        path: A text log; a missing file gives ``""``.
        lines: How many lines at most.
        start: Ignore everything before this byte offset (the size before a launch).
    """
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size < start:  # rotated or truncated since: show its end
                start = 0
            fh.seek(max(start, size - 64 * 1024))
            data = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
