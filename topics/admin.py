"""Create the registry's topics idempotently and report drift from their specs."""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from ragstream.settings import KafkaSettings
from topics.registry import PhysicalTopic, TopicRegistry


@dataclass(slots=True)
class TopicReport:
    """What :func:`ensure_topics` found: created topics, existing ones, and drift messages."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)


def make_admin(settings: KafkaSettings) -> KafkaAdminClient:
    """A kafka-python admin client for ``settings.bootstrap_servers``."""
    return KafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.client_id}-admin",
        request_timeout_ms=settings.request_timeout_ms,
    )


def ensure_topics(
    admin: KafkaAdminClient,
    topics: list[PhysicalTopic],
    replication_factor: int = 1,
    min_insync_replicas: int = 1,
) -> TopicReport:
    """Create missing ``topics``; compare existing ones with their spec.

    Args:
        admin: A connected admin client.
        topics: The physical topics (name, partitions, configs).
        replication_factor: Copies of each partition of a created topic.
        min_insync_replicas: Its ``min.insync.replicas`` (an ``acks=all`` write needs that
            many in-sync copies); set on the topic when above 1, Kafka's default.

    Drift (a different partition count, or a different ``retention.ms``/``cleanup.policy``) is
    reported, never changed silently: shrinking partitions is impossible and growing them
    re-keys records.
    """
    report = TopicReport()
    present = set(admin.list_topics())
    missing = [t for t in topics if t.name not in present]
    if missing:
        isr = {"min.insync.replicas": str(min_insync_replicas)} if min_insync_replicas > 1 else {}
        new = [
            NewTopic(t.name, t.partitions, replication_factor, topic_configs={**t.configs, **isr})
            for t in missing
        ]
        try:
            admin.create_topics(new, validate_only=False)
            report.created.extend(t.name for t in missing)
        except TopicAlreadyExistsError:
            # A concurrent creator won the race; they are checked as existing below.
            present = set(admin.list_topics())
    existing = [t for t in topics if t.name in present]
    report.existing.extend(t.name for t in existing)
    if existing:
        report.drift.extend(_drift(admin, existing))
    return report


def _drift(admin: KafkaAdminClient, topics: list[PhysicalTopic]) -> list[str]:
    messages = []
    described = {d["topic"]: d for d in admin.describe_topics([t.name for t in topics])}
    resources = [ConfigResource(ConfigResourceType.TOPIC, t.name) for t in topics]
    configs: dict[str, dict[str, str]] = {}
    for response in admin.describe_configs(resources):
        for resource in response.resources:
            name, entries = resource[3], resource[4]
            configs[name] = {e[0]: e[1] for e in entries}
    for t in topics:
        actual = len(described.get(t.name, {}).get("partitions", []))
        if actual != t.partitions:
            messages.append(f"{t.name}: {actual} partitions, spec says {t.partitions}")
        for key, want in t.configs.items():
            have = configs.get(t.name, {}).get(key)
            if have != want:
                messages.append(f"{t.name}: {key}={have}, spec says {want}")
    return messages


def ensure_registry_topics(admin: KafkaAdminClient, settings: KafkaSettings) -> TopicReport:
    """:func:`ensure_topics` of every topic and DLQ of the registry under
    ``settings.topic_prefix``, at ``settings.replication_factor`` and
    ``settings.min_insync_replicas``."""
    return ensure_topics(
        admin,
        TopicRegistry(settings.topic_prefix).physical_topics(),
        replication_factor=settings.replication_factor,
        min_insync_replicas=settings.min_insync_replicas,
    )


def create_registry_topics(settings: KafkaSettings) -> TopicReport:
    """Create every topic and DLQ of the registry under ``settings.topic_prefix`` (with a
    client of its own; see :func:`ensure_registry_topics`)."""
    admin = make_admin(settings)
    try:
        return ensure_registry_topics(admin, settings)
    finally:
        admin.close()
