"""Shadow replay (``ragstream replay``): logged queries answered again by a candidate
configuration on shadow topics, and a report of what changed (docs/replay.md).

- :mod:`replay.selection`: which logged queries (tenant, time window, sample);
- :mod:`replay.candidate`: the candidate (index alias, tier, model, settings) and the
  settings its shadow pools run with;
- :mod:`replay.pacing`: the submit-rate bound;
- :mod:`replay.shadow`: the shadow pools, submissions and answers;
- :mod:`replay.report`: the comparison, as JSON and Markdown;
- :mod:`replay.pools`: pool processes on a private topic prefix (the query benchmark,
  ``bench/query/``, starts its pools with it too);
- :mod:`replay.measures`: nearest-rank percentiles, a trace's end, what reads as a refusal
  (shared with the benchmarks and the evaluation).

An operator command of the product, so it sits beside ``api`` in the import direction: it may
import ``workers`` and everything below, and only ``bench`` and ``entry`` import it
(docs/architecture.md, Layout).
"""

from __future__ import annotations

from ragstream.errors import ConfigurationError


class ReplayError(ConfigurationError):
    """A replay that cannot run as asked: a missing index alias, an unknown tier, model or
    setting, an empty selection. Raised before any shadow process starts; the message says
    what to change."""
