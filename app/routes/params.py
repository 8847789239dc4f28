"""``GET /params``: what is being served (params and decision model), since when, and its break-even load."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request

from app.deps import StoreDep
from app.schemas import ParamsResponse

router = APIRouter(tags=["params"])


@router.get("/params", response_model=ParamsResponse)
async def get_params(store: StoreDep, request: Request) -> ParamsResponse:
    snapshot = store.current
    p = snapshot.params
    return ParamsResponse(
        params_id=snapshot.params_id,
        model=snapshot.model.name,
        path=str(snapshot.path),
        loaded_at=snapshot.loaded_at,
        loaded_at_iso=datetime.fromtimestamp(snapshot.loaded_at, tz=UTC).isoformat(),
        break_even_load=p.break_even_load,
        transfer_rate_ms_per_token=p.transfer_rate_ms_per_token,
        params=p.to_dict(),
        last_reload_error=store.last_error,
        calibration=request.app.state.calibration.summary(),
    )
