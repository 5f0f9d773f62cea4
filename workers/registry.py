"""Registry of worker pools that ``ragstream worker POOL`` can run.

A pool is registered under its name with a factory that builds its runnable from the settings.
Pools register themselves in :data:`POOL_MODULES` order when :func:`load_pools` runs, so the CLI
imports no model code until a pool is actually started.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ragstream.errors import ConfigurationError
from ragstream.settings import Settings

#: A pool factory takes the settings and returns a callable that runs the pool until shutdown.
PoolFactory = Callable[[Settings], Callable[[], None]]

#: Modules that register pools when imported.
POOL_MODULES: tuple[str, ...] = (
    "workers.pools.ingest",
    "workers.pools.retrieval",
    "workers.pools.rerank",
    "workers.pools.generation",
    "workers.pools.delivery",
)

_POOLS: dict[str, PoolFactory] = {}


def register_pool(name: str, factory: PoolFactory) -> None:
    """Register ``factory`` under ``name``.

    Raises:
        ConfigurationError: a different factory is already registered under ``name``.
    """
    existing = _POOLS.get(name)
    if existing is not None and existing is not factory:
        raise ConfigurationError(f"pool {name!r} is already registered")
    _POOLS[name] = factory


def load_pools() -> dict[str, PoolFactory]:
    """Import every pool module and return the registry (name -> factory)."""
    for module in POOL_MODULES:
        importlib.import_module(module)
    return dict(_POOLS)


def get_pool(name: str) -> PoolFactory:
    """Return the factory of pool ``name``.

    Raises:
        ConfigurationError: no pool of that name is registered.
    """
    pools = load_pools()
    if name not in pools:
        known = ", ".join(sorted(pools)) or "none yet"
        raise ConfigurationError(f"no worker pool named {name!r} (registered pools: {known})")
    return pools[name]
