"""Container images of ragstream and its services, from one definition (``infra/Dockerfile``).

``python -m infra.images build`` (``make image``) stages a build context under
``<infra.local_dir>/images/context`` and builds one image per target of the Dockerfile:

- ``kafka/``: the jars ``infra/kafka/pom.xml`` resolves (``.local/kafka/libs``), its
  ``log4j2.xml``, and the ``server.properties`` :class:`~infra.kafka_service.KafkaService`
  writes, rendered for the container (listeners on all addresses, the advertised host filled in
  by the entrypoint, data under ``/var/lib/ragstream``);
- ``elasticsearch/``: the integ-test zip of ``infra/elasticsearch/pom.xml`` and the
  ``elasticsearch.yml`` of :class:`~infra.elasticsearch_service.ElasticsearchService`;
- ``redis/``, ``postgres/``: the configuration :mod:`infra.redis_service` and
  :mod:`infra.postgres_service` write;
- ``wheels/``: ragstream's wheel and every dependency pinned to the checkout's virtualenv
  (``pip freeze``), so the image runs the versions the tests ran; ``app/``: ``alembic.ini``
  and the ``Procfile``; ``models/``: the default GGUF and ONNX embedding models as
  ``ragstream infra models install --embedding`` assembles them (sha256-checked).

The base is a build argument: the public ``python:3.11-slim-bookworm`` / ``debian:bookworm-slim``
(``--base public``), or ``--base local``: a Debian bookworm made with ``debootstrap
--variant=minbase`` from the host's Debian mirror and ``podman import``-ed, where no registry
can be reached. Podman keeps its storage under ``<infra.local_dir>/containers``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from infra.elasticsearch_service import ASSETS as ES_ASSETS
from infra.elasticsearch_service import ElasticsearchService
from infra.kafka_service import _JVM_FLAGS, KafkaService
from infra.kafka_service import ASSETS as KAFKA_ASSETS
from infra.maven import copy_dependencies
from infra.postgres_service import PostgresService
from infra.redis_service import RedisService
from ragstream.settings import PROJECT_ROOT, Settings, get_settings

#: Targets of ``infra/Dockerfile``, in build order; image ``ragstream`` or ``ragstream-<target>``.
TARGETS = ("kafka", "elasticsearch", "redis", "postgres", "ragstream")
DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile"
SCRIPTS = Path(__file__).resolve().parent / "container"
#: ``settings.infra.local_dir`` inside every image: data, logs and models live under it.
IMAGE_LOCAL_DIR = Path("/var/lib/ragstream")
#: Inside a container PostgreSQL listens on its usual port (the host's 5433 avoids a clash).
IMAGE_POSTGRES_PORT = 5432
#: Placeholder for the advertised host in Kafka's ``server.properties`` (the entrypoint's).
HOST_PLACEHOLDER = "__HOST__"
LOCAL_BASE = "localhost/debian-bookworm-min:latest"
PUBLIC_BASES = {
    "PYTHON_BASE": "docker.io/library/python:3.11-slim-bookworm",
    "DEBIAN_BASE": "docker.io/library/debian:bookworm-slim",
}
RUNC = Path("/usr/sbin/runc")
#: Python of Debian bookworm (the local base), besides the python:3.11 image's newer 3.11.
DEBIAN_PYTHON = "3.11.2"
#: What Debian's 3.11.2 needs besides: ``pip download --python-version`` does not evaluate
#: ``python_full_version`` markers against it (redis: ``async-timeout; python_full_version <
#: "3.11.3"``).
DEBIAN_EXTRA = ("async-timeout>=4.0.3",)
#: Podman's run-time state (locks, mounts): a fixed path, as podman stores it with its storage.
RUNROOT = Path("/var/tmp/ragstream-containers-run")  # noqa: S108 - root-owned, podman locks it


def image_name(target: str, tag: str = "latest") -> str:
    """``ragstream:TAG`` for the ragstream target, ``ragstream-<target>:TAG`` for a service."""
    return f"ragstream:{tag}" if target == "ragstream" else f"ragstream-{target}:{tag}"


def image_settings(settings: Settings) -> Settings:
    """The settings the services run with inside their images: listening on all addresses
    (the container's network is the boundary), files under :data:`IMAGE_LOCAL_DIR`,
    PostgreSQL on 5432; everything else (versions, heaps, Kafka's properties) unchanged."""
    infra = settings.infra.model_copy(
        update={
            "host": "0.0.0.0",
            "local_dir": IMAGE_LOCAL_DIR,
            "install_dir": None,
            "postgres_port": IMAGE_POSTGRES_PORT,
        }
    )
    return settings.model_copy(update={"infra": infra})


def render_configs(settings: Settings) -> dict[str, str]:
    """The services' configuration files for the images, from infra/'s own writers.

    Args:
        settings: The checkout's settings (:func:`image_settings` is applied here).

    Returns:
        ``{path in the build context: text}``.
    """
    inside = image_settings(settings)
    kafka = KafkaService(inside).server_properties()
    kafka = re.sub(
        r"^(advertised\.listeners|controller\.quorum\.bootstrap\.servers)=.*$",
        lambda m: m.group(0).replace("0.0.0.0", HOST_PLACEHOLDER),
        kafka,
        flags=re.MULTILINE,
    )
    heap_mb = settings.infra.kafka_heap_mb
    kafka_env = (
        "# settings.infra.kafka_heap_mb and infra/kafka_service.py's JVM flags (infra/images.py)\n"
        f': "${{KAFKA_HEAP_OPTS:=-Xms{heap_mb}m -Xmx{heap_mb}m}}"\n'
        f': "${{KAFKA_JVM_FLAGS:={" ".join(_JVM_FLAGS)}}}"\n'
    )
    es_heap = settings.infra.elasticsearch_heap_mb
    redis = (
        RedisService(inside)
        .redis_conf()
        .replace(
            "protected-mode yes",
            "# The container's network is the boundary, as in Redis's own image.\n"
            "protected-mode no",
        )
    )
    return {
        "kafka/server.properties": kafka,
        "kafka/jvm.env": kafka_env,
        "elasticsearch/elasticsearch.yml": ElasticsearchService(inside).elasticsearch_yml(),
        "elasticsearch/heap.options": f"-Xms{es_heap}m\n-Xmx{es_heap}m\n",
        "redis/redis.conf": redis,
        "postgres/postgres.conf": PostgresService(inside).ragstream_conf(),
    }


def _link(source: Path, target: Path) -> None:
    """Hard-link ``source`` (a file or a tree) to ``target``; copy across file systems."""
    if source.is_dir():
        shutil.copytree(source, target, copy_function=_link_file)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        _link_file(source, target)


def _link_file(source: str | Path, target: str | Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _models(settings: Settings) -> list[Path]:
    """Install (once) and return the default GGUF and the ONNX embedding model folder."""
    from infra import embedding_models, models
    from infra.llm_service import models_dir

    folder = models_dir(settings)
    gguf = models.install(models.get_model(settings.llm.model), folder)
    onnx = embedding_models.install(
        embedding_models.get_model(settings.embedding.onnx_model), folder
    )
    return [gguf, onnx]


def _wheelhouse(target: Path) -> None:
    """``pip wheel`` the checkout into ``target`` with the virtualenv's versions as constraints."""
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    target.mkdir(parents=True, exist_ok=True)
    constraints = target / "constraints.txt"
    constraints.write_text(freeze)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--wheel-dir",
            str(target),
            "--constraint",
            str(constraints),
            str(PROJECT_ROOT),
        ],
        check=True,
    )
    # Debian bookworm's Python is 3.11.2 (the local base): its own constraints, the
    # virtualenv's pins less those that need a newer 3.11 (soupsieve), and the wheels its
    # markers add (redis needs async-timeout below 3.11.3); binaries only, no build step.
    pins = freeze.splitlines()
    debian = target / f"constraints-{DEBIAN_PYTHON}.txt"
    for _ in range(len(pins)):
        debian.write_text("\n".join(pins) + "\n")
        done = subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(target)),
                *("--find-links", str(target), "--only-binary=:all:"),
                *("--python-version", DEBIAN_PYTHON, "--constraint", str(debian)),
                f"ragstream=={version('ragstream')}",
                *DEBIAN_EXTRA,
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        newer = re.search(r"Package '([^']+)' requires a different Python", done.stderr)
        if done.returncode == 0 or newer is None:
            break
        name = newer.group(1).lower().replace("_", "-")
        pins = [p for p in pins if p.split("==")[0].lower().replace("_", "-") != name]
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    (target / "digest.txt").write_text(wheelhouse_digest(target) + "\n")


def wheelhouse_digest(wheels: Path) -> str:
    """SHA-256 (hex) of what the image installs from ``wheels``: every wheel's file name (a
    dependency's version), the constraints files, and each ragstream wheel's ``RECORD`` (the
    sha256 of every file in it: the checkout's code, unlike the wheel's bytes, which carry
    timestamps).

    The Dockerfile copies it in before the install step: the wheelhouse is bound to that step
    (``RUN --mount=type=bind``), which is no part of the layer cache's key, so without it a
    changed checkout reused the cached install layer and the image ran the old code (issue 38).
    """
    digest = hashlib.sha256()
    for path in sorted(wheels.iterdir()):
        if path.suffix not in {".whl", ".txt"} or path.name == "digest.txt":
            continue
        digest.update(path.name.encode() + b"\0")
        if path.suffix == ".txt":
            digest.update(path.read_bytes())
        elif path.name.startswith("ragstream-"):
            with zipfile.ZipFile(path) as wheel:
                record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
                digest.update(wheel.read(record))
    return digest.hexdigest()


def stage(settings: Settings, context: Path, *, wheels: bool = True) -> Path:
    """Fill ``context`` with what every target of the Dockerfile copies; return it.

    The Kafka jars, the Elasticsearch zip and the models are installed first when missing
    (each a no-op when present), then hard-linked in.

    Raises:
        InstallError: an artifact could not be fetched.
        subprocess.CalledProcessError: ``pip wheel`` failed.
    """
    infra = settings.infra
    install_home = infra.install_dir or infra.local_dir
    libs = copy_dependencies(
        KAFKA_ASSETS / "pom.xml",
        install_home / "kafka" / "libs",
        {"kafka.version": infra.kafka_version},
    )
    dist = copy_dependencies(
        ES_ASSETS / "pom.xml",
        install_home / "elasticsearch" / "dist",
        {"elasticsearch.version": infra.elasticsearch_version},
    )
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    _link(libs, context / "kafka" / "libs")
    (context / "kafka" / "libs" / ".resolved").unlink(missing_ok=True)
    _link(KAFKA_ASSETS / "log4j2.xml", context / "kafka" / "log4j2.xml")
    _link(
        dist / f"elasticsearch-{infra.elasticsearch_version}.zip",
        context / "elasticsearch" / "dist.zip",
    )
    for script, folder in (
        ("kafka-entrypoint.sh", "kafka"),
        ("postgres-entrypoint.sh", "postgres"),
    ):
        _link(SCRIPTS / script, context / folder / script)
    for name, text in render_configs(settings).items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text(text)
    for path in _models(settings):
        _link(path, context / "models" / path.name)
    for name in ("alembic.ini", "Procfile"):
        _link(PROJECT_ROOT / name, context / "app" / name)
    if wheels:
        _wheelhouse(context / "wheels")
    else:
        (context / "wheels").mkdir()
    return context


@dataclass(frozen=True)
class Engine:
    """The container engine's command line: ``podman`` (storage under ``.local/containers``,
    Debian's ``runc`` when installed) or ``docker``."""

    argv: tuple[str, ...]
    env: dict[str, str]
    podman: bool

    @classmethod
    def find(cls, settings: Settings) -> Engine:
        """Podman if installed, else Docker when its daemon answers (``docker info``): a Docker
        command line with no daemon behind it (as on these machines) cannot build.

        Raises:
            SystemExit: no podman, and no docker whose daemon answers.
        """
        if shutil.which("podman"):
            store = settings.infra.local_dir / "containers"
            store.mkdir(parents=True, exist_ok=True)
            conf = store / "containers.conf"
            # Podman adds a nofile/nproc ulimit of its own that an unprivileged host refuses.
            conf.write_text("[containers]\ndefault_ulimits = []\n")
            argv = ["podman", "--root", str(store / "storage")]
            argv += ["--runroot", str(RUNROOT)]
            if RUNC.is_file():  # crun, podman's default, fails on these machines (issue 38)
                argv += ["--runtime", str(RUNC)]
            return cls(tuple(argv), {**os.environ, "CONTAINERS_CONF": str(conf)}, podman=True)
        if shutil.which("docker") and _answers(("docker", "info")):
            return cls(("docker",), dict(os.environ), podman=False)
        raise SystemExit(
            "make image needs podman, or docker with a running daemon (apt-get install podman runc)"
        )

    def run(self, *args: str, stdin: int | None = None, capture: bool = False) -> str:
        """Run the engine with ``args``; return stdout when ``capture``."""
        done = subprocess.run(
            [*self.argv, *args],
            env=self.env,
            check=True,
            stdin=stdin,
            capture_output=capture,
            text=True,
        )
        return done.stdout if capture else ""


def _answers(argv: tuple[str, ...]) -> bool:
    """Whether ``argv`` exits 0 within 30 s (its output is discarded)."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def local_base(settings: Settings, engine: Engine, *, mirror: str | None = None) -> str:
    """Make :data:`LOCAL_BASE` once: ``debootstrap --variant=minbase bookworm`` + import.

    Args:
        settings: ``infra.local_dir`` holds the root file system (``images/rootfs-bookworm``).
        engine: The engine to import into.
        mirror: Debian mirror; default the first of the host's apt sources.

    Returns:
        The image name.
    """
    if engine.run("images", "-q", LOCAL_BASE, capture=True).strip():
        return LOCAL_BASE
    mirror = mirror or apt_mirror()
    rootfs = settings.infra.local_dir / "images" / "rootfs-bookworm"
    if not (rootfs / "etc" / "debian_version").is_file():
        shutil.rmtree(rootfs, ignore_errors=True)
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), mirror], check=True
        )
    security = mirror.rstrip("/") + "-security"
    (rootfs / "etc" / "apt" / "sources.list").write_text(
        f"deb {mirror} bookworm main\ndeb {mirror} bookworm-updates main\n"
        f"deb {security} bookworm-security main\n"
    )
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (rootfs / junk).glob("*"):
            if item.is_file():
                item.unlink()
    # debootstrap left the host's /proc mounted in the root file system here, and tar copied it
    # (51 MB: the host's processes, their command lines and environments) into the base and so
    # into every image (issue 38): unmount it, and archive the root file system's own files only.
    for mount in ("proc", "sys", "dev/pts"):
        if os.path.ismount(rootfs / mount):
            subprocess.run(["umount", "--lazy", str(rootfs / mount)], check=True)
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--one-file-system", "-c", "."], stdout=subprocess.PIPE
    )
    engine.run("import", "-", LOCAL_BASE, stdin=tar.stdout.fileno() if tar.stdout else None)
    tar.wait()
    return LOCAL_BASE


def apt_mirror() -> str:
    """The first ``URIs:``/``deb`` mirror of the host's apt sources (deb.debian.org if none)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            match = re.match(r"^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", line.strip())
            if match and "security" not in match.group(1):
                return match.group(1)
    return "http://deb.debian.org/debian"


def build(
    settings: Settings,
    targets: Sequence[str] = TARGETS,
    *,
    base: str = "public",
    tag: str = "latest",
    wheels: bool = True,
) -> list[dict[str, object]]:
    """Stage the context and build ``targets``; return one row per image (name, seconds, size).

    The rows are also written to ``<infra.local_dir>/images/report.json``.
    """
    engine = Engine.find(settings)
    bases = dict(PUBLIC_BASES)
    if base == "local":
        bases = dict.fromkeys(PUBLIC_BASES, local_base(settings, engine))
    started = time.monotonic()
    context = stage(settings, settings.infra.local_dir / "images" / "context", wheels=wheels)
    rows: list[dict[str, object]] = [
        {"image": "(staging)", "seconds": round(time.monotonic() - started, 1)}
    ]
    for target in targets:
        name = image_name(target, tag)
        argv = ["build", "-f", str(DOCKERFILE), "--target", target, "-t", name]
        if engine.podman:  # keep HEALTHCHECK (the OCI format has none); apt needs the network
            argv += ["--format", "docker", "--network", "host"]
        for key, value in {**bases, **_build_args()}.items():
            argv += ["--build-arg", f"{key}={value}"]
        started = time.monotonic()
        engine.run(*argv, str(context))
        seconds = round(time.monotonic() - started, 1)
        size = engine.run("image", "inspect", "--format", "{{.Size}}", name, capture=True)
        rows.append({"image": name, "seconds": seconds, "bytes": int(size.strip())})
    report = settings.infra.local_dir / "images" / "report.json"
    report.write_text(json.dumps({"base": base, "images": rows}, indent=2) + "\n")
    return rows


def _build_args() -> dict[str, str]:
    """OCI label values: the project's version, the checkout's commit and its time (UTC)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], check=False, cwd=PROJECT_ROOT, capture_output=True, text=True
        )
        return done.stdout.strip() or "unknown"

    return {
        "VERSION": version("ragstream"),
        "REVISION": git("rev-parse", "HEAD"),
        "CREATED": git("show", "-s", "--format=%cI", "HEAD"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m infra.images build|stage|base``; print one line per built image."""
    parser = argparse.ArgumentParser(prog="python -m infra.images", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build_p = sub.add_parser("build", help="stage the context and build the images")
    build_p.add_argument("--base", choices=["public", "local"], default="public")
    build_p.add_argument("--target", action="append", choices=TARGETS, dest="targets")
    build_p.add_argument("--tag", default="latest")
    stage_p = sub.add_parser("stage", help="only stage the build context")
    stage_p.add_argument("--no-wheels", action="store_true")
    sub.add_parser("base", help="only make the local debootstrap base image")
    args = parser.parse_args(argv)
    settings = get_settings()
    if args.command == "stage":
        context = settings.infra.local_dir / "images" / "context"
        print(stage(settings, context, wheels=not args.no_wheels))
    elif args.command == "base":
        print(local_base(settings, Engine.find(settings)))
    else:
        for row in build(settings, args.targets or TARGETS, base=args.base, tag=args.tag):
            size = f"{int(str(row['bytes'])) / 1e6:.0f} MB" if "bytes" in row else ""
            print(f"{row['image']:<36} {row['seconds']:>7} s  {size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
