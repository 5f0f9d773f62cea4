"""Benchmarks of the read path that print numbers (never timed tests).

``ragstream bench query`` (:mod:`bench.query.run`) drives open-loop load through the
query pools; :mod:`bench.summary` gathers every benchmark's JSON into the summary
that ``make bench`` writes under ``bench/results/``.
"""
