"""A private service instance (the chaos suite's broker and node): its data, config and PID file
under its own ``local_dir``, the binaries from ``install_dir``."""

from __future__ import annotations

from pathlib import Path

from infra.elasticsearch_service import ElasticsearchService
from infra.kafka_service import KafkaService
from ragstream.settings import InfraSettings, Settings


def test_private_instance_keeps_its_state_apart_and_shares_the_binaries(tmp_path: Path) -> None:
    shared, mine = tmp_path / "shared", tmp_path / "mine"
    infra = InfraSettings(local_dir=mine, install_dir=shared, kafka_port=19092)
    kafka = KafkaService(Settings(infra=infra))
    assert kafka.libs == shared / "kafka" / "libs"
    for path in (kafka.data_dir, kafka.config_file, kafka.pid_file, kafka.logs_dir):
        assert path.is_relative_to(mine / "kafka")
    assert f"log.dirs={mine / 'kafka' / 'data'}" in kafka.server_properties()
    assert "PLAINTEXT://127.0.0.1:19092" in kafka.server_properties()
    es = ElasticsearchService(Settings(infra=infra))
    assert es.es_home.parent == shared / "elasticsearch"
    assert es.config_dir.is_relative_to(mine) and es.pid_file.is_relative_to(mine)


def test_without_install_dir_binaries_live_under_local_dir(tmp_path: Path) -> None:
    kafka = KafkaService(Settings(infra=InfraSettings(local_dir=tmp_path)))
    assert kafka.libs == tmp_path / "kafka" / "libs" and kafka.install_home == kafka.home
