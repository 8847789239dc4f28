"""What online calibration costs ``/route``: the endpoint's answer in-process, off against on.

    PYTHONPATH=$PWD .venv/bin/python -m bench.bench_calibration_route [--n 20000]

Builds the service twice on the embedded params (queue-aware), calibration off and on (with
corrections learnt, so the calibrated model differs from the raw one), and times the
``/route`` endpoint's parse-decide-encode (``RouteEndpoint._answer``, no HTTP) on a body with a
``request_id`` (remembered for feedback when on). Prints microseconds per answer and on / off.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from prometheus_client import CollectorRegistry

from app.main import create_app
from app.routes.route import RouteEndpoint
from app.settings import Settings

BODY = {
    "prompt_len": 2000,
    "predicted_output_len": 200,
    "system_load": 16,
    "decode_batch_size": 16,
    "chunk_size": 512,
    "prefill_queue_requests": 2,
    "request_id": "r",
}


def endpoint(enabled: bool) -> RouteEndpoint:
    settings = Settings(watch_params=False, calibration_enabled=enabled, calibration_min_observations=5)
    app = create_app(settings, registry=CollectorRegistry())
    ep = getattr(app, "endpoints", {}).get("/route")  # PdrouteApp.serve_endpoints keeps them
    if enabled:
        cal = app.state.calibration
        store = app.state.store
        cal.model_for(store.current.params_id, store.current.model)
        from app.learners.calibration import Observed
        from app.schemas.route import RouteRequest
        from pdroute_core.request_defaults import route_inputs

        inputs = route_inputs(RouteRequest.model_validate(BODY), settings.route_defaults())
        for _ in range(60):
            cal.feedback(Observed(None, 30.0, None, None), inputs=inputs, path="disaggregated")
    if not isinstance(ep, RouteEndpoint):
        raise RuntimeError("the /route endpoint is not a RouteEndpoint")
    return ep


def per_answer_us(ep: RouteEndpoint, n: int) -> float:
    raw = json.dumps(BODY).encode()
    scope: dict[str, object] = {}
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            ep.answer(raw, scope)
        best = min(best, (time.perf_counter() - started) / n * 1e6)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args(argv)
    off = per_answer_us(endpoint(False), args.n)
    on = per_answer_us(endpoint(True), args.n)
    print(f"/route answer in-process: off {off:.1f} us, on {on:.1f} us, on/off {on / off:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
