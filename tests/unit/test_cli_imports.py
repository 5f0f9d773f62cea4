"""The CLI's help is cheap: ``ragstream --help`` (and a group's ``--help``) imports no heavy
library, because nearly all of a command's start-up was import time (1.2-1.5 s a command on
2026-12-01, issue 26). Commands import their clients, models and the settings tree inside the
command; the modules that hold the typer apps import typer, rich and the standard library.

Each case runs in a fresh interpreter (``sys.modules`` of this test process is full already) and
asserts on what it imported, not on a time, so it does not flake on a busy machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

#: Libraries no help text needs: the service clients, the model runtimes, the web stack, the SQL
#: stack, and the settings tree (pydantic-settings and pydantic itself, about a third of the
#: old start-up). Top-level package names as they appear in ``sys.modules``.
HEAVY = (
    "numpy",
    "onnxruntime",
    "tokenizers",
    "torch",
    "elasticsearch",
    "kafka",
    "redis",
    "celery",
    "httpx",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "opentelemetry",
    "prometheus_client",
    "structlog",
    "psutil",
    "pydantic",
    "pydantic_settings",
)

_PROBE = """
import json, sys
sys.argv = ["ragstream", *{argv!r}]
from entry.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stdout.flush()
sys.stderr.write(json.dumps({{"code": code, "modules": sorted(sys.modules)}}) + "\\n")
"""


def _help_imports(*argv: str) -> tuple[int, str, set[str]]:
    """Run ``ragstream ARGV`` in a fresh interpreter: its exit code, its stdout, and the
    top-level names of every module it imported."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(argv=list(argv))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], done.stdout, {m.split(".")[0] for m in report["modules"]}


def test_root_help_lists_every_group_and_imports_nothing_heavy() -> None:
    code, out, modules = _help_imports("--help")
    assert code == 0
    for group in ("infra", "topics", "dlq", "bench", "jobs", "index", "ingest", "eval", "keys",
                  "query", "demo", "db", "health", "api", "worker"):  # fmt: skip
        assert f" {group} " in out, group
    assert sorted(modules & set(HEAVY)) == []


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "query", "--help"),
        ("infra", "--help"),
        ("query", "--help"),
        ("jobs", "list", "--help"),
        ("keys", "--help"),
        ("demo", "--help"),
        ("dlq", "replay", "--help"),
        ("eval", "--help"),
    ],
    ids=" ".join,
)
def test_a_command_help_imports_no_client_model_or_web_stack(argv: tuple[str, ...]) -> None:
    """Below the root, the callback configures logging (settings and structlog are fair
    there); clients, models, the web and SQL stacks still wait for the command itself."""
    code, out, modules = _help_imports(*argv)
    assert code == 0
    assert "Usage" in out
    allowed_below_root = {"pydantic", "pydantic_settings", "structlog"}
    assert sorted(modules & (set(HEAVY) - allowed_below_root)) == []


#: Run before :data:`_PROBE`: the first socket connection reports the modules imported so far
#: and ends the process, so the command never reaches a broker.
_AT_FIRST_CONNECT = """
import json, os, socket, sys
def _report(*_args, **_kwargs):
    sys.stderr.write(json.dumps({{"code": "connect", "modules": sorted(sys.modules)}}) + "\\n")
    sys.stderr.flush()
    os._exit(0)
socket.socket.connect = _report
socket.socket.connect_ex = _report
"""


#: Per ``ragstream query`` path: its argv, its client module (and the Kafka path's wait handle,
#: which must be loaded before the first connection too), and the heavy libraries it may load
#: besides the settings tree and structlog.
QUERY_PATHS = {
    "kafka": (("query", "x y?"), "entry.kafka_client api.asked", {"kafka", "opentelemetry"}),
    "http": (
        ("query", "x y?", "--api", "http://127.0.0.1:9", "--api-key", "k"),
        "entry.client",
        {"httpx"},
    ),
}


@pytest.mark.parametrize("path", sorted(QUERY_PATHS))
def test_query_reaches_its_server_with_its_client_and_the_models_only(path: str) -> None:
    """``ragstream query "..."`` (issue 37): by its first connection (the Kafka client's
    bootstrap, or the HTTP request with ``--api``) it has imported its client, the settings and
    the models, and none of the other client, the web or SQL stack, Redis or numpy. At
    c738b43 the Kafka path had imported httpx, FastAPI, SQLAlchemy and Alembic by then (the HTTP
    client module, the API's pagination and webhook models, the SQL models), and Redis, numpy
    and prometheus_client after it (the API's query service, for the wait handle); the numbers
    are in docs/benchmarks/index.md (CLI start-up). Nothing listens on port 9, so a patch that
    failed to fire could not reach a server.
    """
    argv, client, allowed = QUERY_PATHS[path]
    done = subprocess.run(
        [sys.executable, "-c", (_AT_FIRST_CONNECT + _PROBE).format(argv=list(argv))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9"},
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == "connect", done.stderr[-2000:]
    full = set(report["modules"])
    assert {*client.split(), "api.models", "topics.queries"} <= full
    modules = {m.split(".")[0] for m in full}
    allowed |= {"pydantic", "pydantic_settings", "structlog"}
    assert sorted(modules & (set(HEAVY) - allowed)) == []
    other = {"entry.client", "entry.kafka_client"} - set(client.split())
    assert sorted(full & {*other, "api.querying", "api.errors", "ragstream.db"}) == []
