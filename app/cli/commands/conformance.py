"""``pdroute conformance -o conformance/vectors-v1.json``: write the conformance vectors.

The vectors are requests and the answers ``POST /route`` gives them (``app.cli.conformance``); a port
of the decision models (or the gateway client's local tier) replays them. The output is the same
byte for byte on every run: ``scripts/make-conformance.sh`` regenerates the shipped file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.conformance import write_vectors
from app.cli.usage import UsageError

DEFAULT_OUTPUT = Path("conformance/vectors-v1.json")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "conformance",
        help="write the conformance vectors",
        description="Write requests and the service's answers for ports of the decision models to replay.",
    )
    p.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT, help="file to write (%(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        count = write_vectors(args.output)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output} ({exc.strerror or exc})") from None
    print(f"wrote {args.output} ({count} vectors)")
    return 0
