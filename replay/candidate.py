"""The candidate configuration of a shadow replay, and the settings its shadow pools run with.

A candidate is what differs from the live system: another index ``alias`` (built by another
embedder, chunker or mapping: ``ragstream index rebuild`` or an ingest under another alias),
an answer ``tier`` forced on every replayed query, a catalog ``model`` (optionally on another
server), and any field of the sections that shape an answer (:data:`CANDIDATE_SECTIONS`:
``--set retrieval.bm25_weight=1.0``). It becomes *overrides*, ``{"section": {"field": value}}``,
that the shadow pool processes read as ``RAGSTREAM_<SECTION>__<FIELD>`` variables on top of this
process's environment (:func:`replay.pools.overrides_env`), with the replay's own: the
shadow topic prefix and the answer caches off (:func:`shadow_overrides`).

Everything is checked before a process starts (:func:`check_candidate`, :func:`check_alias`):
an unknown setting, tier or model, a value the settings refuse, an alias that does not exist or
holds no chunk of the tenant, a model server that does not answer, a model no answer would use.
Each is a :class:`~replay.ReplayError` that says what to change.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ragstream.errors import TransientError
from ragstream.settings import LLM_PROMPT_STYLES, Settings
from replay import ReplayError
from replay.pools import overrides_env

#: The answer tiers a candidate may force (``QueryRequest.route``); ``auto`` lets the router and
#: the evidence stage choose, as live queries do.
TIERS = ("auto", "evidence", "small", "large")
#: The settings sections a candidate may change with ``--set``: those that shape an answer.
#: The index alias is ``--alias``; where services listen, the stores, topics and caches are the
#: replay's.
CANDIDATE_SECTIONS = ("retrieval", "rerank", "evidence", "generation", "llm", "embedding")
#: LLM tiers, each served by its own pool (``generation-<tier>``).
LLM_TIERS = ("small", "large")

Overrides = dict[str, Any]
_ENV_LOCK = threading.Lock()


@dataclass(frozen=True)
class Candidate:
    """What the replay answers with.

    Attributes:
        alias: the chunk index alias searched; ``None``: the live one
            (``settings.elasticsearch.index_alias``).
        tier: the answer tier forced on every replayed query (:data:`TIERS`).
        model: a catalog model (:data:`ragstream.settings.LLM_PROMPT_STYLES`) for both LLM tiers,
            with its prompt style; ``None``: the live tiers' models.
        model_url: the OpenAI-compatible server serving ``model``; ``None``: the tiers' own.
        sets: ``(dotted setting, value)`` pairs, e.g. ``("retrieval.bm25_weight", "1.0")``; the
            value is read as its environment variable would be.
    """

    alias: str | None = None
    tier: str = "auto"
    model: str | None = None
    model_url: str | None = None
    sets: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def describe(self, settings: Settings) -> dict[str, Any]:
        """The candidate as the report shows it (the alias resolved)."""
        return {
            "alias": self.alias or settings.elasticsearch.index_alias,
            "tier": self.tier,
            "model": self.model,
            "model_url": self.model_url,
            "settings": dict(self.sets),
        }


def parse_sets(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` strings (``--set``) as pairs, each key checked (:func:`check_key`).

    Raises:
        ReplayError: no ``=``, or an unknown or reserved key.
    """
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ReplayError(f"--set wants SECTION.FIELD=VALUE, not {item!r}")
        check_key(key)
        out.append((key, value.strip()))
    return tuple(out)


def check_key(key: str) -> None:
    """Check that dotted ``key`` names a field of the settings tree in a section a candidate
    may change (:data:`CANDIDATE_SECTIONS`), down to a plain value (not a whole section).

    Raises:
        ReplayError: it does not.
    """
    parts = key.split(".")
    if parts[0] not in CANDIDATE_SECTIONS:
        raise ReplayError(
            f"cannot set {key!r}: a candidate changes the sections "
            f"{', '.join(CANDIDATE_SECTIONS)} (and the index alias with --alias)"
        )
    model: type[BaseModel] = Settings
    for i, part in enumerate(parts):
        info = model.model_fields.get(part)
        if info is None:
            known = ", ".join(sorted(model.model_fields))
            where = ".".join(parts[:i]) or "the settings"
            raise ReplayError(f"unknown setting {key!r}: {where} has {known}")
        kind = info.annotation
        is_section = isinstance(kind, type) and issubclass(kind, BaseModel)
        last = i == len(parts) - 1
        if is_section and last:
            raise ReplayError(f"{key!r} is a section; set one of its fields")
        if not is_section and not last:
            raise ReplayError(f"unknown setting {key!r}: {'.'.join(parts[: i + 1])} is a value")
        if is_section:
            model = kind  # type: ignore[assignment]


def candidate_overrides(candidate: Candidate, settings: Settings) -> Overrides:
    """The candidate as nested overrides (strings, as environment variables carry them).

    The index alias is always among them (the live one when the candidate names none), so the
    shadow pools search what the report says whatever their environment holds.

    Raises:
        ReplayError: an unknown tier or model.
    """
    if candidate.tier not in TIERS:
        raise ReplayError(f"unknown tier {candidate.tier!r}: the tiers are {', '.join(TIERS)}")
    out: Overrides = {}
    for key, value in candidate.sets:
        _put(out, key.split("."), value)
    _put(
        out, ["elasticsearch", "index_alias"], candidate.alias or settings.elasticsearch.index_alias
    )
    if candidate.model is not None:
        style = LLM_PROMPT_STYLES.get(candidate.model)
        if style is None:
            known = ", ".join(sorted(LLM_PROMPT_STYLES))
            raise ReplayError(f"unknown model {candidate.model!r}: the catalog has {known}")
        _put(out, ["llm", "model"], candidate.model)
        for tier in LLM_TIERS:
            _put(out, ["generation", tier, "prompt_style"], style)
            if candidate.model_url:
                _put(out, ["generation", tier, "base_url"], candidate.model_url)
    return out


def shadow_overrides(settings: Settings, run_id: str) -> Overrides:
    """What every shadow pool gets from the replay itself: topics and consumer groups under
    ``<kafka.topic_prefix><replay.topic_prefix><run_id>.`` and no answer cache."""
    prefix = f"{settings.kafka.topic_prefix}{settings.replay.topic_prefix}{run_id}."
    return {"kafka": {"topic_prefix": prefix}, "cache": {"enabled": False}}


def merge(*layers: Mapping[str, Any]) -> Overrides:
    """Nested overrides merged, later layers winning."""
    out: Overrides = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            elif isinstance(value, Mapping):
                out[key] = merge(value)
            else:
                out[key] = value
    return out


def settings_with(overrides: Mapping[str, Any]) -> Settings:
    """The settings a shadow pool process will read: this process's environment plus
    ``overrides`` as ``RAGSTREAM_...`` variables (built the same way, so a value the settings
    refuse is refused here, before a process starts).

    Raises:
        ReplayError: a value the settings refuse (e.g. an unknown ``llm.model``).
    """
    env = overrides_env(overrides)
    try:
        with _environ(env):
            return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise ReplayError(f"the candidate's settings are refused: {problems}") from exc


@contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def llm_pools(settings: Settings, tier: str) -> tuple[str, ...]:
    """The generation pools the candidate's answers can reach (none when every answer comes
    from the evidence tier): a forced LLM tier's; both when the router may choose an LLM tier
    (``evidence.tier_mode`` ``llm`` or ``auto``, or no evidence stage)."""
    if tier in LLM_TIERS:
        return (f"generation-{tier}",)
    routed = not settings.evidence.enabled or settings.evidence.tier_mode != "evidence"
    if tier == "auto" and routed:
        return tuple(f"generation-{t}" for t in LLM_TIERS)
    return ()


def check_candidate(candidate: Candidate, settings: Settings) -> tuple[str, ...]:
    """Check the candidate against its own ``settings`` (built with :func:`settings_with`) and
    return the pools to start.

    Raises:
        ReplayError: a model no answer would use, or a model server that does not answer.
    """
    from ragstream.health import probe_llm

    llm = llm_pools(settings, candidate.tier)
    if candidate.model is not None and not llm:
        raise ReplayError(
            f"--model {candidate.model} changes no answer: the candidate answers every question "
            "from the evidence tier; add --tier small or large, or --set evidence.tier_mode=llm"
        )
    for pool in llm:
        tier = pool.removeprefix("generation-")
        url = getattr(settings.generation, tier).base_url or settings.llm.base_url
        probe = probe_llm(pool, url)
        if not probe.healthy:
            raise ReplayError(
                f"the {tier} tier's model server at {url} does not answer ({probe.detail}); "
                "start it (ragstream infra llm up) or give another with --model NAME=URL"
            )
    return ("retrieval", "rerank", *llm)


def check_alias(settings: Settings, alias: str, tenant: str) -> int:
    """The chunks of ``tenant`` behind ``alias``.

    Raises:
        ReplayError: the alias does not exist, or holds no chunk of the tenant.
        TransientError: Elasticsearch cannot be reached.
    """
    from elasticsearch import ApiError, Elasticsearch, TransportError

    es = Elasticsearch(settings.elasticsearch.url, request_timeout=30)
    try:
        if not es.indices.exists_alias(name=alias):
            known = sorted(
                {a for body in es.indices.get_alias().body.values() for a in body["aliases"]}
            )
            raise ReplayError(
                f"index alias {alias!r} does not exist; aliases here: "
                f"{', '.join(a for a in known if not a.startswith('.')) or 'none'}"
            )
        count = int(es.count(index=alias, query={"term": {"tenant": tenant}})["count"])
    except (ApiError, TransportError) as exc:
        raise TransientError(f"Elasticsearch at {settings.elasticsearch.url}: {exc}") from exc
    finally:
        es.close()
    if count == 0:
        raise ReplayError(f"index alias {alias!r} holds no chunk of tenant {tenant!r}")
    return count


def _put(tree: Overrides, path: list[str], value: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value
