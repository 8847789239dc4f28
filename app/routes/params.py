"""``GET /params``: what is being served (params and decision model), since when, its break-even
load, and the settings the service applies before deciding (harm weight, SLO margin, defaults).

The body carries everything a client needs to decide exactly as ``/route`` does
(``pdroute_client`` does, when the service is unreachable). It has a strong ``ETag``: a hash of
the body's bytes, which are a function of the served snapshot (params_id, model) and the
settings above, so it changes exactly when the body does. ``If-None-Match`` with the current tag
answers ``304 Not Modified`` with no body, so a client polling for new params costs one small
answer while nothing changed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from fastapi import APIRouter, Header, Request, Response

from app.deps import SettingsDep, StoreDep
from app.learners.output_length import OFF_SUMMARY
from app.schemas.route import ParamsResponse

router = APIRouter(tags=["params"])


def etag_of(body: bytes) -> str:
    """A strong entity tag of a representation: a quoted 20-hex-digit sha256 prefix."""
    return '"' + hashlib.sha256(body).hexdigest()[:20] + '"'


def matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (RFC 9110 13.1.2: weak comparison)."""
    if if_none_match is None:
        return False
    if if_none_match.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in if_none_match.split(","))


@router.get(
    "/params",
    response_model=ParamsResponse,
    responses={304: {"description": "If-None-Match named the current ETag: not modified, no body"}},
)
async def get_params(
    store: StoreDep,
    settings: SettingsDep,
    request: Request,
    if_none_match: str | None = Header(default=None),
) -> Response:
    snapshot = store.current
    p = snapshot.params
    answer = ParamsResponse(
        params_id=snapshot.params_id,
        model=snapshot.model.name,
        path=str(snapshot.path),
        loaded_at=snapshot.loaded_at,
        loaded_at_iso=datetime.fromtimestamp(snapshot.loaded_at, tz=UTC).isoformat(),
        break_even_load=p.break_even_load,
        transfer_rate_ms_per_token=p.transfer_rate_ms_per_token,
        params=p.to_dict(),
        last_reload_error=store.last_error,
        harm_weight=store.harm_weight,  # what the served model was built with
        slo_margin=store.slo_margin,
        objective=store.objective,
        first_token=store.first_token,
        default_output_len=settings.default_output_len,
        default_output_len_by_prompt=settings.output_len_defaults().to_json(),
        default_ttft_slo_ms=settings.default_ttft_slo_ms,
        default_tpot_slo_ms=settings.default_tpot_slo_ms,
        calibration=request.app.state.calibration.summary(),
        output_len_learning=(
            OFF_SUMMARY if (learning := request.app.state.output_learning) is None else learning.summary()
        ),
    )
    body = answer.model_dump_json().encode()
    etag = etag_of(body)
    # no-cache: a cache may keep the body but must revalidate (the ETag) before reusing it.
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if matches(if_none_match, etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)
