"""The optional local vLLM server: ``vllm serve`` on the CPU, beside the llama.cpp one (issue 40).

Install = the vLLM venv and the converted model exist (:mod:`infra.vllm_install`; nothing is
downloaded here: ``ragstream infra llm install --server vllm`` does that, once). Launch =
``<venv>/bin/python -m vllm.entrypoints.openai.api_server --model <local_dir>/models/vllm/<model>
--served-model-name <model> --host H --port P --max-model-len N --dtype bfloat16
[--no-enable-prefix-caching]``, detached, logging to ``<local_dir>/vllm/logs/vllm.log``, with
``VLLM_CPU_KVCACHE_SPACE`` (GiB) and ``VLLM_CPU_OMP_THREADS_BIND`` from ``settings.vllm``.
Health = ``GET /health`` answers 200 (the same probe as the llama.cpp server's and the k8s/compose
GPU deployments'). Start-up takes ~60-180 s on 2 cores, so the wait is
``settings.vllm.start_timeout_s``, not ``settings.infra.start_timeout_s``.

``ragstream infra llm down --server vllm`` or ``ragstream infra down`` stops it; ``infra status``
lists it while it runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx

from infra import proc
from infra.errors import InstallError, PortConflictError
from infra.service import Service, ServiceStatus
from infra.system import user_env
from infra.vllm_install import model_converted, model_dir, venv_installed, venv_python
from ragstream.settings import Settings, VllmSettings

#: The module vLLM's OpenAI-compatible server runs as (``vllm serve`` is the same code).
ENTRYPOINT = "vllm.entrypoints.openai.api_server"


def server_args(vllm: VllmSettings, model_path: str) -> list[str]:
    """The server's arguments after ``-m vllm.entrypoints.openai.api_server``.

    The same flags the GPU deployments pass to ``vllm serve`` (``infra/compose.yaml``,
    ``infra/k8s/gpu/vllm.yaml``): ``--served-model-name``, ``--host``, ``--port``,
    ``--max-model-len``, ``--dtype`` and the prefix-caching switch.

    Args:
        vllm: The server's settings.
        model_path: The converted model's folder.
    """
    args = [
        "--model",
        model_path,
        "--served-model-name",
        vllm.model,
        "--host",
        vllm.host,
        "--port",
        str(vllm.port),
        "--max-model-len",
        str(vllm.max_model_len),
        "--dtype",
        vllm.dtype,
        "--enable-prefix-caching" if vllm.enable_prefix_caching else "--no-enable-prefix-caching",
    ]
    if vllm.max_num_seqs is not None:
        args += ["--max-num-seqs", str(vllm.max_num_seqs)]
    return args


def server_env(vllm: VllmSettings, cache_root: Path) -> dict[str, str]:
    """vLLM's CPU variables: KV-cache GiB, thread binding; offline, no usage statistics.

    Args:
        vllm: The server's settings.
        cache_root: vLLM's and torch inductor's compile caches (kept across starts: a warm
            cache saves most of the start-up's compilation).
    """
    bind = "auto" if vllm.n_threads is None else f"0-{vllm.n_threads - 1}"
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(vllm.kvcache_space_gib),
        "VLLM_CPU_OMP_THREADS_BIND": bind,
        "VLLM_CACHE_ROOT": str(cache_root),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_root / "inductor"),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


class VllmService(Service):
    """vLLM's OpenAI-compatible HTTP server for ``settings.vllm.model``.

    Args:
        settings: The settings tree; ``settings.vllm`` is read.
        home: Folder of its PID file and log; ``None``: ``<infra.local_dir>/vllm`` (a test
            passes its own, so that it never touches a server ``infra llm up`` started).
    """

    name = "vllm"
    port_fields = ("port",)

    def __init__(self, settings: Settings, home: Path | None = None) -> None:
        super().__init__(settings)
        self.vllm = settings.vllm
        if home is not None:
            self.home = home.resolve()
        # The wait for health is the vLLM setting (minutes), not the other services' limit.
        self.infra = self.infra.model_copy(update={"start_timeout_s": self.vllm.start_timeout_s})

    @property
    def ports(self) -> tuple[int, ...]:
        """``vllm.port`` (its settings live outside ``settings.infra``)."""
        return (self.vllm.port,)

    @property
    def marker(self) -> str:
        """``vllm.entrypoints.openai.api_server --model <this checkout's models/vllm/>`` in argv.

        Any converted model of this checkout, not only ``settings.vllm.model``: a server started
        with ``infra llm up --server vllm --model NAME`` is still found (and stopped) by a later
        ``infra llm down --server vllm`` run with the default settings, whose PID file it shares.
        """
        return f"{ENTRYPOINT} --model {model_dir(self.settings, self.vllm.model).parent}/"

    def log_files(self) -> list[Path]:
        """The server's stdout/stderr."""
        return [self.home / "logs" / "vllm.log"]

    def status(self) -> ServiceStatus:
        """As :meth:`Service.status`, named ``vllm``."""
        return dataclasses.replace(super().status(), name=self.label)

    def check_ports(self) -> None:
        """As :meth:`Service.check_ports`, naming ``settings.vllm.port``.

        Raises:
            PortConflictError: The port is held by a process that is not this server.
        """
        try:
            super().check_ports()
        except PortConflictError as exc:
            where = "settings.vllm.port (RAGSTREAM_VLLM__PORT)"
            exc.args = (str(exc).replace("settings.infra.port (RAGSTREAM_INFRA__PORT)", where),)
            raise

    def install(self) -> None:
        """Check that the venv and the converted model exist; install nothing.

        Raises:
            InstallError: Either is missing (the message names the install command).
        """
        if not venv_installed(self.settings):
            raise InstallError(
                "the vLLM venv is not installed: run `make vllm` "
                "(ragstream infra llm install --server vllm)"
            )
        if not model_converted(self.settings, self.vllm.model):
            raise InstallError(
                f"{self.vllm.model} is not converted for vLLM: run "
                f"`ragstream infra llm install --server vllm --model {self.vllm.model}`"
            )
        (self.home / "logs").mkdir(parents=True, exist_ok=True)

    def launch(self) -> int:
        """Start the server detached from this process; write and return its PID."""
        model_path = str(model_dir(self.settings, self.vllm.model))
        argv = [
            str(venv_python(self.settings)),
            "-m",
            ENTRYPOINT,
            *server_args(self.vllm, model_path),
        ]
        cache_root = self.infra.local_dir.resolve() / "vllm" / "cache"
        env = user_env(None, self.home, **server_env(self.vllm, cache_root))
        pid = proc.spawn_detached(argv, self.log_files()[0], env=env, cwd=self.home)
        proc.write_pid(self.pid_file, pid)
        return pid

    def start(self) -> int | None:
        """Check the ports, install and launch the server unless it runs; do not wait.

        :meth:`Service.ensure_up` in two halves, so that the caller holds ``.local/infra.lock``
        only for the launch, not for the minutes vLLM takes to become healthy
        (:meth:`wait_healthy`).

        Returns:
            The PID of the launched server, ``None`` when one was already running.

        Raises:
            PortConflictError: The port is held by another process.
            InstallError: The venv or the converted model is missing.
        """
        if self.running_pid() is not None:
            return None
        self.check_ports()
        self.install()
        self._log_offsets = {path: proc.file_size(path) for path in self.log_files()}
        return self.launch()

    def wait_healthy(self, launcher: int | None) -> ServiceStatus:
        """Wait up to ``settings.vllm.start_timeout_s`` for ``GET /health``.

        Args:
            launcher: What :meth:`start` returned.

        Raises:
            ServiceStartError: The server died, or stayed unhealthy (the message ends with
                its log's last lines).
        """
        self._wait_ready(launcher)
        return self.status()

    def probe(self, timeout_s: float) -> tuple[bool, str]:
        """``GET /health``: healthy when it answers 200."""
        try:
            response = httpx.get(f"{self.vllm.base_url}/health", timeout=timeout_s)
        except httpx.HTTPError as exc:
            return False, f"GET /health failed: {exc}"
        if response.status_code != httpx.codes.OK:
            return False, f"GET /health: HTTP {response.status_code} {response.text[:200]}"
        return True, f"ok, vLLM serving {self.vllm.model} on port {self.vllm.port}"
