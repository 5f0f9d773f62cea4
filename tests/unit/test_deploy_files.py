"""The production deployment files parse, and every command they run exists in the CLI."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main
import yaml

from entry.cli import app
from ragstream.settings import PROJECT_ROOT

COMPOSE = PROJECT_ROOT / "infra" / "compose.yaml"
K8S_DIR = PROJECT_ROOT / "infra" / "k8s"
RAGSTREAM_IMAGE = "ragstream:latest"


def _resolve(args: list[str]) -> Any:
    """Walk the click command tree along ``args``; fail if a command or option is unknown."""
    command: Any = typer.main.get_command(app)
    rest = list(args)
    while hasattr(command, "commands") and rest:
        name = rest.pop(0)
        sub = command.commands.get(name)
        assert sub is not None, f"`ragstream {' '.join(args)}`: no command {name!r}"
        command = sub
    known = {opt for p in command.params for opt in getattr(p, "opts", [])}
    for token in rest:
        if token.startswith("--"):
            assert token.split("=")[0] in known, f"`ragstream {' '.join(args)}`: no {token}"
    return command


def _compose_commands() -> list[list[str]]:
    doc = yaml.safe_load(COMPOSE.read_text())
    commands = []
    for name, svc in doc["services"].items():
        if svc.get("image") == RAGSTREAM_IMAGE:
            assert "command" in svc, f"compose service {name} runs no command"
            commands.append(list(svc["command"]))
    return commands


def _k8s_commands() -> list[list[str]]:
    commands = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec: Any = doc.get("spec", {})
            pod = spec.get("template", {}).get("spec", {})
            for container in pod.get("containers", []):
                if container["image"] == RAGSTREAM_IMAGE:
                    commands.append(list(container["args"]))
    return commands


def test_compose_runs_every_component() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = set(doc["services"])
    needed = {"kafka", "elasticsearch", "redis", "postgres", "api", "celery-worker", "flower"}
    assert needed <= services
    pools = {c[1] for c in _compose_commands() if c[0] == "worker"}
    assert {"ingest", "retrieval", "rerank", "generation-small", "generation-large"} <= pools
    assert "delivery" in pools


@pytest.mark.parametrize("args", _compose_commands() + _k8s_commands(), ids=" ".join)
def test_deployment_commands_exist_in_cli(args: list[str]) -> None:
    _resolve(args)


def test_resolver_rejects_unknown_commands() -> None:
    with pytest.raises(AssertionError, match="no command"):
        _resolve(["no-such-command"])
    with pytest.raises(AssertionError, match="no --bogus"):
        _resolve(["api", "--bogus", "1"])


def test_k8s_manifests_cover_the_same_processes_as_compose() -> None:
    compose = {tuple(c[:2]) if c[0] == "worker" else (c[0],) for c in _compose_commands()}
    k8s = {tuple(c[:2]) if c[0] == "worker" else (c[0],) for c in _k8s_commands()}
    assert compose == k8s
