"""Benchmarks of the read path that print numbers (never timed tests).

``ragstream bench query`` (:mod:`workers.benchmarks.query`) drives open-loop load through the
query pools; :mod:`workers.benchmarks.results` gathers every benchmark's JSON into the summary
that ``make bench`` writes under ``bench/results/``.
"""
