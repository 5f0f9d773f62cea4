"""Signed webhook callbacks (Standard Webhooks) with an SSRF guard.

- :mod:`~api.webhooks.events`: event types, payloads and stable webhook ids (pure);
- :mod:`~api.webhooks.endpoints`: a tenant's registered endpoints (SSRF-checked at registration);
- :mod:`~api.webhooks.outbox`: delivery rows written with the fact they announce, Celery
  scheduling after the commit, and the sweeper for deliveries that never got a task;
- :mod:`~api.webhooks.delivery`: one signed attempt, recorded in SQL, with the SSRF guard on
  every request and redirect; the delivery status view;
- :mod:`~api.webhooks.tasks`: the Celery tasks and the sweeper thread of every worker;
- :mod:`~api.webhooks.protocol`: the HTTP bodies of ``api.routes.webhooks``.

Only the kernel, ``topics`` and ``ingest.jobs`` are imported here, so the delivery pool
(``workers``) can use this package without an import cycle through the API routes.
"""
