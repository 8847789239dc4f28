"""The ``pdroute`` command line: one command, one module per subcommand in ``app.cli.commands``.

Every subcommand module exposes ``register(subparsers)`` which adds its parser and sets
``func(args) -> int``. Domain errors (``pdroute_core.errors.PdrouteError``) and usage errors are
printed as one line on stderr with a non-zero exit, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from pdroute_core.errors import PdrouteError

# Subcommand modules, in help order. Each is imported only to register its parser; heavy
# dependencies (torch, aiconfigurator, matplotlib) are imported inside the command functions.
COMMAND_MODULES: tuple[str, ...] = (
    "app.cli.commands.serve",
    "app.cli.commands.proxy",
    "app.cli.commands.route",
    "app.cli.commands.profile",
    "app.cli.commands.fit",
    "app.cli.commands.plot",
    "app.cli.commands.plan",
    "app.cli.commands.simulate",
    "app.cli.commands.conformance",
    "app.cli.commands.output_table",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdroute",
        description="Route LLM requests between collocated and disaggregated prefill/decode.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except PdrouteError as exc:
        print(f"pdroute {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pdroute {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``pdroute fit ... | head``): not an error worth a traceback.
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


if __name__ == "__main__":
    sys.exit(main())
