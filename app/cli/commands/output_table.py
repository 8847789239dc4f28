"""``pdroute output-table --trace trace.csv``: the ``PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT`` value
of a trace of past requests.

Each entry is the mean output length of the trace's requests whose prompt length falls in one
power-of-two bucket (``solver.sim.prediction.output_table``: what the simulator's
``--predict bucket-mean`` tells each request). Prints the setting's value on stdout, and the
trace-wide mean (a value for ``PDROUTE_DEFAULT_OUTPUT_LEN``) on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "output-table",
        help="default output lengths by prompt length, from a trace",
        description="Print the PDROUTE_DEFAULT_OUTPUT_LEN_BY_PROMPT value of a trace: the mean output "
        "length of its requests in each power-of-two prompt-length bucket.",
    )
    p.add_argument(
        "--trace", type=Path, required=True, help="trace CSV: Azure format or timestamp_s,prompt,output"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pdroute_core.output_defaults import format_table
    from solver.sim.prediction import output_table
    from solver.sim.trace import read_trace

    table = output_table(read_trace(args.trace))  # InvalidTrace: one line, exit 2
    print(format_table(table))
    print(f"pdroute output-table: trace-wide mean output length {table.default}", file=sys.stderr)
    return 0
