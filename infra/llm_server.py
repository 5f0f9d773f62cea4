"""``python -m infra.llm_server --config FILE``: serve a GGUF model with llama.cpp until SIGTERM.

The process :class:`infra.llm_service.LlmService` starts. ``FILE`` is the JSON it writes before
each launch (:class:`ServerConfig`), so the server serves exactly the settings the caller had,
not whatever this process's environment says. The server is llama.cpp's own HTTP server through
the prebuilt ``xllamacpp`` binding: an OpenAI-compatible API (``/v1/completions``,
``/v1/chat/completions``) plus ``/health``, ``/metrics``, ``/props`` and ``/tokenize``, with
continuous batching over ``n_parallel`` slots. Its log goes to stdout/stderr, which the service
appends to ``.local/llm/logs/llm.log``.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path
from typing import Any

from infra.llm_service import ServerConfig

#: Minimum matching prefix (tokens) for llama.cpp to reuse a slot's KV cache by shifting
#: (``--cache-reuse``). Models with sliding-window attention (Gemma 3) disable it themselves.
CACHE_REUSE_TOKENS = 256


def common_params(config: ServerConfig) -> Any:
    """Build ``xllamacpp.CommonParams`` (llama.cpp's ``common_params``) from ``config``.

    Prompt caching is on (a slot keeps its last prompt's KV cache, so a repeated prefix is not
    prefilled again), ``n_cache_reuse`` is set where the model supports it, and the host
    prompt cache is capped at ``config.cache_ram_mib``.

    Raises:
        ImportError: ``xllamacpp`` is not installed.
    """
    import xllamacpp  # type: ignore[import-untyped]

    params = xllamacpp.CommonParams()
    params.model.path = str(config.model_path)
    params.hostnames = [config.host]
    params.port = config.port
    params.n_ctx = config.n_ctx
    params.n_parallel = config.n_parallel
    params.cpuparams.n_threads = config.n_threads
    params.cpuparams_batch.n_threads = config.n_threads
    params.cont_batching = True
    params.cache_prompt = True
    params.n_cache_reuse = CACHE_REUSE_TOKENS
    # llama.cpp's host prompt cache defaults to 8192 MiB; the setting keeps it small.
    params.cache_ram_mib = config.cache_ram_mib
    # Sliding-window models (Gemma 3) otherwise keep only the window's KV, so a slot could
    # never reuse a cached prompt prefix; the full cache costs n_ctx x SWA layers of KV.
    params.swa_full = True
    params.endpoint_metrics = True
    params.endpoint_props = True
    if config.chat_template is not None:
        params.chat_template = config.chat_template
    return params


def serve(config: ServerConfig) -> None:
    """Load the model, serve until SIGTERM or SIGINT, then stop the server.

    Args:
        config: The server configuration.
    """
    import xllamacpp

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    started = time.monotonic()
    server = xllamacpp.Server(common_params(config))
    print(
        f"llm_server: serving {config.model_path} on {server.listening_address} "
        f"(load {time.monotonic() - started:.1f}s)",
        flush=True,
    )
    stop.wait()
    print("llm_server: stopping", flush=True)
    del server


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``--config`` names the JSON :class:`ServerConfig`."""
    parser = argparse.ArgumentParser(prog="python -m infra.llm_server")
    parser.add_argument("--config", type=Path, required=True, help="ServerConfig JSON file")
    args = parser.parse_args(argv)
    serve(ServerConfig.model_validate_json(args.config.read_text()))


if __name__ == "__main__":
    main()
