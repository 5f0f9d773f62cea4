"""The one registry of topics: name, partitions, retention, cleanup policy, key, event model, DLQ.

Producers, consumers, the admin command and the tests all take topic names from here.
:class:`TopicRegistry` applies an optional name prefix so that tests (and side-by-side
deployments) get their own topics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from topics.base import Event
from topics.ingest import IngestRequest, IngestResult
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from topics.retrieved import RetrievedCandidates
from topics.tokens import AnswerToken

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
DLQ_SUFFIX = ".dlq"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic's contract.

    Attributes:
        name: topic name (without the registry prefix).
        model: the event model of its records.
        key: the event field its records are keyed by.
        partitions: partition count (the pool's parallelism ceiling).
        retention_ms: how long records are kept, in ms.
        cleanup_policy: ``delete`` or ``compact``.
        consumed: whether a pool consumes it; consumed topics have a dead-letter topic.
    """

    name: str
    model: type[Event]
    key: str
    partitions: int = 6
    retention_ms: int = 7 * DAY_MS
    cleanup_policy: str = "delete"
    consumed: bool = True

    @property
    def dlq(self) -> str | None:
        """Name of the dead-letter topic, ``<name>.dlq``, for consumed topics."""
        return self.name + DLQ_SUFFIX if self.consumed else None

    def configs(self) -> dict[str, str]:
        """Topic-level configs as Kafka expects them."""
        return {"retention.ms": str(self.retention_ms), "cleanup.policy": self.cleanup_policy}


QUERIES = TopicSpec("rag.queries", QueryRequest, "request_id", retention_ms=DAY_MS)
RETRIEVED = TopicSpec("rag.retrieved", RetrievedCandidates, "request_id", retention_ms=DAY_MS)
#: Reranked passages, one topic per generation tier (each tier has its own pool and backend).
RERANKED_SMALL = TopicSpec(
    "rag.reranked.small", RerankedPassages, "request_id", retention_ms=DAY_MS
)
RERANKED_LARGE = TopicSpec(
    "rag.reranked.large", RerankedPassages, "request_id", retention_ms=DAY_MS
)
RERANKED_BY_TIER = {"small": RERANKED_SMALL, "large": RERANKED_LARGE}
RESPONSES = TopicSpec("rag.responses", QueryResponse, "request_id")
TOKENS = TopicSpec("rag.tokens", AnswerToken, "request_id", retention_ms=HOUR_MS)
INGEST = TopicSpec("rag.ingest", IngestRequest, "doc_id")
#: An output for consumers outside the product (see :class:`~topics.ingest.IngestResult`): no
#: pool reads it, so it has no dead-letter topic.
INGEST_RESULTS = TopicSpec("rag.ingest.results", IngestResult, "doc_id", consumed=False)

TOPICS: tuple[TopicSpec, ...] = (
    QUERIES,
    RETRIEVED,
    RERANKED_SMALL,
    RERANKED_LARGE,
    RESPONSES,
    TOKENS,
    INGEST,
    INGEST_RESULTS,
)

#: The topic each pool (``ragstream worker NAME``) consumes in its consumer group
#: ``<prefix>ragstream-NAME``: what its lag is measured on when it is scaled (KEDA's trigger,
#: the supervisor's ``--autoscale``).
POOL_INPUTS: dict[str, TopicSpec] = {
    "ingest": INGEST,
    "retrieval": QUERIES,
    "rerank": RETRIEVED,
    "generation-small": RERANKED_SMALL,
    "generation-large": RERANKED_LARGE,
    "delivery": RESPONSES,
}

#: Dead-letter topics keep records long enough to inspect and replay them.
DLQ_RETENTION_MS = 30 * DAY_MS
DLQ_PARTITIONS = 1


@dataclass(frozen=True, slots=True)
class PhysicalTopic:
    """A topic as created on the broker: name, partitions and configs."""

    name: str
    partitions: int
    configs: dict[str, str]


class TopicRegistry:
    """Topic names under an optional ``prefix`` (``""`` in production)."""

    def __init__(self, prefix: str = "", specs: tuple[TopicSpec, ...] = TOPICS) -> None:
        self.prefix = prefix
        self._specs = {s.name: s for s in specs}

    def spec(self, name: str) -> TopicSpec:
        """The spec of topic ``name`` (unprefixed), with the prefix applied to its name.

        Raises:
            KeyError: no such topic in the registry.
        """
        return replace(self._specs[name], name=self.prefix + name)

    def name(self, spec: TopicSpec) -> str:
        """The physical name of ``spec``."""
        return self.prefix + spec.name

    def dlq(self, spec: TopicSpec) -> str:
        """The physical dead-letter topic of ``spec``.

        Raises:
            ValueError: ``spec`` is not consumed and has no DLQ.
        """
        if spec.dlq is None:
            raise ValueError(f"topic {spec.name} is not consumed and has no DLQ")
        return self.prefix + spec.dlq

    def physical_topics(self) -> list[PhysicalTopic]:
        """Every topic and DLQ to create, with partitions and configs."""
        out = []
        for spec in self._specs.values():
            out.append(PhysicalTopic(self.name(spec), spec.partitions, spec.configs()))
            if spec.consumed:
                out.append(
                    PhysicalTopic(
                        self.dlq(spec),
                        DLQ_PARTITIONS,
                        {"retention.ms": str(DLQ_RETENTION_MS), "cleanup.policy": "delete"},
                    )
                )
        return out

    def by_physical_name(self, name: str) -> TopicSpec | None:
        """The spec whose physical name is ``name`` (``None`` for DLQs and unknown names)."""
        for spec in self._specs.values():
            if self.name(spec) == name:
                return spec
        return None
