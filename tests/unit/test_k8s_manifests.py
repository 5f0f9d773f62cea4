"""Every manifest of infra/k8s/ is valid against its schema (issue 38, item 4), in ``make lint``.

- Kubernetes objects: kubernetes-validate's bundled (offline) OpenAPI schemas of the oldest and
  the newest release named in :data:`KUBERNETES_VERSIONS`, strict: an unknown field fails.
- KEDA ``ScaledObject``\\ s: KEDA's own CRD schema of the version named in tests/unit/test_keda.py
  (vendored under tests/fixtures/keda/), strict in the same way.
- ``kustomization.yaml`` files: kustomize's fields only, every resource present, and each variant
  (CPU, GPU overlay, KEDA) as ``kubectl apply -k`` builds it, ConfigMap patches merged, is valid.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from ragstream.settings import PROJECT_ROOT
from tests.unit.test_deploy_files import _kustomize
from tests.unit.test_keda import _errors as keda_errors

K8S_DIR = PROJECT_ROOT / "infra" / "k8s"
#: The oldest and the newest Kubernetes release the manifests are checked against.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
KEDA = ("keda.sh/v1alpha1", "ScaledObject")
KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")
#: Fields of kustomize's ``Kustomization`` (sigs.k8s.io/kustomize/api/types) used or usable here.
KUSTOMIZATION_FIELDS = {
    "apiVersion",
    "kind",
    "metadata",
    "resources",
    "components",
    "patches",
    "namespace",
    "namePrefix",
    "nameSuffix",
    "labels",
    "commonAnnotations",
    "images",
    "replicas",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
}
VARIANTS = {"cpu": K8S_DIR, "gpu": K8S_DIR / "gpu", "keda": K8S_DIR / "keda"}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S_DIR.glob("**/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((str(path.relative_to(K8S_DIR)), doc))
    return found


def manifest_errors(doc: dict[str, Any], base: Path = K8S_DIR) -> list[str]:
    """Schema errors of one manifest (empty when valid).

    Args:
        doc: One YAML document.
        base: The folder of a ``Kustomization`` (its resources are relative to it).

    Returns:
        One line per error, for every version of :data:`KUBERNETES_VERSIONS`.
    """
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key == KEDA:
        return keda_errors(doc)
    if key == KUSTOMIZATION:
        errors = [f"unknown kustomization field {k}" for k in set(doc) - KUSTOMIZATION_FIELDS]
        errors += [
            f"missing resource {r}" for r in doc.get("resources", []) if not (base / r).exists()
        ]
        errors += [
            f"patch without target: {p}" for p in doc.get("patches", []) if "target" not in p
        ]
        return errors
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{version}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except (
            kubernetes_validate.SchemaNotFoundError,
            kubernetes_validate.InvalidSchemaError,
        ) as exc:
            errors.append(f"{version}: no schema: {exc}")
    return errors


def test_the_validator_has_its_schemas_offline() -> None:
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    for version in KUBERNETES_VERSIONS:
        assert (schemas / f"v{version}-local-strict" / "deployment-apps-v1.json").is_file()


@pytest.mark.parametrize(
    ("name", "doc"),
    _documents(),
    ids=[f"{n}:{d.get('kind')}/{d.get('metadata', {}).get('name', '')}" for n, d in _documents()],
)
def test_every_manifest_is_valid_against_its_schema(name: str, doc: dict[str, Any]) -> None:
    assert manifest_errors(doc, (K8S_DIR / name).parent) == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_as_kustomize_builds_it_is_valid(variant: str) -> None:
    docs = _kustomize(VARIANTS[variant])
    assert docs
    for doc in docs:
        assert manifest_errors(doc) == [], f"{variant}: {doc['kind']}/{doc['metadata']['name']}"


def test_the_gpu_overlay_and_keda_objects_are_among_the_checked() -> None:
    kinds = {(name, doc["kind"]) for name, doc in _documents()}
    assert ("gpu/vllm.yaml", "Deployment") in kinds
    assert ("keda/scaledobjects.yaml", "ScaledObject") in kinds
    assert ("gpu/kustomization.yaml", "Kustomization") in kinds


def _deployment() -> dict[str, Any]:
    return copy.deepcopy(
        next(d for n, d in _documents() if n == "gpu/vllm.yaml" and d["kind"] == "Deployment")
    )


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


CONTAINER = ("spec", "template", "spec", "containers", 0)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "replicas"), "1"),  # an integer
        (("spec", "replica"), 1),  # unknown field (strict)
        ((*CONTAINER, "readinessProbe", "httpGet", "port"), [8000]),  # int or string
        ((*CONTAINER, "resources", "limit"), {"memory": "1Gi"}),  # the field is "limits"
        ((*CONTAINER, "ports", 0, "containerPort"), "8000"),  # an integer
    ],
)
def test_the_check_catches_an_invalid_manifest(path: tuple[Any, ...], value: Any) -> None:
    assert manifest_errors(_set(_deployment(), path, value))


def test_the_check_catches_a_missing_required_field() -> None:
    doc = _deployment()
    del doc["spec"]["template"]["spec"]["containers"][0]["name"]
    assert manifest_errors(doc)


def test_the_check_catches_an_invalid_scaled_object_and_kustomization() -> None:
    scaled = copy.deepcopy(next(d for n, d in _documents() if d["kind"] == "ScaledObject"))
    scaled["spec"]["maxReplicas"] = 4
    assert manifest_errors(scaled)
    header = {"apiVersion": KUSTOMIZATION[0], "kind": KUSTOMIZATION[1]}
    assert manifest_errors({**header, "resource": ["vllm.yaml"]})  # the field is "resources"
    assert manifest_errors({**header, "resources": ["no-such-file.yaml"]})
