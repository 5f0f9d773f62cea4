"""The container images' definition (issue 38, item 1): infra/Dockerfile's targets are the ones
`make image` builds, every file a target copies is one the staging writes, and the services'
configuration is infra/'s own, rendered for a container."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.images import DOCKERFILE, IMAGE_LOCAL_DIR, TARGETS, image_name, render_configs
from ragstream.settings import Settings

#: What infra.images.stage puts into the build context besides render_configs' files.
STAGED = {
    "kafka/libs",
    "kafka/log4j2.xml",
    "kafka/kafka-entrypoint.sh",
    "elasticsearch/dist.zip",
    "postgres/postgres-entrypoint.sh",
    "models",
    "app/",
    "wheels",
    "wheels/digest.txt",
}


def _dockerfile() -> str:
    return DOCKERFILE.read_text()


def test_every_target_is_built_and_ragstream_is_the_default() -> None:
    stages = re.findall(r"^FROM \S+ AS (\S+)$", _dockerfile(), flags=re.MULTILINE)
    assert set(TARGETS) <= set(stages)
    assert stages[-1] == "ragstream"  # a plain `build` without --target
    assert image_name("ragstream") == "ragstream:latest"
    assert image_name("kafka", "1") == "ragstream-kafka:1"


def test_every_copied_file_is_staged() -> None:
    staged = STAGED | set(render_configs(Settings()))
    copies = re.findall(r"^COPY (?!--from)(?:--chown=\S+ )?(.+) \S+$", _dockerfile(), re.MULTILINE)
    sources = {src for line in copies for src in line.split()}
    mounts = set(re.findall(r"--mount=type=bind,source=(\S+?),", _dockerfile()))
    assert sources | mounts <= staged


def test_every_image_runs_as_a_user_with_labels_and_a_health_check() -> None:
    text = _dockerfile()
    for target in TARGETS:
        body = re.split(rf"^FROM \S+ AS {target}$", text, flags=re.MULTILINE)[1]
        body = re.split(r"^FROM ", body, flags=re.MULTILINE)[0]
        assert "USER ragstream" in body, target
        assert "HEALTHCHECK" in body, target
        assert "org.opencontainers.image.title" in body, target


def test_service_configs_are_infras_own_for_a_container() -> None:
    settings = Settings()
    configs = render_configs(settings)
    kafka = configs["kafka/server.properties"]
    assert "listeners=PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093" in kafka
    assert "advertised.listeners=PLAINTEXT://__HOST__:9092,CONTROLLER://__HOST__:9093" in kafka
    assert f"log.dirs={IMAGE_LOCAL_DIR}/kafka/data" in kafka
    assert "offsets.topic.replication.factor=1" in kafka
    assert f"-Xmx{settings.infra.kafka_heap_mb}m" in configs["kafka/jvm.env"]
    es = configs["elasticsearch/elasticsearch.yml"]
    assert 'network.host: "0.0.0.0"' in es and "xpack.security.enabled: false" in es
    assert f"-Xmx{settings.infra.elasticsearch_heap_mb}m" in configs["elasticsearch/heap.options"]
    redis = configs["redis/redis.conf"]
    assert "bind 0.0.0.0" in redis and "\nprotected-mode no" in redis and "appendonly yes" in redis
    assert "port = 5432" in configs["postgres/postgres.conf"]


def test_a_docker_command_line_without_a_daemon_is_no_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38: these machines have a ``docker`` command line and no daemon; ``make image``
    picked it and failed at the first build step instead of installing podman."""
    import infra.images as images

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(SystemExit, match="docker with a running daemon"):
        images.Engine.find(Settings())
    docker.write_text("#!/bin/sh\nexit 0\n")  # a daemon answers
    assert images.Engine.find(Settings()).argv == ("docker",)


def _wheel(folder: Path, name: str, files: dict[str, str]) -> None:
    import hashlib
    import zipfile

    record = "".join(
        f"{n},sha256={hashlib.sha256(t.encode()).hexdigest()},{len(t)}\n" for n, t in files.items()
    )
    with zipfile.ZipFile(folder / name, "w") as wheel:
        for n, t in files.items():
            wheel.writestr(n, t)
        wheel.writestr(f"{name.split('-', maxsplit=1)[0]}-0.1.0.dist-info/RECORD", record)


def test_the_wheelhouse_digest_changes_with_the_code_not_with_a_rebuild(tmp_path: Path) -> None:
    """Issue 38: the wheelhouse is bound to the install step, which the layer cache does not
    key on; an image built after a change ran the old code. Its digest is copied in first."""
    from infra.images import wheelhouse_digest

    (tmp_path / "constraints.txt").write_text("httpx==0.28.1\n")
    _wheel(tmp_path, "httpx-0.28.1-py3-none-any.whl", {"httpx/__init__.py": "x = 1\n"})
    _wheel(tmp_path, "ragstream-0.1.0-py3-none-any.whl", {"entry/cli.py": "import bench\n"})
    first = wheelhouse_digest(tmp_path)
    _wheel(tmp_path, "ragstream-0.1.0-py3-none-any.whl", {"entry/cli.py": "import bench\n"})
    assert wheelhouse_digest(tmp_path) == first  # rebuilt, same code: the cache holds
    _wheel(tmp_path, "ragstream-0.1.0-py3-none-any.whl", {"entry/cli.py": "import replay\n"})
    changed = wheelhouse_digest(tmp_path)
    assert changed != first
    (tmp_path / "constraints.txt").write_text("httpx==0.28.2\n")
    assert wheelhouse_digest(tmp_path) != changed
    assert "COPY wheels/digest.txt" in _dockerfile().split("FROM ${PYTHON_BASE} AS ragstream")[1]


def test_the_local_base_leaves_a_mounted_proc_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38: debootstrap left the host's /proc mounted in the root file system and the base
    image carried a copy of it (51 MB of the host's processes)."""
    import subprocess

    import infra.images as images

    settings = Settings()
    settings.infra.local_dir = tmp_path
    rootfs = tmp_path / "images" / "rootfs-bookworm"
    (rootfs / "etc" / "apt").mkdir(parents=True)
    (rootfs / "etc" / "debian_version").write_text("12.0\n")
    ran: list[list[str]] = []

    class Engine:
        def run(self, *args: str, stdin: int | None = None, capture: bool = False) -> str:
            ran.append(["engine", *args])
            return ""

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        ran.append(list(argv))
        return subprocess.CompletedProcess(argv, 0)

    class Tar:
        stdout = None

        def __init__(self, argv: list[str], **_: object) -> None:
            ran.append(list(argv))

        def wait(self) -> int:
            return 0

    monkeypatch.setattr("os.path.ismount", lambda p: Path(p) == rootfs / "proc")
    monkeypatch.setattr("subprocess.run", fake_run)
    monkeypatch.setattr("subprocess.Popen", Tar)
    images.local_base(settings, Engine(), mirror="http://deb.debian.org/debian")  # type: ignore[arg-type]
    assert ["umount", "--lazy", str(rootfs / "proc")] in ran
    assert not any(str(rootfs / "sys") in argv for argv in ran)
    assert ["tar", "-C", str(rootfs), "--one-file-system", "-c", "."] in ran
    assert ["engine", "import", "-", images.LOCAL_BASE] in ran
