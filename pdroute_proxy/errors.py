"""The proxy's own errors, each mapped to one HTTP answer in ``pdroute_proxy.responses``."""

from __future__ import annotations


class ProxyError(Exception):
    """Base of the errors a client is answered with."""


class NoEngine(ProxyError):
    """No engine of the fleet could serve the request (503)."""


class Shed(ProxyError):
    """The served model advises shedding the request and shedding is on (503, Retry-After)."""

    def __init__(self, lateness_ms: float) -> None:
        # The advice weighs both targets; the lateness in ms is the TTFT's (0: the TPOT's, alone).
        late = (
            f"{lateness_ms:.0f} ms past its TTFT target"
            if lateness_ms > 0
            else "past its TPOT target by more than the model's error"
        )
        super().__init__(
            f"the fleet is past capacity: this request is predicted {late}, and serving it would"
            " cost requests that can still make theirs; retry later"
        )
        self.lateness_ms = lateness_ms


class BadRequest(ProxyError):
    """The request cannot be served as sent (400); ``param`` names the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class UpstreamRejected(ProxyError):
    """The engine refused the request itself (a 4xx before any token): passed to the client."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"the engine answered HTTP {status}")
        self.status = status
        self.body = body
