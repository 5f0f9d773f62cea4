"""The KEDA ScaledObjects of infra/k8s/keda/ (issue 26, item 3): valid against KEDA's own CRD
schema (vendored, tests/fixtures/keda/), one per pool on its group's lag, with the bounds and
thresholds of the settings, and the committed file is what the settings give."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from entry.keda import BOOTSTRAP_ENV, OUTPUT, main, render, scaled_object
from ragstream.settings import PoolScaling, ScalingSettings, Settings
from topics.registry import POOL_INPUTS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "keda" / "scaledobject-v2.20.2.json"
K8S = OUTPUT.parents[1]


def _strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it with field validation: an object that lists
    its ``properties`` takes no other field (unless it keeps unknown fields)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


FIXTURE_DATA = json.loads(FIXTURE.read_text())
VALIDATOR = jsonschema.Draft4Validator(_strict(FIXTURE_DATA["openAPIV3Schema"]))
KAFKA_KEYS = set(FIXTURE_DATA["kafka_trigger_metadata"])


def _errors(doc: dict[str, Any]) -> list[str]:
    found = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(doc)]
    for trigger in doc["spec"]["triggers"]:
        found += [f"kafka trigger: unknown {k}" for k in set(trigger["metadata"]) - KAFKA_KEYS]
    return found


def _committed() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(OUTPUT.read_text()) if d]


def test_every_committed_scaled_object_is_valid_against_the_keda_crd() -> None:
    docs = _committed()
    assert docs
    for doc in docs:
        assert doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject"
        assert _errors(doc) == [], doc["metadata"]["name"]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "maxReplicas"), 4),  # not a ScaledObject field (the HPA's name)
        (("spec", "minReplicaCount"), "1"),  # an integer
        (("spec", "triggers", 0, "metadata", "lagThreshold"), 50),  # metadata are strings
        (("spec", "triggers", 0, "metadata", "lagTreshold"), "50"),  # unknown to the scaler
        (("spec", "scaleTargetRef"), {"kind": "Deployment"}),  # the name is required
    ],
)
def test_the_check_catches_a_wrong_field(path: tuple[Any, ...], value: Any) -> None:
    doc = copy.deepcopy(_committed()[0])
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert _errors(doc)


def test_one_per_pool_on_its_group_and_input_topic_targeting_its_deployment() -> None:
    deployments: dict[str, Any] = {}
    for doc in yaml.safe_load_all((K8S / "ragstream.yaml").read_text()):
        if doc and doc["kind"] == "Deployment":
            deployments[doc["metadata"]["name"]] = doc
    config = next(
        d
        for d in yaml.safe_load_all((K8S / "ragstream.yaml").read_text())
        if d["kind"] == "ConfigMap"
    )
    assert BOOTSTRAP_ENV in config["data"]
    by_target = {d["spec"]["scaleTargetRef"]["name"]: d for d in _committed()}
    assert len(by_target) == len(POOL_INPUTS)
    for pool, spec in POOL_INPUTS.items():
        doc = by_target[f"worker-{pool}"]
        (container,) = deployments[f"worker-{pool}"]["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["worker", pool]
        assert {"configMapRef": {"name": config["metadata"]["name"]}} in container["envFrom"]
        (trigger,) = doc["spec"]["triggers"]
        assert trigger["type"] == "kafka"
        assert trigger["metadata"]["consumerGroup"] == f"ragstream-{pool}"
        assert trigger["metadata"]["topic"] == spec.name
        assert doc["spec"]["maxReplicaCount"] <= spec.partitions
    kustomization = yaml.safe_load((OUTPUT.parent / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../", OUTPUT.name]


def test_bounds_and_thresholds_come_from_the_settings() -> None:
    scaling = ScalingSettings(
        default=PoolScaling(min_replicas=2, max_replicas=5, lag_threshold=120),
        pools={"delivery": PoolScaling(min_replicas=0, max_replicas=40, lag_threshold=7)},
        polling_interval_s=5,
        idle_after_s=90,
    )
    settings = Settings(scaling=scaling)
    retrieval = scaled_object(settings, "retrieval")["spec"]
    assert (retrieval["minReplicaCount"], retrieval["maxReplicaCount"]) == (2, 5)
    assert retrieval["triggers"][0]["metadata"]["lagThreshold"] == "120"
    assert retrieval["pollingInterval"] == 5
    behavior = retrieval["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 90
    delivery = scaled_object(settings, "delivery")
    # 40 asked, 6 partitions: KEDA would idle 34 of them.
    assert (delivery["spec"]["minReplicaCount"], delivery["spec"]["maxReplicaCount"]) == (0, 6)
    assert delivery["spec"]["triggers"][0]["metadata"]["lagThreshold"] == "7"
    prefixed = Settings(kafka={"topic_prefix": "staging."})
    meta = scaled_object(prefixed, "retrieval")["spec"]["triggers"][0]["metadata"]
    assert (meta["consumerGroup"], meta["topic"]) == (
        "staging.ragstream-retrieval",
        "staging.rag.queries",
    )
    for doc in yaml.safe_load_all(render(settings)):
        assert _errors(doc) == []


def test_the_committed_file_is_what_the_default_settings_give(tmp_path: Path) -> None:
    assert OUTPUT.read_text() == render(Settings()), "run: python -m entry.keda"
    stale = tmp_path / "so.yaml"
    stale.write_text("old\n")
    with pytest.raises(SystemExit):
        main(["--check", "--out", str(stale)])
    main(["--out", str(stale)])
    main(["--check", "--out", str(stale)])
