"""The bearer-token check of the endpoints that change state (``/admin/reload``, ``/feedback``)."""

from __future__ import annotations

import hmac

from fastapi import HTTPException
from pydantic import SecretStr


def require_bearer(token: SecretStr, authorization: str | None) -> None:
    """Raise 401 unless ``authorization`` is ``Bearer <token>`` (compared in constant time)."""
    expected = f"Bearer {token.get_secret_value()}"
    if authorization is None or not hmac.compare_digest(authorization.encode(), expected.encode()):
        raise HTTPException(
            401,
            "authorization: a valid 'Bearer <token>' header is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
