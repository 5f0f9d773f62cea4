"""An API app whose pools are faked: the query service answers on the reply path itself.

``make_app(tmp_path, answer=...)`` builds the real FastAPI app (routes, error handlers, auth
dependency) with the caller authenticated as tenant ``acme`` and a :class:`FakeQueries` in
place of the :class:`~api.querying.QueryService`: each asked query is recorded, and the replies
``answer(event)`` returns are put on the waiter's queue (``delay_s`` apart), as the reply
router would deliver them from ``rag.tokens`` and ``rag.responses``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from api.app import create_app
from api.asked import Asked
from api.auth import Principal
from api.deps import principal
from api.replies import Reply
from ragstream.settings import DatabaseSettings, Settings
from topics.queries import QueryRequest
from topics.responses import Citation, EvidenceSpan, QueryResponse, TokenUsage
from topics.tokens import AnswerToken

Answer = Callable[[QueryRequest], Sequence[Reply]]


class FakeQueries:
    """Stands in for :class:`~api.querying.QueryService` (the methods the routes call)."""

    def __init__(self, settings: Settings, answer: Answer, delay_s: float = 0.0) -> None:
        self.settings = settings
        self.sessions: Any = None
        self.answer = answer
        self.delay_s = delay_s
        self.asked: list[QueryRequest] = []
        self.waits: list[float | None] = []
        self.unsubscribed: list[str] = []
        self.cancelled: list[str] = []
        self.attached: list[str] = []
        self.detached: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def ask(
        self, request: QueryRequest, *, wait_s: float | None, tokens: bool = False
    ) -> Asked:
        self.asked.append(request)
        self.waits.append(wait_s)
        if wait_s is None:
            return Asked.of(self, request)
        queue: asyncio.Queue[Reply] = asyncio.Queue()
        replies = [r for r in self.answer(request) if tokens or isinstance(r, QueryResponse)]
        task = asyncio.create_task(self._deliver(queue, replies))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return Asked.of(self, request, queue=queue)

    async def _deliver(self, queue: asyncio.Queue[Reply], replies: list[Reply]) -> None:
        for reply in replies:
            await asyncio.sleep(self.delay_s)
            queue.put_nowait(reply)

    async def backlog(self) -> tuple[int, str]:
        return 3, "generation-small"

    def unsubscribe(self, request_id: str, queue: Any = None) -> None:
        self.unsubscribed.append(request_id)

    async def attach(self, request_id: str) -> None:
        self.attached.append(request_id)

    def detach(self, request_id: str) -> None:
        self.detached.append(request_id)

    def cancel(self, request_id: str) -> None:
        self.cancelled.append(request_id)

    def close(self) -> None:
        pass


def settings_for(tmp_path: Path, **api: Any) -> Settings:
    """Settings with a throw-away SQLite file and ``api`` fields overridden."""
    s = Settings()
    return s.model_copy(
        update={
            "database": DatabaseSettings(url=f"sqlite:///{tmp_path / 'api.db'}"),
            "api": s.api.model_copy(update=api),
        }
    )


def make_app(
    tmp_path: Path, answer: Answer, delay_s: float = 0.0, **api: Any
) -> tuple[FastAPI, FakeQueries]:
    """The real app with the fake query service and the caller authenticated as ``acme``."""
    settings = settings_for(tmp_path, **api)
    app = create_app(settings)
    fake = FakeQueries(settings, answer, delay_s)
    app.state.services.extras["queries"] = fake
    app.dependency_overrides[principal] = lambda: Principal(1, "acme")
    return app, fake


def answered(
    request: QueryRequest, answer: str = "VACUUM reclaims storage [1].", tokens: bool = True
) -> list[Reply]:
    """Evidence, the answer's tokens (two pieces) and the answered response of ``request``."""
    span = EvidenceSpan(
        n=1, chunk_id="vacuum#0", doc_id="vacuum", start=0, end=20, text="VACUUM reclaims"
    )
    rid, tenant = request.request_id, request.tenant
    replies: list[Reply] = []
    if tokens:
        half = len(answer) // 2
        replies += [
            AnswerToken(request_id=rid, tenant=tenant, seq=0, kind="evidence", evidence=(span,)),
            AnswerToken(request_id=rid, tenant=tenant, seq=1, text=answer[:half]),
            AnswerToken(request_id=rid, tenant=tenant, seq=2, text=answer[half:], final=True),
        ]
    replies.append(
        QueryResponse(
            request_id=rid,
            tenant=tenant,
            status="answered",
            answer=answer,
            citations=(Citation(n=1, doc_id="vacuum", chunk_id="vacuum#0"),),
            evidence=(span,),
            usage=TokenUsage(prompt_tokens=40, completion_tokens=7),
            tier="small",
        )
    )
    return replies


#: The evidence answer an unusable completion falls back on in :func:`checked`.
EVIDENCE_ANSWER = "VACUUM reclaims storage [1]."


def checked(generated: str, finish: str = "stop") -> Answer:
    """Replies of an LLM completion ``generated`` (streamed as three tokens) as the answer
    check records it: the real :func:`~workers.generation.compress.judge` decides, as the
    generation pool does; an empty or looping completion is replaced by
    :data:`EVIDENCE_ANSWER`, a ``length`` completion is cut at its last whole sentence and
    marked ``truncated``."""
    from workers.generation.compress import judge

    def answer(request: QueryRequest) -> list[Reply]:
        judged = judge(generated, finish, ["\n\n"])
        text = EVIDENCE_ANSWER if judged.fallback else judged.text
        rid, tenant = request.request_id, request.tenant
        third = max(1, len(generated) // 3)
        pieces = [generated[i : i + third] for i in range(0, len(generated), third)]
        replies: list[Reply] = [
            AnswerToken(request_id=rid, tenant=tenant, seq=i + 1, text=piece)
            for i, piece in enumerate(pieces)
        ]
        replies.append(
            AnswerToken(request_id=rid, tenant=tenant, seq=len(pieces) + 1, text="", final=True)
        )
        [response] = [r for r in answered(request, text, tokens=False)]
        assert isinstance(response, QueryResponse)
        replies.append(
            response.model_copy(update={"truncated": judged.truncated and not judged.fallback})
        )
        return replies

    return answer


#: Completions the answer check changes: ``(generated, finish_reason, recorded answer,
#: truncated)``: an empty one, a looping one (both replaced by the evidence answer) and one
#: cut at its token limit.
CHECKED = [
    ("", "stop", EVIDENCE_ANSWER, False),
    ("\\gset\nAnswer: " * 8, "stop", EVIDENCE_ANSWER, False),
    (
        "Autovacuum runs VACUUM [1]. It can also run while the",
        "length",
        "Autovacuum runs VACUUM [1].",
        True,
    ),
]
