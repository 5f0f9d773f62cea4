"""Benchmarks and the answer-quality evaluation: numbers, never timed tests.

Outside the serving packages: nothing in ``ragstream``, ``topics``, ``ingest``, ``workers`` or
``api`` imports this package; it drives them as a user would (``ragstream bench ...``,
``ragstream eval``) and writes its results under ``bench/results/``.
"""
