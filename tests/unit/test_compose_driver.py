"""infra/compose.py's start order (issue 38): the waves follow compose.yaml's depends_on, with
the profiles Docker Compose would enable; podman-compose 1.0.3 has neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import compose


def test_the_stack_starts_services_then_one_shots_then_the_processes() -> None:
    services = compose.active(compose.load(), {"cpu"})
    waves = compose.waves(services)
    assert waves[0] == ["elasticsearch", "kafka", "llm", "postgres", "redis"]
    assert waves[1] == ["migrate", "topics"]
    assert "api" in waves[2] and "worker-generation-large" in waves[2]
    assert "vllm" not in services and "worker-generation-large-gpu" not in services
    assert compose.dependencies(services["topics"]) == {"kafka": "service_healthy"}
    assert compose.dependencies(services["api"])["migrate"] == "service_completed_successfully"


def test_the_gpu_profile_swaps_the_large_pool_and_adds_vllm() -> None:
    services = compose.active(compose.load(), {"gpu"})
    assert "vllm" in services and "worker-generation-large" not in services
    flat = [s for wave in compose.waves(services) for s in wave]
    assert flat.index("vllm") < flat.index("worker-generation-large-gpu")


def test_profiles_come_from_the_environment_else_the_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# comment\nCOMPOSE_PROFILES=cpu\n")
    assert compose.default_profiles({}, env_file) == {"cpu"}
    assert compose.default_profiles({"COMPOSE_PROFILES": "gpu, x"}, env_file) == {"gpu", "x"}
    assert compose.default_profiles({}, tmp_path / "none") == set()


def test_a_cycle_or_a_missing_dependency_is_refused() -> None:
    with pytest.raises(compose.ComposeError, match="cycle"):
        compose.waves({"a": {"depends_on": ["b"]}, "b": {"depends_on": {"a": {}}}})
    with pytest.raises(compose.ComposeError, match="not started"):
        compose.waves({"a": {"depends_on": ["gone"]}})


def test_replicas_get_one_container_each() -> None:
    svc = compose.load()["worker-retrieval"]
    assert compose.container_names("p", "worker-retrieval", svc) == [
        "p_worker-retrieval_1",
        "p_worker-retrieval_2",
    ]
