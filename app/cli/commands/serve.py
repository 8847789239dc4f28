"""``pdroute serve``: validate the params, then run the service under uvicorn."""

from __future__ import annotations

import argparse
import copy
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.settings import InvalidSettings, Settings

# On SIGTERM, requests still in flight after this long are cancelled (a client that stopped
# sending its body would otherwise hold the shutdown until the kubelet's SIGKILL). Within the
# Deployment's terminationGracePeriodSeconds (30) minus its preStop sleep (5).
GRACEFUL_SHUTDOWN_S = 10


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "serve", help="run the routing service", description="Run the routing service (HTTP)."
    )
    p.add_argument("--host", help="bind address (default 127.0.0.1, or PDROUTE_HOST)")
    p.add_argument("--port", type=int, help="port (default 8000, or PDROUTE_PORT)")
    p.add_argument("--params", type=Path, help="params.json (default: the embedded Qwen3-8B/H100 file)")
    p.add_argument("--workers", type=int, help="worker processes (default 1)")
    p.add_argument("--log-level", help="uvicorn log level (default info)")
    p.add_argument(
        "--decision-model",
        "--model",  # the option's first name, kept
        dest="decision_model",
        choices=("auto", "design", "queue-aware"),
        help="decision model (default auto: queue-aware when the params carry it; or PDROUTE_DECISION_MODEL)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # SIGHUP means "reload" once the service is up; until then (and in uvicorn's supervisor,
    # which replaces this) it must not kill the process with the default action.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    import uvicorn

    from app.http.protocol import HTTP_PROTOCOL, MAX_HEAD_BYTES
    from pdroute_core.routing import build_model
    from solver.params import load_params

    overrides = {
        "host": args.host,
        "port": args.port,
        "params_path": args.params,
        "workers": args.workers,
        "log_level": args.log_level,
        "decision_model": args.decision_model,
    }
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:  # a bad PDROUTE_* value: one line, exit 2
        raise InvalidSettings.of(exc) from None
    # Validate before starting: a bad file is one clear line and a non-zero exit, not a
    # traceback from inside the server's startup.
    params = load_params(settings.resolved_params_path())
    model = build_model(  # forms present?
        settings.decision_model,
        params,
        harm_weight=settings.harm_weight,
        slo_margin=settings.slo_margin,
        objective=settings.objective,
    )
    if settings.engines_file is not None:  # the engines file too (InvalidEngines: one line)
        from app.engines.config import load_fleet

        load_fleet(settings.engines_file)
    # Worker processes build their own app from the environment, so pass the choices there.
    os.environ["PDROUTE_PARAMS_PATH"] = str(settings.resolved_params_path())
    for key in ("host", "port", "workers", "log_level", "decision_model"):
        os.environ[f"PDROUTE_{key.upper()}"] = str(getattr(settings, key))
    if settings.workers > 1 and settings.last_good_params_path is None:
        # uvicorn restarts every worker on SIGHUP; a worker that then finds a bad file starts
        # on this copy of the last valid params instead of crash-looping.
        last_good = Path(tempfile.mkdtemp(prefix="pdroute-")) / "last-good-params.json"
        os.environ["PDROUTE_LAST_GOOD_PARAMS_PATH"] = str(last_good)
    print(
        f"pdroute: serving {params.params_id} ({params.metadata.model} on {params.metadata.hardware}, "
        f"{params.metadata.transfer_path}) with the {model.name} model at http://{settings.host}:{settings.port}",
        flush=True,
    )
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["loggers"]["pdroute"] = {"handlers": ["default"], "level": settings.log_level.upper()}
    uvicorn.run(
        "app.main:create_app_from_env",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        access_log=False,
        log_config=log_config,
        # Bounded request heads and a request timeout (app.http.envelope).
        http=HTTP_PROTOCOL,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    return 0
