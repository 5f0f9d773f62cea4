"""Signed webhook callbacks (Standard Webhooks) with an SSRF guard: the worker side.

- :mod:`~workers.webhooks.events`: event types, payloads and stable webhook ids (pure);
- :mod:`~workers.webhooks.endpoints`: a tenant's registered endpoints (SSRF-checked at
  registration);
- :mod:`~workers.webhooks.outbox`: delivery rows written with the fact they announce, Celery
  scheduling after the commit, and the sweeper for deliveries that never got a task;
- :mod:`~workers.webhooks.delivery`: one signed attempt, recorded in SQL, with the SSRF guard on
  every request and redirect; the delivery status view;
- :mod:`~workers.webhooks.tasks`: the Celery tasks and the sweeper thread of every worker.

The delivery pool (:mod:`workers.pools.delivery`) and the Celery workers run this code; the
API's webhook routes (:mod:`api.routes.webhooks`, bodies in :mod:`api.webhooks.protocol`) use
it to register endpoints and show deliveries. Only the kernel, ``topics`` and ``ingest.jobs``
are imported here.
"""
