"""Propose-and-verify: a small instruct LLM names what could answer a task question, and the
definition index keeps only the names the tenant's documents define.

For a question that asks for a name or a way ("How do I read a CSV file line by line?"), the
model is asked, with a fixed system prompt and a token budget of a few names, which function,
class, module, command, option, clause or setting does it (``csv.reader, open``). Each
proposed name is looked up in the definition index
(:meth:`~workers.retrieval.definitions.DefinitionIndex.verify`): a name no entry of the tenant's
documents defines is dropped and never shown, so the model's knowledge only proposes and the
documents decide. The requests of a batch go to the server concurrently (its slots batch them:
continuous batching); the system prompt is the same for every request, so the server's prompt
cache keeps its prefix.

The model is a setting (``retrieval.propose_url``, ``retrieval.propose_model``; off when the
URL is empty). Measured on the dev sets' how-to questions: docs/definitions.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
import structlog
from prometheus_client import Counter, Histogram

log = structlog.get_logger(__name__)

#: The instruction every proposal request carries (the same prefix: the server caches it).
SYSTEM_PROMPT = (
    "You name the Python standard-library function, class, method or module, command-line "
    "program or option, or PostgreSQL SQL command, clause, function or setting that does what "
    "the user asks. Reply with at most three names, most likely first, separated by commas, "
    "nothing else."
)
#: Names kept of one proposal.
MAX_NAMES = 3
#: Longest proposed name kept (a longer one is a sentence or a statement).
NAME_CHARS = 60

PROPOSALS = Counter(
    "ragstream_propose_total",
    "Task questions given to the name proposer, by outcome (proposed, failed, shed).",
    ["outcome"],
)
PROPOSE_SECONDS = Histogram(
    "ragstream_propose_seconds",
    "Time of one batch's name proposals, seconds.",
    buckets=(0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10),
)

_SPLIT = re.compile(r"[,;\n]")
_ARGS = re.compile(r"\(.*$")
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s*")


def parse_names(text: str) -> list[str]:
    """The names of a proposal ("`csv.reader`, open()" → ``["csv.reader", "open"]``): split
    at commas, semicolons and lines, list markers, backquotes and quotes removed, a call's
    arguments cut (``datetime.now().strftime('%Y')`` → ``datetime.now``), empty, duplicate and
    over-long pieces dropped; at most :data:`MAX_NAMES`."""
    out: list[str] = []
    for piece in _SPLIT.split(text):
        name = _NUMBERED.sub("", piece).strip().strip("`'\"*").strip()
        if not name.startswith("\\"):
            name = _ARGS.sub("", name).strip()
        name = name.strip("`'\" ").rstrip(".")
        if name and len(name) <= NAME_CHARS and name not in out:
            out.append(name)
    return out[:MAX_NAMES]


class NameProposer:
    """Names proposed for task questions by an OpenAI-compatible chat completions server
    (llama.cpp's ``llama-server`` or ``vllm serve``).

    Args:
        base_url: ``http://host:port`` of the server.
        model: the served model name.
        timeout_s: limit of one request, seconds; a request past it proposes nothing.
        max_tokens: completion budget (a few names).
        concurrency: requests in flight at once (the server's slots).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout_s: float = 5.0,
        max_tokens: int = 24,
        concurrency: int = 2,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_tokens = max_tokens
        self._client = httpx.Client(
            timeout=timeout_s, limits=httpx.Limits(max_connections=concurrency)
        )
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="propose")

    def propose(self, questions: Sequence[str]) -> list[list[str]]:
        """The names proposed for each question, in order; an empty list where the server
        failed or timed out (logged and counted: the question is answered without proposals,
        never failed for it)."""
        if not questions:
            return []
        started = time.perf_counter()
        out = list(self._pool.map(self._one, questions))
        PROPOSE_SECONDS.observe(time.perf_counter() - started)
        return out

    def _one(self, question: str) -> list[str]:
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": question},
            ],
            "max_tokens": self.max_tokens,
            "temperature": 0,
        }
        try:
            r = self._client.post(f"{self.base_url}/v1/chat/completions", json=body)
            r.raise_for_status()
            text = r.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            PROPOSALS.labels("failed").inc()
            log.warning("propose.failed", url=self.base_url, error=f"{type(exc).__name__}: {exc}")
            return []
        PROPOSALS.labels("proposed").inc()
        return parse_names(str(text or ""))

    def close(self) -> None:
        """Close the HTTP client and the thread pool."""
        self._client.close()
        self._pool.shutdown(wait=False)
