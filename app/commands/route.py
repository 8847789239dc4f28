"""``pdroute route``: one decision with its breakdown, computed locally from a params file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from app.params_store import read_params_file
from app.settings import embedded_params_path
from solver.errors import PdrouteError
from solver.routing.design import AnalyticalCostModel


class BadArgument(PdrouteError):
    pass


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "route", help="decide one request offline", description="Decide one request and explain it."
    )
    p.add_argument("--prompt-len", type=int, required=True)
    p.add_argument("--output-len", type=int, required=True, help="predicted output tokens")
    p.add_argument("--system-load", type=int, required=True, help="decodes running where it would collocate")
    p.add_argument("--decode-batch-size", type=int, default=1, help="batch of the target decode GPU")
    p.add_argument("--chunk-size", type=int, default=256)
    p.add_argument("--params", type=Path, help="params.json (default: the embedded file)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for name, minimum in (
        ("prompt_len", 1),
        ("output_len", 1),
        ("system_load", 0),
        ("decode_batch_size", 0),
        ("chunk_size", 1),
    ):
        if getattr(args, name) < minimum:
            raise BadArgument(f"--{name.replace('_', '-')}: must be >= {minimum}, got {getattr(args, name)}")
    model = AnalyticalCostModel(read_params_file(args.params or embedded_params_path()))
    b = model.explain(
        args.prompt_len, args.output_len, args.system_load, args.decode_batch_size, args.chunk_size
    )
    p = model.params
    if args.json:
        print(
            json.dumps(
                {**b.__dict__, "params_id": p.params_id, "break_even_load": p.break_even_load}, indent=2
            )
        )
        return 0
    rows = [
        ("decision", b.decision),
        ("t_collocated_ms", f"{b.t_collocated_ms:.3f}"),
        ("t_disaggregated_ms", f"{b.t_disaggregated_ms:.3f}"),
        ("predicted saving ms", f"{b.saving_ms:.3f}"),
        ("  prefill_ms", f"{b.prefill_ms:.3f}"),
        ("  transfer_ms", f"{b.transfer_ms:.3f}"),
        ("  interference_ms", f"{b.interference_ms:.3f}"),
        ("  decode_collocated_ms", f"{b.decode_collocated_ms:.3f}"),
        ("  decode_disaggregated_ms", f"{b.decode_disaggregated_ms:.3f}"),
        ("break-even load", f"{p.break_even_load:.3f}"),
        ("params", f"{p.params_id} ({p.metadata.model}, {p.metadata.hardware}, {p.metadata.transfer_path})"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
