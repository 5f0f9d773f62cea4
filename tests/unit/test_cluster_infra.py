"""The replicated cluster of ``infra cluster up`` (issue 26, item 1), as configuration: the
nodes' ports, folders, quorum and replication, and the clients' view of it. The cluster itself
runs in the cluster chaos suite (tests/integration/test_chaos_cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.cluster import Cluster, _last_transition, client_env, client_settings
from infra.kafka_service import KafkaService
from ragstream.settings import ClusterSettings, InfraSettings, KafkaSettings, Settings


def _settings(tmp_path: Path) -> Settings:
    infra = InfraSettings(local_dir=tmp_path / "local", install_dir=tmp_path / "shared")
    return Settings(infra=infra)


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and "#" not in line)


def test_kafka_nodes_form_one_static_quorum_with_replicated_internal_topics(
    tmp_path: Path,
) -> None:
    cluster = Cluster.from_settings(_settings(tmp_path))
    assert [k.label for k in cluster.kafka] == ["kafka-1", "kafka-2", "kafka-3"]
    props = [_props(k.server_properties()) for k in cluster.kafka]
    voters = "1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194"
    for n, p in enumerate(props, start=1):
        assert p["node.id"] == str(n)
        assert p["controller.quorum.voters"] == voters
        assert "controller.quorum.bootstrap.servers" not in p
        assert p["process.roles"] == "broker,controller"
        assert p["listeners"].startswith(f"PLAINTEXT://127.0.0.1:{19091 + n},")
        for key in ("default.replication.factor", "offsets.topic.replication.factor"):
            assert p[key] == "3"
        assert p["min.insync.replicas"] == p["transaction.state.log.min.isr"] == "2"
        assert (p["broker.session.timeout.ms"], p["broker.heartbeat.interval.ms"]) == (
            "4000",
            "1000",
        )
    # Own data and PID file per node, the binaries shared, one cluster id for all.
    homes = {k.home for k in cluster.kafka}
    assert len(homes) == 3 and all(h.is_relative_to(tmp_path / "local" / "cluster") for h in homes)
    assert {k.libs for k in cluster.kafka} == {tmp_path / "shared" / "kafka" / "libs"}
    assert len({k.pid_file for k in cluster.kafka}) == 3
    assert len({k.cluster_id for k in cluster.kafka}) == 1
    again = Cluster.from_settings(_settings(tmp_path))
    assert again.kafka[0].cluster_id == cluster.kafka[0].cluster_id  # kept across starts


def test_single_broker_keeps_todays_configuration(tmp_path: Path) -> None:
    p = _props(KafkaService(_settings(tmp_path)).server_properties())
    assert p["node.id"] == "1" and "controller.quorum.voters" not in p
    assert p["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert p["default.replication.factor"] == p["offsets.topic.replication.factor"] == "1"
    assert p["min.insync.replicas"] == "1" and "broker.session.timeout.ms" not in p
    with pytest.raises(ValueError, match="cluster's id"):
        KafkaService(_settings(tmp_path), voters="1@127.0.0.1:1")


def test_elasticsearch_nodes_one_master_the_rest_data_with_their_own_ports(
    tmp_path: Path,
) -> None:
    cluster = Cluster.from_settings(_settings(tmp_path))
    first, second = cluster.elasticsearch
    yml = [e.elasticsearch_yml() for e in cluster.elasticsearch]
    assert "discovery.type" not in yml[0] + yml[1]
    assert 'discovery.seed_hosts: ["127.0.0.1:19300", "127.0.0.1:19301"]' in yml[0]
    assert f'cluster.initial_master_nodes: ["{first.cluster_name}-1"]' in yml[1]
    assert 'node.roles: ["master", "data", "ingest"]' in yml[0]
    assert 'node.roles: ["data", "ingest"]' in yml[1]
    assert (first.ports, second.ports) == ((19200, 19300), (19201, 19301))
    assert first.cluster_name == second.cluster_name != "ragstream-local"
    assert first.config_dir != second.config_dir and first.es_home == second.es_home
    assert first.log_files()[1].name == f"{first.cluster_name}.log"


def test_clients_see_every_node_and_the_cluster_replication(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    mine = client_settings(settings)
    assert mine.kafka.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert (mine.kafka.replication_factor, mine.kafka.min_insync_replicas) == (3, 2)
    assert mine.elasticsearch.hosts == ["http://127.0.0.1:19200", "http://127.0.0.1:19201"]
    assert mine.elasticsearch.replicas == 1
    env = client_env(settings)
    assert env["RAGSTREAM_ELASTICSEARCH__URL"] == mine.elasticsearch.url
    # The single-node defaults are today's.
    assert (settings.kafka.replication_factor, settings.kafka.min_insync_replicas) == (1, 1)
    assert settings.elasticsearch.replicas == 0
    assert settings.elasticsearch.hosts == ["http://127.0.0.1:9200"]


def test_impossible_replication_is_refused() -> None:
    with pytest.raises(ValidationError, match="min_insync_replicas"):
        KafkaSettings(replication_factor=1, min_insync_replicas=2)
    with pytest.raises(ValidationError, match="replication_factor <= brokers"):
        ClusterSettings(replication_factor=4)
    with pytest.raises(ValidationError, match="one controller port"):
        ClusterSettings(kafka_ports=[1, 2], kafka_controller_ports=[3])
    with pytest.raises(ValidationError, match="below the node count"):
        ClusterSettings(elasticsearch_replicas=2)


# Lines of Kafka 4.1's org.apache.kafka.raft.QuorumState (shortened).
FOLLOWER = (
    "[2026-12-02 05:16:01,9] INFO [RaftManager id=1] Completed transition to FollowerState("
    "fetchTimeoutMs=2000, epoch=2, leader=3, leaderEndpoints=Endpoints(...)) from ..."
)
LEADER = (
    "[2026-12-02 05:16:01,7] INFO [RaftManager id=3] Completed transition to Leader("
    "localVoterNode=VoterNode(voterKey=ReplicaKey(id=3, directoryId=x)), epoch=4, ...) from ..."
)
CANDIDATE = (
    "[2026-12-02 05:16:02,0] INFO [RaftManager id=1] Completed transition to UnattachedState("
    "epoch=5, leaderId=OptionalInt.empty, votedKey=Optional.empty, voters=[1, 2, 3]) from ..."
)


def test_active_controller_is_read_from_the_newest_raft_transition(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"{FOLLOWER}\nother line\n")
    assert _last_transition(log, node_id=1) == (2, 3)
    log.write_text(f"{FOLLOWER}\n{LEADER}\n")
    assert _last_transition(log, node_id=3) == (4, 3)
    # A state without a leader (an election under way) says nothing: the one before counts.
    log.write_text(f"{FOLLOWER}\n{CANDIDATE}\n")
    assert _last_transition(log, node_id=1) == (2, 3)
    assert _last_transition(tmp_path / "missing.log", node_id=1) is None


class _Admin:
    """The part of ``KafkaAdminClient`` that :func:`ensure_topics` calls to create topics."""

    def __init__(self) -> None:
        self.created: list[object] = []

    def list_topics(self) -> list[str]:
        return []

    def create_topics(self, new: list[object], validate_only: bool) -> None:
        self.created.extend(new)


def test_topics_are_created_at_the_settings_replication() -> None:
    from topics.admin import ensure_registry_topics

    admin = _Admin()
    report = ensure_registry_topics(
        admin,  # type: ignore[arg-type]
        KafkaSettings(replication_factor=3, min_insync_replicas=2, topic_prefix="c."),
    )
    assert report.created and len(admin.created) == len(report.created)
    for topic in admin.created:
        assert topic.replication_factor == 3  # type: ignore[attr-defined]
        assert topic.topic_configs["min.insync.replicas"] == "2"  # type: ignore[attr-defined]
    single = _Admin()
    ensure_registry_topics(single, KafkaSettings())  # type: ignore[arg-type]
    for topic in single.created:
        assert topic.replication_factor == 1  # type: ignore[attr-defined]
        assert "min.insync.replicas" not in topic.topic_configs  # type: ignore[attr-defined]
