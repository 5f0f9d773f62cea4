"""``/v1/webhooks``: a tenant's webhook endpoints and its deliveries.

- ``POST /v1/webhooks`` (201): register ``{url, event_types, description}``; the URL is
  SSRF-checked now (after DNS resolution) and again at every delivery; 422 when refused.
  The response carries the endpoint's signing key (``secret``), shown this once.
- ``POST /v1/webhooks/{id}/rotate-secret``: a new key for the endpoint; the old one keeps
  signing (two signatures per delivery) for ``webhooks.secret_overlap_s`` (24 h).
- ``POST /v1/webhooks/callback-secret`` (201, 409 once it exists) and
  ``POST /v1/webhooks/callback-secret/rotate``: the tenant's key for deliveries to a query's
  or job's ``callback_url`` (see :mod:`workers.webhooks.signing` for why one per tenant).
- ``GET /v1/webhooks`` (``{"items", "next_cursor"}`` with ``limit`` / ``cursor``, like every
  list, :mod:`api.pages`), ``GET /v1/webhooks/{id}``, ``DELETE /v1/webhooks/{id}`` (204).
- ``GET /v1/webhooks/deliveries/{webhook_id}``: status and every attempt of one delivery.

Everything is scoped to the API key's tenant; another tenant's endpoint or delivery is 404.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, ErrorEnvelope
from api.pages import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from api.webhooks.protocol import (
    DeliveryOut,
    EndpointBody,
    EndpointCreated,
    EndpointList,
    EndpointOut,
    SecretOut,
)
from workers.webhooks import endpoints, signing
from workers.webhooks.delivery import get_delivery
from workers.webhooks.ssrf import parse_networks

router = APIRouter(tags=["webhooks"])

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 404, 422, 429)
}
EndpointId = Annotated[str, Path(min_length=1, max_length=64)]
WebhookId = Annotated[str, Path(min_length=1, max_length=64)]


@router.post(
    "/v1/webhooks",
    status_code=201,
    response_model=EndpointCreated,
    responses={**ERRORS, 409: {"model": ErrorEnvelope}},
)
async def create_webhook(
    body: EndpointBody, request: Request, p: Principal = Depends(principal)
) -> EndpointCreated:
    """Register an endpoint for the caller's tenant (at most ``webhooks.max_endpoints_per_tenant``).

    Deliveries are signed with Standard Webhooks headers (``webhook-id``,
    ``webhook-timestamp``, ``webhook-signature``) with this endpoint's own key, returned
    here once as ``secret``; de-duplicate on ``webhook-id``.
    """
    svc = services(request)
    cfg = svc.settings.webhooks
    try:
        created = await asyncio.to_thread(
            endpoints.register,
            svc.sessions,
            p.tenant,
            body.url,
            body.event_types,
            allow=parse_networks(cfg.allow_networks),
            description=body.description,
            max_per_tenant=cfg.max_endpoints_per_tenant,
        )
    except endpoints.EndpointLimitError as exc:
        raise ApiError(409, "CONFLICT", str(exc)) from exc
    except endpoints.EndpointError as exc:
        raise ApiError(422, "INVALID_REQUEST", str(exc)) from exc
    return EndpointCreated.created(created)


@router.post(
    "/v1/webhooks/callback-secret",
    status_code=201,
    response_model=SecretOut,
    responses={**ERRORS, 409: {"model": ErrorEnvelope}},
)
async def create_callback_secret(request: Request, p: Principal = Depends(principal)) -> SecretOut:
    """Create the key that signs the tenant's ``callback_url`` deliveries and show it once.

    409 if it exists already (created earlier, or by a first callback delivery): rotate it.
    """
    key = await asyncio.to_thread(
        signing.create_tenant_secret, services(request).sessions, p.tenant
    )
    if key is None:
        raise ApiError(
            409,
            "CONFLICT",
            "the callback secret exists and was shown once; "
            "POST /v1/webhooks/callback-secret/rotate for a new one",
        )
    return SecretOut(secret=key)


@router.post("/v1/webhooks/callback-secret/rotate", response_model=SecretOut, responses=ERRORS)
async def rotate_callback_secret(request: Request, p: Principal = Depends(principal)) -> SecretOut:
    """A new key for the tenant's ``callback_url`` deliveries (shown once); the previous one
    keeps signing until ``previous_valid_until``."""
    svc = services(request)
    rotated = await asyncio.to_thread(
        signing.rotate_tenant_secret,
        svc.sessions,
        p.tenant,
        svc.settings.webhooks.secret_overlap_s,
    )
    return SecretOut.of(rotated)


@router.post("/v1/webhooks/{endpoint_id}/rotate-secret", response_model=SecretOut, responses=ERRORS)
async def rotate_webhook_secret(
    endpoint_id: EndpointId, request: Request, p: Principal = Depends(principal)
) -> SecretOut:
    """A new key for one of the caller's endpoints (shown once); the previous one keeps
    signing until ``previous_valid_until``, so deliveries carry both signatures meanwhile."""
    svc = services(request)
    rotated = await asyncio.to_thread(
        signing.rotate_endpoint_secret,
        svc.sessions,
        p.tenant,
        endpoint_id,
        svc.settings.webhooks.secret_overlap_s,
    )
    if rotated is None:
        raise ApiError(404, "NOT_FOUND", f"no webhook endpoint {endpoint_id!r} for this tenant")
    return SecretOut.of(rotated)


@router.get("/v1/webhooks", response_model=EndpointList, responses=ERRORS)
async def list_webhooks(
    request: Request,
    p: Principal = Depends(principal),
    limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(default=None, max_length=512, description="A `next_cursor`."),
) -> EndpointList:
    """The caller's endpoints, oldest first, one page at a time (``{"items", "next_cursor"}``).

    Raises:
        ApiError: 422 ``INVALID_REQUEST`` for a cursor this API did not hand out.
    """
    after = decode_cursor(cursor, (dt.datetime, str))
    found = await asyncio.to_thread(
        partial(
            endpoints.page_endpoints, services(request).sessions, p.tenant, limit=limit + 1,
            after=after,
        )
    )  # fmt: skip
    page = found[:limit]
    more = len(found) > limit
    next_cursor = encode_cursor([page[-1].created_at, page[-1].id]) if more else None
    return EndpointList(items=[EndpointOut.of(e) for e in page], next_cursor=next_cursor)


@router.get("/v1/webhooks/{endpoint_id}", response_model=EndpointOut, responses=ERRORS)
async def get_webhook(
    endpoint_id: EndpointId, request: Request, p: Principal = Depends(principal)
) -> EndpointOut:
    """One of the caller's endpoints."""
    found = await asyncio.to_thread(
        endpoints.get_endpoint, services(request).sessions, p.tenant, endpoint_id
    )
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"no webhook endpoint {endpoint_id!r} for this tenant")
    return EndpointOut.of(found)


@router.delete(
    "/v1/webhooks/{endpoint_id}", status_code=204, response_class=Response, responses=ERRORS
)
async def delete_webhook(
    endpoint_id: EndpointId, request: Request, p: Principal = Depends(principal)
) -> Response:
    """Delete one of the caller's endpoints (deliveries already made keep their record)."""
    deleted = await asyncio.to_thread(
        endpoints.delete_endpoint, services(request).sessions, p.tenant, endpoint_id
    )
    if not deleted:
        raise ApiError(404, "NOT_FOUND", f"no webhook endpoint {endpoint_id!r} for this tenant")
    return Response(status_code=204)


@router.get("/v1/webhooks/deliveries/{webhook_id}", response_model=DeliveryOut, responses=ERRORS)
async def get_webhook_delivery(
    webhook_id: WebhookId, request: Request, p: Principal = Depends(principal)
) -> DeliveryOut:
    """Status and attempts of one delivery of the caller's tenant (by its ``webhook-id``)."""
    found = await asyncio.to_thread(get_delivery, services(request).sessions, p.tenant, webhook_id)
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"no webhook delivery {webhook_id!r} for this tenant")
    return DeliveryOut.of(found)
