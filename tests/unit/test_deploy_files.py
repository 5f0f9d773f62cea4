"""The production deployment files parse, and every command they run exists in the CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer.main
import yaml

from entry.cli import app
from ragstream.settings import PROJECT_ROOT

COMPOSE = PROJECT_ROOT / "infra" / "compose.yaml"
COMPOSE_LOCAL = PROJECT_ROOT / "infra" / "compose.local.yaml"
K8S_DIR = PROJECT_ROOT / "infra" / "k8s"
RAGSTREAM_IMAGE = "ragstream:latest"


def _resolve(args: list[str]) -> Any:
    """Walk the click command tree along ``args``; fail if a command or option is unknown."""
    command: Any = typer.main.get_command(app)
    rest = list(args)
    while hasattr(command, "commands") and rest:
        name = rest.pop(0)
        sub = command.commands.get(name)
        assert sub is not None, f"`ragstream {' '.join(args)}`: no command {name!r}"
        command = sub
    known = {opt for p in command.params for opt in getattr(p, "opts", [])}
    for token in rest:
        if token.startswith("--"):
            assert token.split("=")[0] in known, f"`ragstream {' '.join(args)}`: no {token}"
    return command


def _compose_commands() -> list[list[str]]:
    doc = yaml.safe_load(COMPOSE.read_text())
    commands = []
    for name, svc in doc["services"].items():
        if svc.get("image") == RAGSTREAM_IMAGE:
            assert "command" in svc, f"compose service {name} runs no command"
            commands.append(list(svc["command"]))
    return commands


def _k8s_commands() -> list[list[str]]:
    commands = []
    for path in sorted(K8S_DIR.glob("**/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec: Any = doc.get("spec", {})
            pod = spec.get("template", {}).get("spec", {})
            for container in pod.get("containers", []):
                if container["image"] == RAGSTREAM_IMAGE:
                    commands.append(list(container["args"]))
    return commands


def test_compose_runs_every_component() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = set(doc["services"])
    needed = {"kafka", "elasticsearch", "redis", "postgres", "api", "celery-worker", "flower"}
    assert needed <= services
    pools = {c[1] for c in _compose_commands() if c[0] == "worker"}
    assert {"ingest", "retrieval", "rerank", "generation-small", "generation-large"} <= pools
    assert "delivery" in pools


@pytest.mark.parametrize("args", _compose_commands() + _k8s_commands(), ids=" ".join)
def test_deployment_commands_exist_in_cli(args: list[str]) -> None:
    _resolve(args)


def test_resolver_rejects_unknown_commands() -> None:
    with pytest.raises(AssertionError, match="no command"):
        _resolve(["no-such-command"])
    with pytest.raises(AssertionError, match="no --bogus"):
        _resolve(["api", "--bogus", "1"])


def test_k8s_manifests_cover_the_same_processes_as_compose() -> None:
    compose = {tuple(c[:2]) if c[0] == "worker" else (c[0],) for c in _compose_commands()}
    k8s = {tuple(c[:2]) if c[0] == "worker" else (c[0],) for c in _k8s_commands()}
    assert compose == k8s


# -- the whole system: LLM servers, URLs, profiles, secrets ---------------------------------------

COMPOSE_ENV = PROJECT_ROOT / "infra" / ".env"
#: Environment names that hold a secret: never given a default in a deployment file.
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|PRIVATE_KEY", re.IGNORECASE)
#: Compose interpolation: ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?err}``.
INTERPOLATION = re.compile(r"\$\{(?P<var>\w+)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"',]+")


def _interpolate(value: str) -> str:
    """Compose's interpolation with an empty environment: a default is taken, a required
    variable becomes the placeholder ``required-VAR``."""

    def one(match: re.Match[str]) -> str:
        op, arg = match["op"] or "", match["arg"] or ""
        if op in {":-", "-"}:
            return arg
        return f"required-{match['var'].lower()}"

    return INTERPOLATION.sub(one, value)


def _compose_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def _default_profiles() -> set[str]:
    """``COMPOSE_PROFILES`` of ``infra/.env``: what a plain ``docker compose up`` enables."""
    for line in COMPOSE_ENV.read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "COMPOSE_PROFILES":
            return {p.strip() for p in value.split(",") if p.strip()}
    return set()


def _active(doc: dict[str, Any], profiles: set[str]) -> dict[str, dict[str, Any]]:
    """The services ``docker compose`` starts with ``profiles`` enabled."""
    return {
        name: svc
        for name, svc in doc["services"].items()
        if not svc.get("profiles") or set(svc["profiles"]) & profiles
    }


def _env(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _listens(svc: dict[str, Any]) -> set[int]:
    """Container ports a compose service declares (``expose`` and the target of ``ports``)."""
    ports = {int(p) for p in svc.get("expose", [])}
    ports |= {int(str(p).rsplit(":", 1)[-1]) for p in svc.get("ports", [])}
    return ports


def _endpoints(env: dict[str, str], args: list[str]) -> list[tuple[str, str, int | None]]:
    """``(where, host, port)`` of every URL and Kafka bootstrap address in ``env``/``args``."""
    found: list[tuple[str, str, int | None]] = []
    for key, raw in [*env.items(), *(("command", a) for a in args)]:
        value = _interpolate(raw)
        if key.endswith("BOOTSTRAP_SERVERS"):
            for address in value.split(","):
                host, _, port = address.strip().rpartition(":")
                found.append((key, host, int(port)))
            continue
        for url in URL.findall(value):
            parsed = urlsplit(url)
            assert parsed.hostname, f"{key}: no host in {url}"
            found.append((key, parsed.hostname, parsed.port))
    if "RAGSTREAM_LLM__HOST" in env:
        found.append(
            ("RAGSTREAM_LLM__HOST", env["RAGSTREAM_LLM__HOST"], int(env["RAGSTREAM_LLM__PORT"]))
        )
    return found


def _command(svc: dict[str, Any]) -> list[str]:
    command = svc.get("command") or []
    return [_interpolate(str(a)) for a in ([command] if isinstance(command, str) else command)]


def _port_option(args: list[str]) -> int | None:
    return int(args[args.index("--port") + 1]) if "--port" in args else None


def _tier_url(svc: dict[str, Any], tier: str) -> str:
    return _env(svc)[f"RAGSTREAM_GENERATION__{tier.upper()}__BASE_URL"]


PROFILE_SETS = {"default": None, "gpu": {"gpu"}}


@pytest.mark.parametrize("profile_set", PROFILE_SETS, ids=str)
def test_compose_urls_name_services_of_the_same_profile_on_their_ports(profile_set: str) -> None:
    doc = _compose_doc()
    profiles = PROFILE_SETS[profile_set] or _default_profiles()
    active = _active(doc, profiles)
    for name, svc in active.items():
        args = _command(svc)
        own = _port_option(args)
        if own is not None:
            assert own in _listens(svc), f"{name} listens on {own} but exposes {_listens(svc)}"
        for dep in svc.get("depends_on") or {}:
            assert dep in active, f"{name} depends on {dep}, not started with {profiles}"
        for where, host, port in _endpoints(_env(svc), args):
            if host in {"localhost", "127.0.0.1", "0.0.0.0"}:
                continue
            assert host in active, f"{name} {where}: {host} is no service of profiles {profiles}"
            assert port in _listens(active[host]), (
                f"{name} {where}: {host}:{port}, but {host} listens on {_listens(active[host])}"
            )


def test_compose_default_profile_runs_both_tiers_on_llama_cpp() -> None:
    doc = _compose_doc()
    assert _default_profiles() == {"cpu"}
    active = _active(doc, _default_profiles())
    assert "vllm" not in active
    assert _command(active["llm"])[:3] == ["infra", "llm", "serve"]
    large = [svc for svc in active.values() if _command(svc) == ["worker", "generation-large"]]
    small = [svc for svc in active.values() if _command(svc) == ["worker", "generation-small"]]
    assert len(large) == 1 and len(small) == 1
    assert urlsplit(_tier_url(large[0], "large")).hostname == "llm"
    assert urlsplit(_tier_url(small[0], "small")).hostname == "llm"


def test_compose_gpu_profile_runs_large_on_vllm_only() -> None:
    doc = _compose_doc()
    active = _active(doc, {"gpu"})
    vllm = active["vllm"]
    assert vllm["entrypoint"] == ["vllm", "serve"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d["capabilities"] and d["driver"] == "nvidia" for d in devices)
    large = [svc for svc in active.values() if _command(svc) == ["worker", "generation-large"]]
    assert len(large) == 1, "exactly one generation-large service per profile"
    env = _env(large[0])
    assert urlsplit(_tier_url(large[0], "large")).hostname == "vllm"
    served = _command(vllm)[_command(vllm).index("--served-model-name") + 1]
    assert env["RAGSTREAM_GENERATION__LARGE__MODEL"] == served
    small = [svc for svc in active.values() if _command(svc) == ["worker", "generation-small"]]
    assert urlsplit(_tier_url(small[0], "small")).hostname == "llm"


def _secret_defaults(name: str, raw: str) -> list[str]:
    """What makes ``name=raw`` a shipped default secret (empty when it is none)."""
    problems = []
    if SECRET_NAME.search(name):
        for match in INTERPOLATION.finditer(raw):
            if match["op"] in {":-", "-"} and match["arg"]:
                problems.append(f"{name}: ${{{match['var']}}} defaults to a value")
        if not INTERPOLATION.fullmatch(raw.strip()) and raw.strip():
            problems.append(f"{name}: a literal value")
    for url in URL.findall(raw):
        userinfo = url.split("://", 1)[1].split("@", 1)[0] if "@" in url else ""
        password = userinfo.partition(":")[2]
        if password:
            match = INTERPOLATION.fullmatch(password)
            if match is None or (match["op"] in {":-", "-"} and match["arg"]):
                problems.append(f"{name}: the URL carries a password")
    return problems


def test_compose_ships_no_default_secret() -> None:
    problems = []
    for name, svc in _compose_doc()["services"].items():
        for key, raw in _env(svc).items():
            problems += [f"{name} {p}" for p in _secret_defaults(key, raw)]
    assert problems == []


def test_secret_check_catches_defaults() -> None:
    assert _secret_defaults("POSTGRES_PASSWORD", "ragstream")
    assert _secret_defaults("POSTGRES_PASSWORD", "${POSTGRES_PASSWORD:-ragstream}")
    assert _secret_defaults("URL", "postgresql://u:pw@postgres:5432/db")
    assert not _secret_defaults("URL", "postgresql://u:${PW:?set PW}@postgres:5432/db")
    assert not _secret_defaults("HF_TOKEN", "${HF_TOKEN:-}")
    assert not _secret_defaults("POSTGRES_PASSWORD", "${POSTGRES_PASSWORD:?set it}")


def _kustomize(folder: Path) -> list[dict[str, Any]]:
    """The documents ``kubectl apply -k folder`` applies: resources (files and folders,
    recursively) with the ConfigMap patches merged in (the only patches used here)."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in spec.get("resources", []):
        path = (folder / resource).resolve()
        if path.is_dir():
            docs += _kustomize(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for entry in spec.get("patches", []):
        patch = yaml.safe_load(entry["patch"])
        assert patch["kind"] == "ConfigMap", "only ConfigMap patches are modelled by this test"
        targets = [
            d
            for d in docs
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == patch["metadata"]["name"]
        ]
        assert len(targets) == 1, f"patch of {patch['metadata']['name']} matches {len(targets)}"
        targets[0]["data"].update(patch["data"])
    return docs


K8S_VARIANTS = {"cpu": K8S_DIR, "gpu": K8S_DIR / "gpu"}


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]
        for d in docs
        if d["kind"] in {"Deployment", "StatefulSet", "Job"}
    }


@pytest.mark.parametrize("variant", K8S_VARIANTS)
def test_k8s_urls_name_services_on_their_ports(variant: str) -> None:
    docs = _kustomize(K8S_VARIANTS[variant])
    pods = _pods(docs)
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for name, svc in services.items():
        selected = [
            p
            for p in pods.values()
            if svc["spec"]["selector"].items() <= p.get("metadata", {}).get("labels", {}).items()
        ]
        assert selected, f"Service {name} selects no pod"
        container_ports = {
            port["containerPort"]
            for p in selected
            for c in p["spec"]["containers"]
            for port in c.get("ports", [])
        }
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in container_ports, f"Service {name}: {port} targets no port"
    for pod_name, pod in pods.items():
        for container in pod["spec"]["containers"]:
            own = _port_option([str(a) for a in container.get("args", [])])
            if own is not None:
                ports = {p["containerPort"] for p in container.get("ports", [])}
                assert own in ports, f"{pod_name} listens on {own}, declares {ports}"
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    for where, host, port in _endpoints(config["data"], []):
        short = host.split(".")[0]
        in_namespace = "." not in host or host.split(".")[1] == config["metadata"]["namespace"]
        if not in_namespace:
            continue  # an external dependency (Kafka, Elasticsearch, Redis): documented
        assert short in services, f"ConfigMap {where}: no Service {short}"
        assert port in {p["port"] for p in services[short]["spec"]["ports"]}, (
            f"{where}: port {port}"
        )


def test_k8s_tiers_point_at_llama_cpp_or_vllm() -> None:
    cpu = _kustomize(K8S_VARIANTS["cpu"])
    gpu = _kustomize(K8S_VARIANTS["gpu"])

    def data(docs: list[dict[str, Any]]) -> dict[str, str]:
        return next(d for d in docs if d["kind"] == "ConfigMap")["data"]

    def gpus(docs: list[dict[str, Any]]) -> set[str]:
        return {
            name
            for name, pod in _pods(docs).items()
            for c in pod["spec"]["containers"]
            if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
        }

    assert urlsplit(data(cpu)["RAGSTREAM_GENERATION__SMALL__BASE_URL"]).hostname == "llm"
    assert urlsplit(data(cpu)["RAGSTREAM_GENERATION__LARGE__BASE_URL"]).hostname == "llm"
    assert urlsplit(data(gpu)["RAGSTREAM_GENERATION__SMALL__BASE_URL"]).hostname == "llm"
    assert urlsplit(data(gpu)["RAGSTREAM_GENERATION__LARGE__BASE_URL"]).hostname == "vllm"
    assert gpus(cpu) == set() and gpus(gpu) == {"vllm"}
    vllm = _pods(gpu)["vllm"]["spec"]["containers"][0]
    assert vllm["command"] == ["vllm", "serve"]
    served = vllm["args"][vllm["args"].index("--served-model-name") + 1]
    assert data(gpu)["RAGSTREAM_GENERATION__LARGE__MODEL"] == served


@pytest.mark.parametrize("variant", K8S_VARIANTS)
def test_k8s_ships_no_secret(variant: str) -> None:
    docs = _kustomize(K8S_VARIANTS[variant])
    assert not [d for d in docs if d["kind"] == "Secret"], "a Secret with shipped values"
    problems = []
    for d in docs:
        if d["kind"] == "ConfigMap":
            for key, raw in d["data"].items():
                problems += _secret_defaults(key, str(raw))
    for name, pod in _pods(docs).items():
        for container in pod["spec"]["containers"]:
            for var in container.get("env", []):
                if SECRET_NAME.search(var["name"]) and "value" in var:
                    problems.append(f"{name}: {var['name']} has a literal value")
    assert problems == []


#: Service keys of the Compose specification these files may use (a typo or a block pasted at
#: the wrong indentation shows up as another key).
COMPOSE_SERVICE_KEYS = {
    "image", "command", "entrypoint", "environment", "depends_on", "ports", "expose", "volumes",
    "healthcheck", "restart", "profiles", "deploy", "ipc", "shm_size",
}  # fmt: skip


def test_compose_services_use_only_known_keys_and_wait_for_migrations() -> None:
    doc = _compose_doc()
    for name, svc in doc["services"].items():
        unknown = set(svc) - COMPOSE_SERVICE_KEYS
        assert not unknown, f"compose service {name}: unknown keys {sorted(unknown)}"
        if svc.get("image") == RAGSTREAM_IMAGE and name not in {"migrate", "topics", "llm"}:
            assert "migrate" in svc.get("depends_on", {}), f"{name} starts before the migration"
            assert "topics" in svc.get("depends_on", {}), f"{name} starts before its topics"


def test_compose_health_checks_are_strings_and_long_running_services_restart() -> None:
    """podman-compose 1.0.3 (Debian 12) quotes a ["CMD", ...] list into a shell syntax error
    and appends an override's list to the base's: every health check is a string (issue 38).
    Every service but the one-shots has a restart policy."""
    for path in (COMPOSE, COMPOSE_LOCAL):
        doc = yaml.safe_load(path.read_text())
        for name, svc in doc["services"].items():
            test = (svc.get("healthcheck") or {}).get("test", "")
            assert isinstance(test, str), f"{path.name} {name}: healthcheck.test is a list"
            assert isinstance(svc.get("command", ""), str) or path == COMPOSE, name
    for name, svc in _compose_doc()["services"].items():
        if name not in {"migrate", "topics"}:
            assert svc.get("restart") == "unless-stopped", f"{name} is not restarted"
        else:
            assert "restart" not in svc, f"one-shot {name} restarts"


def test_the_local_override_names_the_built_images_and_binds_no_fixed_port() -> None:
    from infra.images import TARGETS, image_name

    local = yaml.safe_load(COMPOSE_LOCAL.read_text())
    images = {svc["image"] for svc in local["services"].values() if "image" in svc}
    assert images == {f"localhost/{image_name(t)}" for t in TARGETS if t != "ragstream"}
    assert set(local["services"]) <= set(_compose_doc()["services"])
    for svc in local["services"].values():
        assert "ports" not in svc
        for volume in svc.get("volumes", []):
            assert volume.split(":")[0] in local["volumes"], volume
            assert volume.split(":")[1].startswith("/var/lib/ragstream/"), volume
    for name in ("api", "flower"):
        (port,) = _compose_doc()["services"][name]["ports"]
        assert port.startswith("${") and _interpolate(port).endswith(":" + port.rsplit(":", 1)[1])


UPLOADS = "/var/lib/ragstream/uploads"
#: The services that write uploads (the API) or read them (the ingest pool: path events of
#: multipart documents; the Celery worker: extracted archives of bulk jobs).
UPLOAD_SERVICES = {"api", "worker-ingest", "celery-worker"}


def test_compose_shares_one_uploads_volume_at_the_upload_root() -> None:
    from ragstream.settings import IngestSettings

    services = _compose_doc()["services"]
    mounting = {
        name for name, svc in services.items() if f"uploads:{UPLOADS}" in svc.get("volumes", [])
    }
    assert mounting == UPLOAD_SERVICES
    assert "uploads" in _compose_doc()["volumes"]
    env = _env(services["api"])
    ingest = IngestSettings(
        upload_root=env["RAGSTREAM_INGEST__UPLOAD_ROOT"],
        allowed_roots=yaml.safe_load(env["RAGSTREAM_INGEST__ALLOWED_ROOTS"]),
    )  # the settings' own check: the upload root is an allowed root
    assert str(ingest.upload_root) == UPLOADS
    assert all(_env(services[name]) == env for name in UPLOAD_SERVICES)


def test_k8s_mounts_one_read_write_many_claim_at_the_upload_root() -> None:
    docs = _kustomize(K8S_DIR)
    [claim] = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    [config] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config["data"]["RAGSTREAM_INGEST__UPLOAD_ROOT"] == UPLOADS
    assert UPLOADS in yaml.safe_load(config["data"]["RAGSTREAM_INGEST__ALLOWED_ROOTS"])
    mounting = set()
    for name, template in _pods(docs).items():
        pod = template["spec"]
        claims = {
            v["name"]
            for v in pod.get("volumes", [])
            if v.get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"]
        }
        mounts = [m for c in pod["containers"] for m in c.get("volumeMounts", [])]
        if any(m["name"] in claims and m["mountPath"] == UPLOADS for m in mounts):
            mounting.add(name)
    assert mounting == UPLOAD_SERVICES


def test_the_manuals_override_binds_the_allowed_manuals_read_only() -> None:
    from ragstream.settings import IngestSettings

    manuals = yaml.safe_load((PROJECT_ROOT / "infra" / "compose.manuals.yaml").read_text())
    allowed = {str(p) for p in IngestSettings().allowed_roots}
    assert set(manuals["services"]) == {"worker-ingest", "celery-worker"}
    for svc in manuals["services"].values():
        binds = [v.split(":") for v in svc["volumes"]]
        assert {host for host, _, _ in binds} == {
            "/usr/share/doc/python3.11/html",
            "/usr/share/doc/postgresql-doc-15/html",
        }
        assert all(
            host == inside and host in allowed and mode == "ro" for host, inside, mode in binds
        )
