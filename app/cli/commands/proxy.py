"""``pdroute proxy``: the OpenAI-compatible front that decides per request (``pdroute_proxy``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.settings import InvalidSettings


def register(sub: Any) -> None:
    from pdroute_proxy.settings import POLICY_NAMES

    p: argparse.ArgumentParser = sub.add_parser(
        "proxy",
        help="run the OpenAI-compatible proxy in front of a vLLM prefill/decode fleet",
        description="Serve /v1/completions and /v1/chat/completions on a fleet of engines, deciding per"
        " request whether the prompt is prefilled on the decode engine or on a prefill engine"
        " (docs/proxy.md). Every PDROUTE_* setting applies; the options override them.",
    )
    p.add_argument("--engines", type=Path, help="the engines file (or PDROUTE_ENGINES_FILE)")
    p.add_argument("--params", type=Path, help="params.json (default: the embedded file)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8100)")
    p.add_argument("--policy", choices=POLICY_NAMES, help="who decides (default pdroute)")
    p.add_argument("--kv-connector", choices=("example", "nixl"), help="the engines' KV connector")
    p.add_argument("--log-level", help="log level (default info)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import gc

    import uvicorn

    from pdroute_proxy.app import create_proxy_app
    from pdroute_proxy.settings import ProxySettings

    overrides = {
        "engines_file": args.engines,
        "params_path": args.params,
        "host": args.host,
        "port": args.port,
        "policy": args.policy,
        "kv_connector": args.kv_connector,
        "log_level": args.log_level,
    }
    try:
        settings = ProxySettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise InvalidSettings.of(exc) from None
    if settings.workers != 1:
        raise InvalidSettings("PDROUTE_WORKERS: the proxy runs one process (its accounting is per process)")
    app = create_proxy_app(settings)  # a bad params or engines file: one line, exit 2
    print(
        f"pdroute proxy: policy {settings.policy} on {len(app.state.scraper.fleet.endpoints)} engines"
        f" at http://{settings.host}:{settings.port}",
        flush=True,
    )
    # What startup built lives as long as the process: out of the collector's way, so that a full
    # collection during a request walks only what requests made (docs/proxy.md, "Overhead").
    gc.collect()
    gc.freeze()
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
    return 0
