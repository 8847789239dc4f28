"""``/healthz`` (liveness: the process answers) and ``/readyz`` (valid params are loaded)."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import StoreDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(store: StoreDep) -> dict[str, str]:
    # The store cannot exist without valid params (startup refuses a bad file and a reload
    # keeps the old ones), so a constructed store means ready.
    return {"status": "ready", "params_id": store.current.params_id}
