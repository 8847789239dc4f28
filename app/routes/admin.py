"""``POST /admin/reload``: reload the params file, behind a bearer token from the settings.

Off (403) when no token is configured; a wrong or missing token is 401. A refused file
answers 422 with the reason, and the old params keep serving.
"""

from __future__ import annotations

from fastapi import APIRouter, Header, HTTPException

from app.deps import ClockDep, MetricsDep, SettingsDep, StoreDep
from app.http.bearer import require_bearer
from app.reload import reload_params
from app.schemas.route import ReloadResponse

router = APIRouter(tags=["admin"])


@router.post("/admin/reload", response_model=ReloadResponse)
def admin_reload(
    store: StoreDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    clock: ClockDep,
    authorization: str | None = Header(default=None),
) -> ReloadResponse:
    if settings.admin_token is None:
        raise HTTPException(403, "admin API disabled: set PDROUTE_ADMIN_TOKEN to enable /admin/reload")
    require_bearer(settings.admin_token, authorization)
    previous = store.current.params_id
    loaded = reload_params(store, metrics, clock, "admin")  # InvalidParams -> 422 (app.http.errors)
    return ReloadResponse(
        status="reloaded" if loaded.params_id != previous else "unchanged",
        params_id=loaded.params_id,
        previous_params_id=previous,
    )
