"""``pdroute route``: one decision with its breakdown, computed locally from a params file.

The arguments are checked with the API's own bounds (``app.schemas.RouteRequest``), the model
is chosen as the service chooses it (``--decision-model``, default auto), and ``--json`` prints the
answer ``POST /route`` would give, plus the break-even load.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.cli.usage import UsageError
from app.http.route_codec import encoder_for
from app.routes.route import decide
from app.schemas.route import RouteRequest
from app.settings import embedded_params_path
from pdroute_core.request_defaults import RouteDefaults
from pdroute_core.routing import AUTO, MODEL_NAMES, OPTIONAL_INPUTS, build_model
from pdroute_core.routing.objective import DEFAULT_OBJECTIVE, OBJECTIVES
from pdroute_core.routing.queue_aware import DEFAULT_HARM_WEIGHT, DEFAULT_SLO_MARGIN
from pdroute_core.routing.types import OPTIONAL_RATE_INPUTS, UNLISTED_INPUTS
from solver.params import load_params

# The request fields whose flag is not ``--<field with dashes>``.
_FLAG_OF = {"predicted_output_len": "--output-len"}
_FLOAT_INPUTS = ("ttft_slo_ms", "tpot_slo_ms", *OPTIONAL_RATE_INPUTS)
_STATE_INPUTS = (*OPTIONAL_INPUTS, *UNLISTED_INPUTS)


def _flag(field: str) -> str:
    return _FLAG_OF.get(field, "--" + field.replace("_", "-"))


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "route", help="decide one request offline", description="Decide one request and explain it."
    )
    p.add_argument("--prompt-len", type=int, required=True)
    p.add_argument("--output-len", type=int, required=True, help="predicted output tokens")
    p.add_argument("--system-load", type=int, required=True, help="decodes running where it would collocate")
    p.add_argument("--decode-batch-size", type=int, default=1, help="batch of the target decode GPU")
    p.add_argument("--chunk-size", type=int, default=256)
    state = p.add_argument_group("optional state (queue-aware model; a missing one is assumed)")
    for name in _STATE_INPUTS:
        help_text = RouteRequest.model_fields[name].description
        state.add_argument(_flag(name), type=float if name in _FLOAT_INPUTS else int, help=help_text)
    p.add_argument(
        "--decision-model",
        "--model",  # the option's first name, kept
        dest="decision_model",
        default=AUTO,
        choices=(AUTO, *MODEL_NAMES),
        help="decision model (default auto: queue-aware when the params carry it, else design)",
    )
    p.add_argument(
        "--harm-weight",
        type=float,
        default=DEFAULT_HARM_WEIGHT,
        help="queue-aware: weight of the harm to other requests (default %(default)s)",
    )
    p.add_argument(
        "--slo-margin",
        type=float,
        default=DEFAULT_SLO_MARGIN,
        help="queue-aware: a target is met when predicted within (1 - margin) of it (default %(default)s)",
    )
    p.add_argument(
        "--objective",
        default=DEFAULT_OBJECTIVE,
        choices=OBJECTIVES,
        help="queue-aware: what to optimise when no path meets the targets (default %(default)s)",
    )
    p.add_argument("--params", type=Path, help="params.json (default: the embedded file)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def _describe(err: Any) -> str:
    """One API validation error as a flag's complaint (``--prompt-len: must be >= 1, got 0``)."""
    field = str(err["loc"][0]) if err["loc"] else "arguments"
    ctx = err.get("ctx") or {}
    bounds = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}
    for kind, op in bounds.items():
        if err["type"] == kind:
            limit = next(iter(ctx.values()))
            return f"{_flag(field)}: must be {op} {limit}, got {err['input']}"
    return f"{_flag(field)}: {err['msg']}"


def parse_request(args: argparse.Namespace) -> RouteRequest:
    """The arguments as the API's request, checked with its bounds (``UsageError`` naming the flag)."""
    fields = {
        "prompt_len": args.prompt_len,
        "predicted_output_len": args.output_len,
        "system_load": args.system_load,
        "decode_batch_size": args.decode_batch_size,
        "chunk_size": args.chunk_size,
        **{name: getattr(args, name) for name in _STATE_INPUTS},
    }
    if not 0 <= args.harm_weight < float("inf"):
        raise UsageError(f"--harm-weight: must be a finite number >= 0, got {args.harm_weight}")
    if not 0 <= args.slo_margin < 1:
        raise UsageError(f"--slo-margin: must be in [0, 1), got {args.slo_margin}")
    try:
        return RouteRequest.model_validate(fields)
    except ValidationError as exc:
        raise UsageError(_describe(exc.errors(include_url=False)[0])) from None


def run(args: argparse.Namespace) -> int:
    req = parse_request(args)
    params = load_params(args.params or embedded_params_path())
    model = build_model(
        args.decision_model,
        params,
        harm_weight=args.harm_weight,
        slo_margin=args.slo_margin,
        objective=args.objective,
    )
    _, b = decide(model, req, RouteDefaults(args.output_len, None, None))
    answer = encoder_for(type(b)).to_dict(b, model.name, params.params_id, None)
    del answer["request_id"]
    if args.json:
        print(json.dumps({**answer, "break_even_load": params.break_even_load}, indent=2))
        return 0
    rows = [
        ("decision", b.decision),
        ("reason", b.reason),
        ("model", model.name),
        ("t_collocated_ms", f"{b.t_collocated_ms:.3f}"),
        ("t_disaggregated_ms", f"{b.t_disaggregated_ms:.3f}"),
        ("predicted saving ms", f"{abs(b.t_collocated_ms - b.t_disaggregated_ms):.3f}"),
        ("assumed", ", ".join(b.assumed) or "nothing"),
        *((k, str(v)) for k, v in answer.items() if isinstance(v, bool)),
        *((f"  {k}", f"{v:.3f}") for k, v in answer["breakdown"].items()),
        ("break-even load", f"{params.break_even_load:.3f}"),
        (
            "params",
            f"{params.params_id} ({params.metadata.model}, {params.metadata.hardware}, "
            f"{params.metadata.transfer_path})",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
