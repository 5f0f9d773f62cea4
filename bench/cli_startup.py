"""``python -m bench.cli_startup``: two helpers that time ``ragstream query`` without the pools.

- ``answer``: a stand-in for the pools. It reads every new query event on
  ``<kafka.topic_prefix>rag.queries`` and at once produces an ``answered`` response for it on
  ``rag.responses`` (evidence tier, one fixed sentence), until interrupted. With it running,
  ``ragstream query "..."`` runs end to end (start-up, Kafka round trip, printing, exit) with
  no pool work in it. Use a topic prefix of your own (``RAGSTREAM_KAFKA__TOPIC_PREFIX``, topics
  made by ``ragstream topics create``) so that no pool and no other reader sees its events.
- ``first-connect ARGS...``: runs ``ragstream ARGS`` and ends the process (exit 0) at its first
  socket connection, so that timing it gives the command's start-up up to its first network
  call (the Kafka client's bootstrap, or the HTTP request with ``--api``); exit 3 if the
  command ended without connecting.

Example (the numbers in docs/benchmarks/index.md, "CLI start-up")::

    export RAGSTREAM_KAFKA__TOPIC_PREFIX=clistartup.
    ragstream topics create
    python -m bench.cli_startup answer &
    hyperfine -N --warmup 2 --runs 10 'ragstream --help' 'ragstream query "What does VACUUM do?"'
    hyperfine -N --warmup 2 --runs 10 \\
        'python -m bench.cli_startup first-connect query "What does VACUUM do?"'

A benchmark helper, not a test; tests/unit/test_cli_imports.py asserts what the command imports.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
from typing import Any, NoReturn

#: The stand-in's answer to every question.
ANSWER = "VACUUM reclaims the storage occupied by dead tuples. [1]"


def answer_forever() -> NoReturn:
    """Answer each new query event on the settings' topic prefix at once (see the module).

    Raises:
        RuntimeError: the queries topic does not exist (``ragstream topics create``).
    """
    from kafka import TopicPartition

    from ragstream.settings import get_settings
    from topics.consumer import make_consumer
    from topics.producer import make_producer
    from topics.queries import QueryRequest
    from topics.registry import QUERIES, RESPONSES, TopicRegistry
    from topics.responses import QueryResponse
    from topics.serde import decode, encode

    settings = get_settings()
    registry = TopicRegistry(settings.kafka.topic_prefix)
    queries, responses = registry.name(QUERIES), registry.name(RESPONSES)
    consumer = make_consumer(settings.kafka, group=None, client_id="bench-cli-startup")
    ids = consumer.partitions_for_topic(queries)
    if not ids:
        raise RuntimeError(f"topic {queries!r} does not exist (ragstream topics create)")
    parts = [TopicPartition(queries, p) for p in sorted(ids)]
    consumer.assign(parts)
    consumer.seek_to_end(*parts)
    for tp in parts:
        consumer.position(tp)
    producer = make_producer(settings.kafka)
    print(f"answering queries on {queries}", flush=True)
    while True:
        for records in consumer.poll(timeout_ms=50).values():
            for record in records:
                query = decode(
                    QueryRequest, record.value, key=record.key, timestamp_ms=record.timestamp
                )
                reply = QueryResponse(
                    tenant=query.tenant,
                    request_id=query.request_id,
                    status="answered",
                    answer=ANSWER,
                    tier="evidence",
                )
                producer.send(responses, key=reply.key(), value=encode(reply))
                producer.flush()


def _stop_at_connect(*_args: Any, **_kwargs: Any) -> NoReturn:
    os._exit(0)


def run_to_first_connect(argv: list[str]) -> NoReturn:
    """Run ``ragstream argv`` in this process (``python -m entry.cli``, as a program, the way
    :mod:`bench.idle_cpu` runs a pool); exit 0 at its first socket connection, 3 if it returns
    without one."""
    socket.socket.connect = _stop_at_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _stop_at_connect  # type: ignore[method-assign]
    sys.argv = ["ragstream", *argv]
    try:
        runpy.run_module("entry.cli", run_name="__main__", alter_sys=True)
    finally:
        sys.stderr.write("the command ended without a network connection\n")
        os._exit(3)


def main(argv: list[str] | None = None) -> None:
    """``answer`` or ``first-connect ARGS...`` (see the module)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["answer"]:
        answer_forever()
    if args[:1] == ["first-connect"] and len(args) > 1:
        run_to_first_connect(args[1:])
    sys.stderr.write(__doc__ or "")
    sys.exit(2)


if __name__ == "__main__":
    main()
