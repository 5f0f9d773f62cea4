"""The Compose stack on podman: ``python -m infra.compose up|down|ps`` (``make compose-up``).

``infra/compose.yaml`` with the override ``infra/compose.local.yaml`` (the images ``make image``
builds), run by podman-compose on a podman bridge network of its own: the containers reach each
other by service name (aardvark-dns) and bind no host port but the API's and Flower's
(``API_HOST_PORT``, ``FLOWER_HOST_PORT``), so the stack runs beside the single-machine services.

Two things podman-compose 1.0.3 (Debian 12) and podman 4.3 without systemd leave out, done here:

- **Start order.** podman-compose ignores ``depends_on``'s conditions and podman runs no health
  check on its own (its timers are systemd units). :func:`up` starts the services wave by wave
  (:func:`waves`, the ``depends_on`` graph) and starts a wave only when the services it depends
  on meet their condition: ``service_healthy`` (``podman healthcheck run`` passes) or
  ``service_completed_successfully`` (the one-shot exited 0).
- **Profiles.** podman-compose starts every service; :func:`active` keeps those of the profiles
  enabled (``COMPOSE_PROFILES``, else ``infra/.env``'s), as Docker Compose does.

Podman uses the storage ``make image`` built into (``<infra.local_dir>/containers/storage``) and
Debian's ``runc`` (:func:`podman_wrapper`). Restart policies need no systemd: podman's cleanup
process restarts a container that exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.images import Engine
from ragstream.settings import PROJECT_ROOT, Settings, get_settings

FILES = (PROJECT_ROOT / "infra" / "compose.yaml", PROJECT_ROOT / "infra" / "compose.local.yaml")
ENV_FILE = PROJECT_ROOT / "infra" / ".env"
DEFAULT_PROJECT = "ragstream"
#: Seconds a service may take to become healthy (Elasticsearch on two busy cores: ~1-2 min).
HEALTH_TIMEOUT_S = 600.0
POLL_S = 3.0


class ComposeError(RuntimeError):
    """A service did not meet its condition, or the engine failed."""


def load(files: Sequence[Path] = FILES) -> dict[str, dict[str, Any]]:
    """The services of ``files``, later files' keys replacing earlier ones' per service (the
    keys this module reads: ``depends_on``, ``profiles``, ``deploy``, ``healthcheck``)."""
    services: dict[str, dict[str, Any]] = {}
    for path in files:
        doc = yaml.safe_load(path.read_text()) or {}
        for name, svc in (doc.get("services") or {}).items():
            services[name] = {**services.get(name, {}), **(svc or {})}
    return services


def default_profiles(env: Mapping[str, str] = os.environ, env_file: Path = ENV_FILE) -> set[str]:
    """``COMPOSE_PROFILES`` from ``env``, else from ``env_file`` (``infra/.env``: ``cpu``)."""
    raw = env.get("COMPOSE_PROFILES")
    if raw is None:
        lines = env_file.read_text().splitlines() if env_file.is_file() else []
        raw = next(
            (v for k, _, v in (ln.partition("=") for ln in lines) if k == "COMPOSE_PROFILES"), ""
        )
    return {p.strip() for p in raw.split(",") if p.strip()}


def active(services: Mapping[str, dict[str, Any]], profiles: set[str]) -> dict[str, dict[str, Any]]:
    """The services Compose starts with ``profiles``: those with no profile or one enabled."""
    return {
        name: svc
        for name, svc in services.items()
        if not svc.get("profiles") or set(svc["profiles"]) & profiles
    }


def dependencies(svc: Mapping[str, Any]) -> dict[str, str]:
    """``{service: condition}`` of ``depends_on`` (a list means ``service_started``)."""
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def waves(services: Mapping[str, dict[str, Any]]) -> list[list[str]]:
    """The services in start order: each wave depends only on earlier waves.

    Raises:
        ComposeError: a dependency is not among ``services``, or the graph has a cycle.
    """
    pending = {name: set(dependencies(svc)) for name, svc in services.items()}
    for name, deps in pending.items():
        if missing := deps - set(pending):
            raise ComposeError(f"{name} depends on {sorted(missing)}, not started")
    done: set[str] = set()
    order: list[list[str]] = []
    while pending:
        wave = sorted(name for name, deps in pending.items() if deps <= done)
        if not wave:
            raise ComposeError(f"depends_on has a cycle among {sorted(pending)}")
        order.append(wave)
        done |= set(wave)
        for name in wave:
            del pending[name]
    return order


def container_names(project: str, name: str, svc: Mapping[str, Any]) -> list[str]:
    """podman-compose 1.0.3's names: ``<project>_<service>_<n>``, one per replica."""
    replicas = int((svc.get("deploy") or {}).get("replicas", 1))
    return [f"{project}_{name}_{n}" for n in range(1, replicas + 1)]


def podman_wrapper(settings: Settings) -> tuple[Path, dict[str, str]]:
    """A ``podman`` that runs ``make image``'s engine (:class:`infra.images.Engine`: the storage
    under ``<infra.local_dir>/containers``, Debian's ``runc``, no default ulimit), for
    podman-compose's ``--podman-path``; return its path and environment.

    Flags, not ``CONTAINERS_STORAGE_CONF``: with the storage in a configuration file podman
    writes ``--storage-driver overlay`` into each container's exit command, and the cleanup
    process it runs when a container exits then failed to restart it (no restart policy worked;
    issue 38). With the flags the restart policy restarts a killed container at once.
    """
    engine = Engine.find(settings)
    path = settings.infra.local_dir / "containers" / "podman"
    path.write_text(f'#!/bin/sh\nexec {shlex.join(engine.argv)} "$@"\n')
    path.chmod(0o755)
    return path, dict(engine.env)


@dataclass(frozen=True)
class Stack:
    """One Compose project on podman: its name, files, and the engine's environment."""

    project: str
    env: dict[str, str]
    podman_path: Path
    #: ``<infra.local_dir>/compose/<project>``: the PostgreSQL password made for the stack.
    state_dir: Path | None = None
    files: tuple[Path, ...] = FILES

    @classmethod
    def create(cls, settings: Settings, project: str = DEFAULT_PROJECT) -> Stack:
        """The stack ``project`` with ``POSTGRES_PASSWORD`` from the environment, else one made
        on the first ``up`` and kept (0600) under ``<infra.local_dir>/compose/<project>/``.

        Raises:
            ComposeError: podman-compose is not installed.
        """
        if shutil.which("podman-compose") is None:
            raise ComposeError("podman-compose is missing: apt-get install podman-compose")
        podman_path, env = podman_wrapper(settings)
        state_dir = settings.infra.local_dir / "compose" / project
        if not env.get("POSTGRES_PASSWORD"):
            path = state_dir / "postgres_password"
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch(mode=0o600)
                path.write_text(secrets.token_urlsafe(24))
            env["POSTGRES_PASSWORD"] = path.read_text().strip()
        return cls(project, env, podman_path, state_dir)

    def compose(self, *args: str) -> None:
        """``podman-compose -p PROJECT -f ... ARGS``; its output (each ``podman`` command line,
        the environment and so ``POSTGRES_PASSWORD`` among them) is shown only on failure."""
        files = [a for path in self.files for a in ("-f", str(path))]
        argv = ["podman-compose", "--podman-path", str(self.podman_path), "-p", self.project]
        self._run([*argv, *files, *args], capture=True)

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``podman ARGS`` on the project's storage; output captured."""
        return self._run([str(self.podman_path), *args], capture=True, check=check)

    def _run(
        self, argv: list[str], *, capture: bool = False, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, env=self.env, capture_output=capture, text=True, check=False)
        if check and done.returncode != 0:
            output = (done.stdout or "")[-2000:] + (done.stderr or "")[-2000:]
            raise ComposeError(f"{' '.join(argv[:4])} ...: exit {done.returncode}\n{output}")
        return done

    def wait(self, name: str, condition: str, timeout_s: float = HEALTH_TIMEOUT_S) -> float:
        """Wait until container ``name`` meets ``condition``; return the seconds waited.

        Raises:
            ComposeError: it did not within ``timeout_s``, or a one-shot exited non-zero.
        """
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if condition == "service_completed_successfully":
                state = self.podman(
                    "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name
                )
                status, code = state.stdout.split()
                if status in {"exited", "stopped"}:  # podman 4.3: "stopped" once cleaned up
                    if code != "0":
                        raise ComposeError(f"{name} exited {code}:\n{self.logs(name)}")
                    return time.monotonic() - started
            elif condition == "service_healthy":
                if self.podman("healthcheck", "run", name, check=False).returncode == 0:
                    return time.monotonic() - started
            else:
                state = self.podman("inspect", "--format", "{{.State.Status}}", name)
                if state.stdout.strip() in {"running", "exited"}:
                    return time.monotonic() - started
            time.sleep(POLL_S)
        raise ComposeError(f"{name}: not {condition} after {timeout_s:.0f} s:\n{self.logs(name)}")

    def logs(self, name: str, tail: int = 30) -> str:
        """The last ``tail`` lines of container ``name``'s output."""
        done = self.podman("logs", "--tail", str(tail), name, check=False)
        return done.stdout + done.stderr

    def leftovers(self) -> list[str]:
        """Containers, volumes, networks and pods of this project that still exist."""
        label = f"label=io.podman.compose.project={self.project}"
        found = []
        for kind, argv in {
            "container": ("ps", "-a", "--filter", label, "--format", "{{.Names}}"),
            "volume": ("volume", "ls", "--filter", label, "--format", "{{.Name}}"),
            "network": ("network", "ls", "--filter", label, "--format", "{{.Name}}"),
            "pod": ("pod", "ps", "--filter", f"name=pod_{self.project}", "--format", "{{.Name}}"),
        }.items():
            found += [f"{kind} {line}" for line in self.podman(*argv).stdout.split()]
        return found


def up(stack: Stack, profiles: set[str] | None = None, log: Any = print) -> dict[str, float]:
    """Create the stack's active services (``podman-compose up --no-start``: network, volumes,
    containers), then start them in :func:`waves`, each wave once its dependencies meet their
    conditions, and wait for every health-checked service; return the seconds each wait took
    (``{service: s}``) and ``"total"``.

    podman-compose's own ``up SERVICE`` is not used per wave: 1.0.3 ignores ``--no-deps`` and
    would start the one-shots (``migrate``, ``topics``) again with every later wave.
    """
    started = time.monotonic()
    services = active(load(stack.files), default_profiles() if profiles is None else profiles)
    conditions: dict[str, str] = {}
    for svc in services.values():
        for dep, condition in dependencies(svc).items():
            if condition != "service_started":
                conditions[dep] = condition
    stack.compose("up", "--no-start", *services)
    seconds: dict[str, float] = {}
    for wave in waves(services):
        needed = {dep for name in wave for dep in dependencies(services[name])}
        for dep in sorted(needed & set(conditions)):
            if dep not in seconds:
                seconds[dep] = _wait_all(stack, dep, services[dep], conditions[dep])
                log(f"{dep}: {conditions[dep]} ({seconds[dep]:.0f} s)")
        log(f"starting {' '.join(wave)}")
        names = [c for name in wave for c in container_names(stack.project, name, services[name])]
        stack.podman("start", *names)
    for name, svc in services.items():
        if name not in seconds and svc.get("healthcheck"):
            seconds[name] = _wait_all(stack, name, svc, "service_healthy")
            log(f"{name}: service_healthy ({seconds[name]:.0f} s)")
    seconds["total"] = time.monotonic() - started
    return seconds


def _wait_all(stack: Stack, name: str, svc: Mapping[str, Any], condition: str) -> float:
    return max(stack.wait(c, condition) for c in container_names(stack.project, name, svc))


def down(stack: Stack) -> list[str]:
    """``podman-compose down -v``, then remove the project's network (1.0.3 leaves it) and the
    PostgreSQL password made for the stack; return what still exists (empty when nothing is
    left)."""
    stack.compose("down", "-v")
    if stack.state_dir is not None:  # the password of a database that is gone with its volume
        (stack.state_dir / "postgres_password").unlink(missing_ok=True)
    for line in stack.leftovers():
        kind, name = line.split(" ", 1)
        if kind == "network":
            stack.podman("network", "rm", name, check=False)
    return stack.leftovers()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m infra.compose up|down|ps [--project NAME]``."""
    parser = argparse.ArgumentParser(prog="python -m infra.compose", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "ps"])
    parser.add_argument("--project", default=DEFAULT_PROJECT)
    parser.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        type=Path,
        help="another override after compose.local.yaml (e.g. infra/compose.manuals.yaml)",
    )
    args = parser.parse_args(argv)
    stack = Stack.create(get_settings(), args.project)
    if args.file:
        stack = dataclasses.replace(stack, files=(*FILES, *(p.resolve() for p in args.file)))
    try:
        if args.command == "up":
            seconds = up(stack)
            print(f"up in {seconds['total']:.0f} s")
        elif args.command == "down":
            left = down(stack)
            for line in left:
                print(f"left behind: {line}", file=sys.stderr)
            return 1 if left else 0
        else:
            print(
                stack.podman(
                    "ps", "-a", "--filter", f"label=io.podman.compose.project={args.project}"
                ).stdout
            )
    except ComposeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
