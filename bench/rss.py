"""``ragstream bench rss``: resident memory of every process of the running stack.

What is measured, found from the files the stack writes under ``settings.infra.local_dir``:

- **services**: each ``<local_dir>/<service>/run/<name>.pid`` (Redis, Kafka, Elasticsearch,
  the llama.cpp server, extra LLM servers ``llm-<port>``), as ``infra/`` writes them
  (:attr:`infra.service.Service.pid_file`), and PostgreSQL's ``postgres/data/postmaster.pid``;
- **processes**: each running entry of ``<local_dir>/demo/supervisor.json``, the state the
  demo's supervisor writes for the ``Procfile`` processes (:mod:`entry.supervisor`), plus the
  supervisor itself from ``<local_dir>/demo/supervisor.pid``.

Each row is a process *tree*: the PID and all its descendants (a Procfile entry is
``/bin/sh -c ...`` and the Python process it runs, a Celery worker has its prefork children,
Elasticsearch its native ``controller``). The supervisor's row counts the supervisor alone,
since its descendants are the Procfile rows. The trees are disjoint, so the total is their sum.

RSS (resident set size) counts shared pages once per process that maps them; PSS
(proportional set size, from ``/proc/<pid>/smaps_rollup``) splits each shared page between
the processes that map it, so the PSS total is the stack's real share of the machine's
memory. Both are in bytes; PSS is ``None`` where the kernel does not let us read it.

(``bench`` may not import ``infra`` or ``entry``, so the two file layouts are named here;
``tests/unit/test_bench_rss.py`` checks them against those packages.)
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from rich.table import Table

#: The demo supervisor's folder, state file and PID file under ``local_dir``
#: (``entry.demo._state_dir``, ``entry.supervisor.STATE_FILE``, ``entry.demo.PID_FILE``).
DEMO_DIR = "demo"
SUPERVISOR_STATE = "supervisor.json"
SUPERVISOR_PID = "supervisor.pid"
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class TreeMemory:
    """Memory of one process tree.

    Attributes:
        kind: ``service`` (under ``infra/``) or ``process`` (the supervisor's Procfile).
        name: Service folder (``elasticsearch``, ``llm-8082``) or Procfile name (``rerank``).
        pid: Root PID of the tree.
        processes: Number of live processes in the tree (the root included).
        rss_bytes: Summed RSS of the tree, bytes.
        pss_bytes: Summed PSS of the tree, bytes; ``None`` when unreadable.
        command: The root's command line, cut to 120 characters.
    """

    kind: str
    name: str
    pid: int
    processes: int
    rss_bytes: int
    pss_bytes: int | None
    command: str


#: PID files of the services, relative to ``local_dir``: ``infra``'s own, then PostgreSQL's
#: ``postmaster.pid`` (its data folder's; the PID is its first line).
SERVICE_PID_FILES = ("*/run/*.pid", "*/data/postmaster.pid")


def _read_pid(path: Path) -> int | None:
    """The PID on the first line of ``path`` (digits only), or ``None``."""
    try:
        lines = path.read_text().split("\n", 1)
    except OSError:
        return None
    text = lines[0].strip()
    return int(text) if text.isdigit() and int(text) > 1 else None


def find_roots(local_dir: Path) -> list[tuple[str, str, int]]:
    """``(kind, name, pid)`` of every tree to measure, services first, then the Procfile.

    Args:
        local_dir: ``settings.infra.local_dir``.

    Returns:
        The roots whose PID files or supervisor state name a PID; dead PIDs are kept here
        and dropped by :func:`measure_tree`.
    """
    roots: list[tuple[str, str, int]] = []
    pid_files = [path for pattern in SERVICE_PID_FILES for path in local_dir.glob(pattern)]
    for pid_file in sorted(pid_files):
        pid = _read_pid(pid_file)
        if pid is not None:
            roots.append(("service", pid_file.parent.parent.name, pid))
    demo = local_dir / DEMO_DIR
    supervisor = _read_pid(demo / SUPERVISOR_PID)
    if supervisor is not None:
        roots.append(("process", "supervisor", supervisor))
    try:
        state = json.loads((demo / SUPERVISOR_STATE).read_text())
    except (OSError, ValueError):
        state = {}
    processes: dict[str, dict[str, Any]] = state.get("processes") or {}
    for name, entry in processes.items():
        pid = entry.get("pid")
        if isinstance(pid, int) and entry.get("state") == "running":
            roots.append(("process", name, pid))
    return roots


def _memory(process: psutil.Process) -> tuple[int, int | None]:
    """``(rss, pss)`` of one process in bytes (PSS ``None`` when unreadable)."""
    try:
        full = process.memory_full_info()
    except psutil.AccessDenied:
        return process.memory_info().rss, None
    return full.rss, getattr(full, "pss", None)


def measure_tree(kind: str, name: str, pid: int, *, recursive: bool = True) -> TreeMemory | None:
    """Sum the memory of ``pid`` and (``recursive``) its descendants.

    Args:
        kind: Row kind (``service`` or ``process``).
        name: Row name.
        pid: Root PID.
        recursive: Include the descendants.

    Returns:
        The tree's memory, or ``None`` when the root is gone or a zombie.
    """
    try:
        root = psutil.Process(pid)
        if root.status() == psutil.STATUS_ZOMBIE:
            return None
        command = " ".join(root.cmdline())[:120]
        members = [root, *(root.children(recursive=True) if recursive else [])]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    rss, pss, alive = 0, 0, 0
    pss_known = True
    for member in members:
        try:
            member_rss, member_pss = _memory(member)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        alive += 1
        rss += member_rss
        if member_pss is None:
            pss_known = False
        else:
            pss += member_pss
    return TreeMemory(kind, name, pid, alive, rss, pss if pss_known else None, command)


def measure_stack(local_dir: Path) -> list[TreeMemory]:
    """Measure every tree :func:`find_roots` names (the supervisor alone, not its tree).

    Args:
        local_dir: ``settings.infra.local_dir``.

    Returns:
        One row per live root, in :func:`find_roots` order.
    """
    rows = []
    for kind, name, pid in find_roots(local_dir):
        row = measure_tree(kind, name, pid, recursive=name != "supervisor")
        if row is not None:
            rows.append(row)
    return rows


def payload(rows: list[TreeMemory], label: str | None = None) -> dict[str, Any]:
    """The JSON document of one measurement: rows, totals (bytes) and the host's memory."""
    vm = psutil.virtual_memory()
    pss = [r.pss_bytes for r in rows]
    return {
        "bench": "rss",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "label": label,
        "rows": [asdict(r) for r in rows],
        "total_rss_bytes": sum(r.rss_bytes for r in rows),
        "total_pss_bytes": None if None in pss else sum(p or 0 for p in pss),
        "host": {"total_bytes": vm.total, "available_bytes": vm.available},
    }


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:,.0f}"


def render(document: dict[str, Any]) -> Table:
    """A table (fits 80 columns) of one :func:`payload`: a row per tree and the total."""
    title = "RSS of the running stack" + (f" ({document['label']})" if document["label"] else "")
    table = Table(title=title)
    table.add_column("kind")
    table.add_column("name")
    for column in ("pid", "procs", "RSS MiB", "PSS MiB"):
        table.add_column(column, justify="right")
    for row in document["rows"]:
        table.add_row(
            row["kind"],
            row["name"],
            str(row["pid"]),
            str(row["processes"]),
            _mib(row["rss_bytes"]),
            _mib(row["pss_bytes"]),
        )
    table.add_section()
    table.add_row(
        "total",
        f"{len(document['rows'])} trees",
        "",
        str(sum(r["processes"] for r in document["rows"])),
        _mib(document["total_rss_bytes"]),
        _mib(document["total_pss_bytes"]),
    )
    return table
