"""Worker pools: each module registers one pool with :mod:`workers.registry`."""
