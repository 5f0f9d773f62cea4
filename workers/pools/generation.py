"""The generation pools (one per tier): reranked passages in, answers and token streams out.

The work is the :class:`~workers.generation.generator.Generator`'s; this module wires it into a
handler of the consumer runtime. Tokens are published to ``rag.tokens`` as they arrive (keyed
by request id); the final answer with citations, token usage and the trace goes to
``rag.responses`` and into the answer cache.
"""

from __future__ import annotations

from collections.abc import Callable

from ragstream.settings import PoolSettings, Settings
from topics.registry import RERANKED_BY_TIER, RESPONSES, TOKENS
from topics.reranked import RerankedPassages
from workers.errors import dead_letter_hook, expired_hook
from workers.generation.generator import Generator, TokenSink
from workers.registry import register_pool
from workers.runtime.build import pool_handler
from workers.runtime.handler import Handler


def generation_handler(
    generator: Generator, *, pool: PoolSettings, group: str | None = None
) -> Handler[RerankedPassages]:
    """The handler of the ``generator.tier`` generation pool: answers to ``rag.responses`` and,
    while the batch runs, tokens to ``rag.tokens`` (give the generator a :class:`TokenSink` on
    the runner's :meth:`~workers.runtime.runner.PoolRunner.emit_now`)."""
    tier = generator.tier
    return pool_handler(
        f"generation-{tier}",
        input=RERANKED_BY_TIER[tier],
        outputs=(RESPONSES, TOKENS),
        fn=generator.run,
        pool=pool,
        group=group,
        on_expired=expired_hook(f"generation-{tier}"),
        on_dead_letter=dead_letter_hook(f"generation-{tier}"),
    )


def run_generation_pool(settings: Settings, tier: str) -> Callable[[], None]:
    """Pool factory of ``ragstream worker generation-<tier>``."""
    from workers.pools.components import build_generator
    from workers.runtime.build import build_runner, pool_group, until_signalled

    generator = build_generator(settings, tier, None)
    pool = getattr(settings.pools, f"generation_{tier}")
    group = pool_group(settings, f"generation-{tier}")
    handler = generation_handler(generator, pool=pool, group=group)
    runner = build_runner(handler, settings, pool)
    # Tokens are outputs of this handler, published by the runner that runs it.
    generator.tokens = TokenSink(runner.emit_now)
    return until_signalled(runner, generator.close)


register_pool("generation-small", lambda s: run_generation_pool(s, "small"))
register_pool("generation-large", lambda s: run_generation_pool(s, "large"))
