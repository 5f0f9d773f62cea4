"""``ragstream dlq inspect`` on the real broker: it lists the newest dead letters with their
reason and consumes nothing (a replay afterwards still gets every letter); and ``ragstream
health`` probes the real LLM server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from typer.testing import CliRunner

from entry.cli import app
from ragstream.health import probe_llm_servers
from ragstream.settings import Settings, get_settings
from topics.admin import ensure_topics, make_admin
from topics.consumer import make_consumer
from topics.dlq import SourceRecord, dead_letter_headers, inspect
from topics.dlq_replay import replay
from topics.producer import EventProducer, make_producer
from topics.registry import QUERIES, TopicRegistry

pytestmark = pytest.mark.integration


@pytest.fixture
def dlq(settings: Settings, unique_name: Callable[[str], str]) -> Iterator[tuple[str, str]]:
    """``(prefix, dlq topic)`` with three dead letters of ``rag.queries``."""
    prefix = unique_name("dlqi") + "."
    registry = TopicRegistry(prefix)
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    topic, dlq_topic = registry.name(QUERIES), registry.dlq(QUERIES)
    producer = EventProducer(make_producer(settings.kafka))
    for offset in range(3):
        source = SourceRecord(topic, 0, offset, f"k{offset}".encode(), b"{not json", [])
        headers = dead_letter_headers(source, ValueError(f"bad event {offset}"), 1, "retrieval")
        producer.send_raw(dlq_topic, source.key, source.value, headers)
    producer.flush()
    producer.close()
    yield prefix, dlq_topic


def test_inspect_lists_the_newest_letters_without_consuming(
    settings: Settings, dlq: tuple[str, str], unique_name: Callable[[str], str]
) -> None:
    _, dlq_topic = dlq
    consumer = make_consumer(settings.kafka, group=None)
    try:
        listing = inspect(consumer, dlq_topic, limit=2)
    finally:
        consumer.close(autocommit=False)
    assert listing.total == 3
    assert [v.key for v in listing.letters] == ["k1", "k2"]
    assert listing.letters[0].context["error.message"] == "bad event 1"
    assert listing.letters[0].context["pool"] == "retrieval"

    group = unique_name("replay")
    replayer = make_consumer(settings.kafka, group=group)
    producer = EventProducer(make_producer(settings.kafka))
    try:
        assert replay(replayer, producer, dlq_topic).replayed == 3
    finally:
        replayer.close(autocommit=False)
        producer.close()


def test_the_cli_shows_reasons(dlq: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, dlq_topic = dlq
    monkeypatch.setenv("RAGSTREAM_KAFKA__TOPIC_PREFIX", prefix)
    get_settings.cache_clear()
    try:
        table = CliRunner().invoke(app, ["dlq", "inspect", "rag.queries"])
        lines = CliRunner().invoke(app, ["dlq", "inspect", "rag.queries", "--json", "--limit", "1"])
        missing = CliRunner().invoke(app, ["dlq", "inspect", "rag.nothing"])
    finally:
        get_settings.cache_clear()
    assert table.exit_code == 0, table.output
    assert f"3 dead letter(s) in {dlq_topic}" in table.output
    assert "ValueError" in table.output and "bad event 0" in table.output
    [letter] = [json.loads(line) for line in lines.output.splitlines()]
    assert letter["key"] == "k2" and letter["error.message"] == "bad event 2"
    assert letter["source.topic"].endswith("rag.queries") and letter["bytes"] == 9
    assert missing.exit_code == 2


def test_health_probes_the_llm_server(settings: Settings) -> None:
    [probe] = probe_llm_servers(settings)  # both tiers use the local server by default
    assert probe.name == "llm (small, large)"
    assert probe.healthy, probe.detail
