"""Operator endpoints behind `routing.admin_api_keys`: replica status and drain.

GET /admin/replicas: each replica's health, breaker, drain flag, live sessions, in-flight
requests and checkpoint budget. POST /admin/replicas/{name}/drain (and /undrain): a drained
replica gets no new work, and its sessions move to their next rendezvous choice on their next
turn; requests already running finish there.
"""

from __future__ import annotations

import hmac
import time

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from gateway.routing import Replica, capacity
from gateway.state import AppState, app_state

router = APIRouter()


def _check_admin(state: AppState, authorization: str | None) -> None:
    keys = [key.encode() for key in state.settings.routing.admin_api_keys if key]
    if not keys:
        raise PermissionDeniedError(
            "The admin API is disabled: set routing.admin_api_keys.", code="admin_disabled"
        )
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError(
            "Missing admin key: send it as 'Authorization: Bearer <key>'.",
            headers={"www-authenticate": "Bearer"},
        )
    candidate = token.strip().encode()
    matched = False
    # Every key is compared, without stopping early, so timing says nothing about a match.
    for key in keys:
        matched |= hmac.compare_digest(candidate, key)
    if not matched:
        raise PermissionDeniedError("This key may not use the admin API.", code="not_admin")


def _describe(state: AppState, replica: Replica) -> dict[str, object]:
    settings = state.settings.routing
    return {
        "name": replica.name,
        "url": replica.base_url,
        "healthy": replica.healthy,
        "draining": replica.draining,
        "breaker": replica.breaker.state(time.monotonic()).value,
        "live_sessions": state.picker.live_sessions(replica),
        "session_budget": capacity.session_budget(replica, settings),
        "in_flight": replica.in_flight,
        # Estimated engine seconds of prefill sent here and not yet answered.
        "queued_prefill_s": round(replica.prefill_s, 3),
        "checkpoint_slots": capacity.slots(replica, settings),
        "track_interval": capacity.track_interval(replica, settings),
    }


def _find(state: AppState, name: str) -> Replica:
    for replica in state.picker.replicas:
        if replica.name == name:
            return replica
    raise NotFoundError(f"No replica named {name!r}; GET /admin/replicas lists them.")


@router.get("/admin/replicas")
async def list_replicas(request: Request) -> JSONResponse:
    state = app_state(request)
    _check_admin(state, request.headers.get("authorization"))
    return JSONResponse(
        {"object": "list", "data": [_describe(state, r) for r in state.picker.replicas]}
    )


@router.post("/admin/replicas/{name}/drain")
async def drain(request: Request, name: str) -> JSONResponse:
    return _set_draining(request, name, True)


@router.post("/admin/replicas/{name}/undrain")
async def undrain(request: Request, name: str) -> JSONResponse:
    return _set_draining(request, name, False)


def _set_draining(request: Request, name: str, draining: bool) -> JSONResponse:
    state = app_state(request)
    _check_admin(state, request.headers.get("authorization"))
    replica = _find(state, name)
    replica.draining = draining
    return JSONResponse(_describe(state, replica))
