"""``ragstream infra llm serve``: the foreground server of the deployment files (no model load)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import infra.llm_server
import infra.llm_service
from entry.cli import app
from infra.errors import InstallError
from ragstream.settings import get_settings


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[Any]]:
    """Settings under ``tmp_path``; ``install`` writes only the config; ``serve`` records."""
    monkeypatch.setenv("RAGSTREAM_INFRA__LOCAL_DIR", str(tmp_path))
    get_settings.cache_clear()
    calls: list[Any] = []

    def install(self: infra.llm_service.LlmService) -> None:
        calls.append(("install", self.llm.host, self.llm.port))

    monkeypatch.setattr(infra.llm_service.LlmService, "install", install)
    monkeypatch.setattr(infra.llm_server, "serve", calls.append)
    yield calls
    get_settings.cache_clear()


def test_serve_binds_the_given_host_and_port(served: list[Any]) -> None:
    result = CliRunner().invoke(
        app, ["infra", "llm", "serve", "--host", "0.0.0.0", "--port", "8081"]
    )
    assert result.exit_code == 0, result.output
    install, config = served
    assert install == ("install", "0.0.0.0", 8081)
    assert (config.host, config.port, config.model) == ("0.0.0.0", 8081, "gemma3-270m")


def test_serve_defaults_to_settings_llm(served: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_LLM__PORT", "8191")
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["infra", "llm", "serve"])
    assert result.exit_code == 0, result.output
    assert (served[-1].host, served[-1].port) == ("127.0.0.1", 8191)


def test_serve_reports_an_install_failure(
    served: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(self: infra.llm_service.LlmService) -> None:
        raise InstallError("settings.llm.model_path /nope.gguf does not exist")

    monkeypatch.setattr(infra.llm_service.LlmService, "install", fail)
    result = CliRunner().invoke(app, ["infra", "llm", "serve"])
    assert result.exit_code == 1
    assert "infra llm serve failed: settings.llm.model_path /nope.gguf" in result.output
    assert served == []  # nothing served


def test_the_prompt_cache_is_capped_by_the_setting(
    served: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's host prompt cache defaults to 8192 MiB (8.4 GB RSS for a 253 MB model);
    the server gets ``settings.llm.cache_ram_mib`` instead."""
    result = CliRunner().invoke(app, ["infra", "llm", "serve"])
    assert result.exit_code == 0, result.output
    default = served[-1]
    assert default.cache_ram_mib == 256
    assert infra.llm_server.common_params(default).cache_ram_mib == 256

    monkeypatch.setenv("RAGSTREAM_LLM__CACHE_RAM_MIB", "0")
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["infra", "llm", "serve"])
    assert result.exit_code == 0, result.output
    assert infra.llm_server.common_params(served[-1]).cache_ram_mib == 0
