"""The vLLM server's command line, environment and install checks; the side-by-side bench's
numbers (issue 40). No vLLM is needed: tests/integration/test_vllm_server.py runs the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.llm_servers import percentile, prompt, summary_numbers, table
from infra.errors import InstallError
from infra.vllm_install import (
    ARCHITECTURES,
    LOCK_FILE,
    MANIFEST,
    lock_sha256,
    model_converted,
    model_dir,
    venv_dir,
    venv_installed,
)
from infra.vllm_service import ENTRYPOINT, VllmService, server_args, server_env
from ragstream.settings import LLM_PROMPT_STYLES, Settings, VllmSettings


def _settings(tmp_path: Path, **vllm: object) -> Settings:
    base = Settings()
    infra = base.infra.model_copy(update={"local_dir": tmp_path})
    return base.model_copy(update={"infra": infra, "vllm": VllmSettings(**vllm)})


def test_server_args_name_the_flags_the_gpu_deployments_use() -> None:
    args = server_args(VllmSettings(port=9000, max_model_len=1024), "/m/gemma3-270m")
    assert args[:2] == ["--model", "/m/gemma3-270m"]
    pairs = dict(zip(args[2::2], args[3::2], strict=False))
    assert pairs["--served-model-name"] == "gemma3-270m"
    assert pairs["--port"] == "9000" and pairs["--max-model-len"] == "1024"
    assert pairs["--dtype"] == "bfloat16"
    assert "--enable-prefix-caching" in args
    off = server_args(VllmSettings(enable_prefix_caching=False, max_num_seqs=8), "/m")
    assert "--no-enable-prefix-caching" in off and off[-2:] == ["--max-num-seqs", "8"]


def test_server_env_sets_kv_cache_space_threads_and_offline(tmp_path: Path) -> None:
    env = server_env(VllmSettings(kvcache_space_gib=2), tmp_path)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CACHE_ROOT"] == str(tmp_path)
    assert server_env(VllmSettings(n_threads=2), tmp_path)["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"


def test_unknown_model_is_refused_at_settings_time() -> None:
    with pytest.raises(ValueError, match=r"unknown vllm\.model"):
        VllmSettings(model="llama-70b")
    assert set(ARCHITECTURES) == set(LLM_PROMPT_STYLES)


def test_the_lock_pins_every_package_with_a_hash_and_leaves_triton_out() -> None:
    lines = [ln for ln in LOCK_FILE.read_text().splitlines() if ln and not ln.startswith("#")]
    assert all("==" in ln and "--hash=sha256:" in ln for ln in lines), lines
    names = {ln.split("==")[0] for ln in lines}
    assert {"vllm-cpu", "torch", "transformers", "gguf", "accelerate"} <= names
    assert not names & {"triton", "torchvision", "torchaudio", "torchcodec"}


def test_install_checks_refuse_a_missing_venv_or_model(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert venv_dir(settings) == tmp_path.resolve() / "vllm-venv"
    assert not venv_installed(settings) and not model_converted(settings, "gemma3-270m")
    with pytest.raises(InstallError, match="make vllm"):
        VllmService(settings).install()
    (venv_dir(settings)).mkdir()
    (venv_dir(settings) / ".ragstream-lock").write_text(lock_sha256() + "\n")
    assert venv_installed(settings)
    with pytest.raises(InstallError, match="not converted"):
        VllmService(settings).install()
    folder = model_dir(settings, "gemma3-270m")
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")
    manifest = {"source_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"}
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert model_converted(settings, "gemma3-270m")
    service = VllmService(settings, home=tmp_path / "h")
    service.install()
    assert service.marker == f"{ENTRYPOINT} --model {folder.parent}/"
    # A server of another converted model is this service's too (`down` after `up --model`).
    other = VllmService(_settings(tmp_path, model="qwen2.5-coder-0.5b-instruct"))
    argv = [ENTRYPOINT, *server_args(other.vllm, str(model_dir(settings, other.vllm.model)))]
    assert service.marker in " ".join(argv) and other.marker == service.marker
    assert service.ports == (8091,) and service.log_files() == [
        tmp_path / "h" / "logs" / "vllm.log"
    ]
    assert service.infra.start_timeout_s == settings.vllm.start_timeout_s


def _row(server: str, c: int, *, cache: bool = True) -> dict[str, object]:
    return {
        "server": server,
        "prefix_cache": cache,
        "concurrency": c,
        "ttft_p50_ms": 100.0,
        "ttft_p99_ms": 200.0,
        "completion_tokens_per_s": 50.0,
        "requests_per_s": 0.5,
        "rss_mb": 700,
        "prefix_cache_hit_rate": None,
    }


def test_bench_rows_become_summary_keys_and_a_table() -> None:
    data = {"rows": [_row("vllm", 1), _row("llamacpp", 8, cache=False)]}
    keys = summary_numbers(data)
    assert keys["vllm"]["c1"]["ttft_p50_ms"] == 100.0
    assert keys["llamacpp"]["c8_nocache"]["rss_mb"] == 700
    assert "| vllm | on | 1 | 100 | 200 | 50.0 | 0.50 | 700 | - |" in table(data)


def test_each_servers_small_tier_evaluation_becomes_its_quality_keys(tmp_path: Path) -> None:
    from bench.summary import QUALITY_DIRS, generation_numbers

    (tmp_path / "llm_servers.json").write_text(json.dumps({"rows": [_row("vllm", 1)]}))
    overall = {"n": 30, "correct": 4, "answer_accuracy": 0.1333, "crag_score": -0.2}
    report = {"answers": {"tiers": {"small": {"overall": overall | {"latency_p50_ms": 812.5}}}}}
    (tmp_path / QUALITY_DIRS["vllm"]).mkdir()
    (tmp_path / QUALITY_DIRS["vllm"] / "eval.json").write_text(json.dumps(report))
    notes: list[str] = []
    keys = generation_numbers(tmp_path, notes)
    assert keys["vllm"]["quality"] == overall | {"answer_latency_p50_ms": 812.5}
    assert keys["vllm"]["c1"]["ttft_p50_ms"] == 100.0
    assert "llamacpp" not in keys and not notes  # no evaluation of it: no keys, no note


def test_bench_prompts_share_a_prefix_and_differ_after_it() -> None:
    a, b = prompt(1), prompt(2)
    assert a != b and a.split("Request")[0] == b.split("Request")[0]
    assert len(a.split("Request")[0]) > 1000
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and percentile([1.0, 9.0], 99) == 9.0


def test_the_gpu_deployments_name_the_same_flags_and_health_probe() -> None:
    import yaml

    from ragstream.settings import PROJECT_ROOT

    flags = {a for a in server_args(VllmSettings(), "m") if a.startswith("--")} - {"--model"}
    compose = yaml.safe_load((PROJECT_ROOT / "infra" / "compose.yaml").read_text())["services"]
    docs = yaml.safe_load_all((PROJECT_ROOT / "infra" / "k8s" / "gpu" / "vllm.yaml").read_text())
    k8s = next(d for d in docs if d["kind"] == "Deployment")
    container = k8s["spec"]["template"]["spec"]["containers"][0]
    for args in (compose["vllm"]["command"], container["args"]):
        assert flags <= set(args), flags - set(args)
    test = compose["vllm"]["healthcheck"]["test"]  # a list, or a string run by the shell
    assert "/health" in (test if isinstance(test, str) else " ".join(test))
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
