"""Fetch artifacts from Maven Central with ``mvn`` and a small pom kept in ``infra/``.

The pom lists what to fetch; ``dependency:copy-dependencies`` copies the resolved files
(from ``~/.m2``, downloading what is missing) into a folder under ``.local/``. A marker
file records what was resolved, so a later run with the same inputs calls no ``mvn``.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from pathlib import Path

import structlog

from infra.errors import InfraError, InstallError
from infra.system import run

log = structlog.get_logger(__name__)

MARKER = ".resolved"


def copy_dependencies(pom: Path, output_dir: Path, properties: Mapping[str, str]) -> Path:
    """Resolve the dependencies of ``pom`` into ``output_dir`` once.

    Runs ``mvn -q -B -f POM dependency:copy-dependencies -DoutputDirectory=... -D<k>=<v>``
    into a temporary sibling folder and renames it into place, so an interrupted run never
    leaves a half-filled folder that looks complete.

    Args:
        pom: The pom whose ``<dependencies>`` to copy.
        output_dir: Destination folder (``.local/kafka/libs``, ...).
        properties: ``-D`` properties for Maven (``{"kafka.version": "4.1.1"}``).

    Returns:
        ``output_dir``.

    Raises:
        InstallError: ``mvn`` is missing or failed (the message holds its output).
    """
    key = _marker_text(pom, properties)
    marker = output_dir / MARKER
    if marker.is_file() and marker.read_text() == key:
        return output_dir
    if shutil.which("mvn") is None:
        raise InstallError("mvn is missing; install it with: apt-get install maven")
    staging = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    argv = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
        *(f"-D{name}={value}" for name, value in sorted(properties.items())),
    ]
    log.info("resolving from maven central", pom=str(pom), into=str(output_dir), **properties)
    try:
        run(argv, timeout_s=1800.0)
    except InfraError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InstallError(str(exc)) from exc
    (staging / MARKER).write_text(key)
    shutil.rmtree(output_dir, ignore_errors=True)
    staging.rename(output_dir)
    return output_dir


def _marker_text(pom: Path, properties: Mapping[str, str]) -> str:
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    props = " ".join(f"{name}={value}" for name, value in sorted(properties.items()))
    return f"pom={digest} {props}\n"
