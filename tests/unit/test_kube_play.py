"""``python -m infra.kube_play``'s rendering of infra/k8s/ragstream.yaml (issue 38): what it plays
never shares a topic, consumer group, index, Redis database, port or database with the stack
already running on the host. (The play itself ran by hand: docs/operations/containers.md.)"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml

from infra.kube_play import DEFAULT_DEPLOYMENTS, MANIFEST, POOLS, Play, dump, main, render
from ragstream.settings import Settings


def _render(play: Play | None = None) -> list[dict[str, Any]]:
    return render(play or Play(), Settings(), yaml.safe_load_all(MANIFEST.read_text("utf-8")))


def test_the_configmap_points_at_the_host_and_names_everything_its_own() -> None:
    settings = Settings()
    config = _render()[0]
    assert config["kind"] == "ConfigMap"
    data = config["data"]
    assert data["RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS"] == settings.kafka.bootstrap_servers
    assert data["RAGSTREAM_KAFKA__TOPIC_PREFIX"] == "kubeplay."
    assert data["RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS"] == "kubeplay-chunks"
    assert data["RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS"] != settings.elasticsearch.index_alias
    assert data["RAGSTREAM_REDIS__URL"].endswith("/7") and not settings.redis.url.endswith("/7")
    assert data["RAGSTREAM_CELERY__QUEUE"] != settings.celery.queue
    assert {data[f"RAGSTREAM_POOLS__{p.upper()}__METRICS_PORT"] for p in POOLS} == {"0"}
    assert all(isinstance(v, str) for v in data.values())  # a ConfigMap holds strings only


def test_every_played_deployment_runs_once_on_the_host_network_without_ports() -> None:
    deployments = [d for d in _render() if d["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in deployments] == list(DEFAULT_DEPLOYMENTS)
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert deployment["spec"]["replicas"] == 1
        assert pod["hostNetwork"] is True
        assert all("ports" not in c for c in pod["containers"])
    [api] = [d for d in deployments if d["metadata"]["name"] == "api"]
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["api", "--host", "127.0.0.1", "--port", "8010"]
    assert container["readinessProbe"]["httpGet"]["port"] == 8010


def test_the_uploads_claim_is_not_played() -> None:
    """The manifest mounts the PVC ragstream-uploads into api, worker-ingest and celery-worker;
    the play mounts no claim (podman would make a volume that `kube down` leaves)."""
    manifest = [d for d in yaml.safe_load_all(MANIFEST.read_text("utf-8")) if d]
    claimed = {
        d["metadata"]["name"]
        for d in manifest
        if d["kind"] == "Deployment"
        and any(
            "persistentVolumeClaim" in v for v in d["spec"]["template"]["spec"].get("volumes", [])
        )
    }
    assert claimed == {"api", "worker-ingest", "celery-worker"}
    for deployment in (d for d in _render() if d["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert "volumes" not in pod
        assert all("volumeMounts" not in c for c in pod["containers"])


def test_the_secret_holds_the_plays_own_database_and_is_written_as_json() -> None:
    objects = _render(Play(prefix="kp2.", api_port=8011, deployments=("api",)))
    [secret] = [o for o in objects if o["kind"] == "Secret"]
    url = base64.b64decode(secret["data"]["RAGSTREAM_DATABASE__URL"]).decode()
    assert url.endswith(":5433/kp2")
    text = dump(objects)
    [written] = [d for d in text.split("---\n") if '"kind": "Secret"' in d]
    assert json.loads(written) == secret
    assert [o["kind"] for o in yaml.safe_load_all(text)] == ["ConfigMap", "Secret", "Deployment"]


def test_an_unknown_deployment_and_the_stacks_own_prefix_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ValueError, match="no Deployment nope"):
        _render(Play(deployments=("api", "nope")))
    with pytest.raises(SystemExit):
        main(["render", "--prefix", ""])
    assert "--prefix must differ" in capsys.readouterr().err
