"""The HTTP side of webhooks: the request and response bodies of :mod:`api.routes.webhooks`
(:mod:`~api.webhooks.protocol`).

Registration, signing, the outbox, delivery and the SSRF guard live on the worker side, in
:mod:`workers.webhooks`, which the delivery pool and the Celery workers run and the API imports.
"""
