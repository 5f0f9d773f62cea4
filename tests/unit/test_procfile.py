"""The Procfile that ``ragstream demo run`` starts: every pool runs, and no two processes
share a metrics port."""

from __future__ import annotations

from pathlib import Path

from entry.demo import PROCFILE, procfile_metrics_ports
from ragstream.settings import POOL_DEFAULTS


def _processes() -> dict[str, str]:
    out = {}
    for line in PROCFILE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            out[name.strip()] = command.strip()
    return out


def test_every_query_pool_runs_and_retrieval_runs_twice() -> None:
    commands = list(_processes().values())
    for pool in ("ingest", "rerank", "generation-small", "generation-large", "delivery"):
        assert sum(c.endswith(f"worker {pool}") for c in commands) == 1
    assert sum(c.endswith("worker retrieval") for c in commands) == 2


def test_metrics_ports_of_the_procfile_are_distinct() -> None:
    own = procfile_metrics_ports()
    assert own == {"retrieval-2": 9107}
    defaults = [d["metrics_port"] for d in POOL_DEFAULTS.values() if "metrics_port" in d]
    ports = defaults + list(own.values())
    assert len(ports) == len(set(ports))


def test_procfile_ports_ignore_comments(tmp_path: Path) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "# x: RAGSTREAM_POOLS__RERANK__METRICS_PORT=1\n"
        "a: ragstream worker rerank\n"
        "b: RAGSTREAM_POOLS__RERANK__METRICS_PORT=9200 ragstream worker rerank\n"
    )
    assert procfile_metrics_ports(procfile) == {"b": 9200}
