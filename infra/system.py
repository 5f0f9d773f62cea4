"""Host-level steps: Debian packages, the unprivileged service user, folder ownership.

Elasticsearch and PostgreSQL refuse to run as root, and these machines run everything as
root, so both run as ``settings.infra.service_user`` (created here, ``useradd --system``).
When ``infra`` itself does not run as root, they simply run as the current user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import structlog

from infra.errors import InfraError, InstallError

log = structlog.get_logger(__name__)

#: apt and dpkg hold a global lock; services installing packages in parallel take turns.
_APT_LOCK = threading.Lock()
_USER_LOCK = threading.Lock()


def is_root() -> bool:
    """Tell whether this process runs as root (and so may install and switch users)."""
    return os.geteuid() == 0


def run(
    argv: Sequence[str],
    *,
    user: str | None = None,
    timeout_s: float = 600.0,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """Run a short command to completion and return its stdout.

    Args:
        argv: Program and arguments.
        user: Run as this user (primary group only); needs root.
        timeout_s: Kill the command after this many seconds.
        env: Full environment; ``None`` inherits this process's.
        cwd: Working directory.

    Returns:
        The command's stdout.

    Raises:
        InfraError: The command exited non-zero or timed out; the message holds its output.
    """
    group = pwd.getpwnam(user).pw_gid if user is not None else None
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"{argv[0]} timed out after {timeout_s:.0f}s") from exc
    if done.returncode != 0:
        output = (done.stderr.strip() or done.stdout.strip())[-4000:]
        raise InfraError(f"{' '.join(argv)} failed with exit code {done.returncode}:\n{output}")
    return done.stdout


def apt_install(package: str, binary: Path | str) -> None:
    """Install a Debian package unless ``binary`` already exists.

    Runs ``apt-get install -y PACKAGE``; if that fails (stale package lists), runs
    ``apt-get update`` and tries once more. Only the binary check is done when it exists.

    Args:
        package: Debian package name (``redis-server``, ``postgresql-15``).
        binary: Absolute path or command name that the package provides.

    Raises:
        InstallError: Not root, or apt failed twice.
    """
    if _has_binary(binary):
        return
    with _APT_LOCK:
        if _has_binary(binary):
            return
        if not is_root():
            raise InstallError(f"{binary} is missing; install it with: apt-get install {package}")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        log.info("installing debian package", package=package)
        install = ["apt-get", "install", "-y", "--no-install-recommends", package]
        try:
            run(install, env=env)
        except InfraError:
            run(["apt-get", "update"], env=env)
            try:
                run(install, env=env)
            except InfraError as exc:
                raise InstallError(str(exc)) from exc
    if not _has_binary(binary):
        raise InstallError(f"{package} is installed but {binary} is still missing")


def _has_binary(binary: Path | str) -> bool:
    path = Path(binary)
    if path.is_absolute():
        return os.access(path, os.X_OK)
    return shutil.which(str(binary)) is not None


def service_user(name: str) -> str | None:
    """Return the user that Elasticsearch and PostgreSQL must run as.

    As root, makes sure the system user ``name`` exists (``useradd --system``, idempotent)
    and returns it. As any other user, returns ``None``: run as yourself.

    Raises:
        InstallError: ``useradd`` failed.
    """
    if not is_root():
        return None
    with _USER_LOCK:
        try:
            pwd.getpwnam(name)
        except KeyError:
            log.info("creating service user", user=name)
            try:
                run(
                    [
                        "useradd",
                        "--system",
                        "--user-group",
                        "--no-create-home",
                        "--home-dir",
                        "/nonexistent",
                        "--shell",
                        "/usr/sbin/nologin",
                        name,
                    ]
                )
            except InfraError as exc:
                raise InstallError(str(exc)) from exc
    return name


def owned_dirs(user: str | None, *dirs: Path) -> None:
    """Create ``dirs`` and give them (not their contents) to ``user``; no-op for ``None``."""
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
        if user is not None:
            entry = pwd.getpwnam(user)
            if path.stat().st_uid != entry.pw_uid:
                os.chown(path, entry.pw_uid, entry.pw_gid)


def chown_tree(user: str | None, root: Path) -> None:
    """Give ``root`` and everything below it to ``user``; no-op for ``None``."""
    if user is None:
        return
    entry = pwd.getpwnam(user)
    os.chown(root, entry.pw_uid, entry.pw_gid)
    for folder, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(folder, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def ensure_reachable(user: str | None, path: Path) -> None:
    """Make sure ``user`` may traverse every parent folder of ``path``.

    A parent folder the current user owns that others cannot enter (``mktemp -d`` makes its
    folder 0700, so a checkout inside it) gets the execute bit for others, and only that
    (``o+x``: enter, not list), logged as ``folder_made_enterable``: what the error below
    tells the user to run.

    Raises:
        InfraError: A parent folder of another owner lacks the execute bit for ``user``; the
            message says which one and how to fix it.
    """
    if user is None:
        return
    entry = pwd.getpwnam(user)
    groups = {entry.pw_gid, *os.getgrouplist(user, entry.pw_gid)}
    for parent in reversed(path.resolve().parents):
        info = parent.stat()
        if info.st_uid == entry.pw_uid:
            ok = bool(info.st_mode & stat.S_IXUSR)
        elif info.st_gid in groups:
            ok = bool(info.st_mode & stat.S_IXGRP)
        else:
            ok = bool(info.st_mode & stat.S_IXOTH)
        if ok:
            continue
        if info.st_uid == os.geteuid():
            os.chmod(parent, stat.S_IMODE(info.st_mode) | stat.S_IXOTH)
            log.warning("folder_made_enterable", folder=str(parent), mode="o+x", user=user)
            continue
        raise InfraError(
            f"service user {user!r} cannot enter {parent} (needed for {path}); "
            f"run: chmod o+x {parent}"
        )


def user_env(user: str | None, home: Path, **extra: str) -> dict[str, str]:
    """Build a small, explicit environment for a service process.

    Args:
        user: The user the process runs as (``None``: the current user).
        home: Value for ``HOME`` (a folder the user can write, under ``.local/``).
        **extra: Additional variables.

    Returns:
        ``PATH``, ``HOME``, ``LANG``, ``USER`` plus ``extra``.
    """
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "USER": user or pwd.getpwuid(os.geteuid()).pw_name,
    }
    env.update(extra)
    return env
