"""KEDA ``ScaledObject`` s that scale each pool's Deployment on its consumer group's lag
(issue 26, item 3).

``python -m entry.keda`` writes ``infra/k8s/keda/scaledobjects.yaml`` from the settings
(``settings.scaling``: replica bounds and lag threshold per pool, polling, cool-down and the
stabilization windows; the topic prefix for the group and topic names); ``--check`` exits 1
when the file differs from what the settings give. ``kubectl apply -k infra/k8s/keda/`` applies
the base manifests and these (KEDA 2.x must be installed in the cluster).

Each pool's trigger is KEDA's Kafka scaler on the pool's input topic and consumer group
(``topics.registry.POOL_INPUTS``, ``workers.runtime.build.pool_group``): replicas =
ceil(lag / ``lagThreshold``) within ``minReplicaCount`` .. ``maxReplicaCount`` (KEDA caps it at
the topic's partitions too; the file says so by never asking for more). The brokers come
from the Deployment's own ``RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS`` (``bootstrapServersFromEnv``),
so the ConfigMap stays their one source. The HPA behaviour mirrors the supervisor's
``--autoscale`` (``entry/autoscale.py``): one replica more per ``scale_up_after_s`` while the
lag stays high, one fewer per ``idle_after_s`` once it stays low.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from ragstream.settings import PROJECT_ROOT, Settings, get_settings
from topics.registry import POOL_INPUTS, TopicRegistry
from workers.runtime.build import pool_group

#: The generated manifests, beside the overlay's kustomization.yaml.
OUTPUT = PROJECT_ROOT / "infra" / "k8s" / "keda" / "scaledobjects.yaml"
NAMESPACE = "ragstream"
#: The ConfigMap variable the pods read their brokers from (infra/k8s/ragstream.yaml).
BOOTSTRAP_ENV = "RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS"
HEADER = (
    "# Written by `python -m entry.keda` from settings.scaling (docs/operations.md, Scaling on\n"
    "# consumer lag); edit the settings and run it again, not this file.\n"
)


def deployment_name(pool: str) -> str:
    """The Deployment that runs ``ragstream worker <pool>`` in ``infra/k8s/ragstream.yaml``."""
    return f"worker-{pool}"


def scaled_object(settings: Settings, pool: str) -> dict[str, Any]:
    """The ``keda.sh/v1alpha1`` ``ScaledObject`` of ``pool`` (a key of ``POOL_INPUTS``)."""
    scaling = settings.scaling
    bounds = scaling.for_pool(pool)
    spec = POOL_INPUTS[pool]
    topic = TopicRegistry(settings.kafka.topic_prefix).name(spec)
    up_s = max(1, round(scaling.scale_up_after_s))
    idle_s = max(1, round(scaling.idle_after_s))
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": deployment_name(pool), "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"name": deployment_name(pool)},
            "pollingInterval": scaling.polling_interval_s,
            "cooldownPeriod": scaling.cooldown_period_s,
            "minReplicaCount": bounds.min_replicas,
            "maxReplicaCount": min(bounds.max_replicas, spec.partitions),
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleUp": {
                            "stabilizationWindowSeconds": up_s,
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": up_s}],
                        },
                        "scaleDown": {
                            "stabilizationWindowSeconds": idle_s,
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": idle_s}],
                        },
                    }
                }
            },
            "triggers": [
                {
                    "type": "kafka",
                    "name": "consumer-lag",
                    "metadata": {
                        "bootstrapServersFromEnv": BOOTSTRAP_ENV,
                        "consumerGroup": pool_group(settings, pool),
                        "topic": topic,
                        "lagThreshold": str(bounds.lag_threshold),
                        "activationLagThreshold": str(bounds.activation_lag_threshold),
                        "offsetResetPolicy": "earliest",
                    },
                }
            ],
        },
    }


def render(settings: Settings) -> str:
    """Every pool's ``ScaledObject`` as one YAML stream, :data:`HEADER` first."""
    docs = [scaled_object(settings, pool) for pool in POOL_INPUTS]
    return HEADER + yaml.safe_dump_all(docs, sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> None:
    """``python -m entry.keda [--check] [--out PATH]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render(get_settings())
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is stale: run python -m entry.keda", file=sys.stderr)
            raise SystemExit(1)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
