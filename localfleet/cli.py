"""``python -m localfleet up|down|status``: a local P/D fleet from the shell.

    python -m localfleet up --model heavy --layout pd     # prefill engine on core 0, decode on 1
    python -m localfleet status
    python -m localfleet down

``up`` leaves the engines running (each in its own process group) and records them in the run
folder (``--run-dir``, default /tmp/pdroute-localfleet); ``down`` stops them by PID.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from localfleet.engine import ROLES, EngineSpec, EngineStartError, Role
from localfleet.fleet import Fleet, load_state, stop_state
from localfleet.models import SHAPES, shape_named
from localfleet.process import group_alive
from localfleet.venv import EnginesUnavailable

DEFAULT_RUN_DIR = Path("/tmp/pdroute-localfleet")
LAYOUTS: dict[str, tuple[tuple[str, Role, int], ...]] = {
    "collocated": (("c0", "collocated", 0),),
    "pd": (("p0", "prefill", 0), ("d0", "decode", 1)),
    "two-collocated": (("c0", "collocated", 0), ("c1", "collocated", 1)),
}


def _engine_arg(text: str) -> tuple[str, Role, int]:
    parts = text.split(":")
    if len(parts) != 3 or parts[1] not in ROLES or not parts[2].isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME:ROLE:CORE with ROLE in {ROLES}, got {text!r}")
    role: Role = parts[1]  # narrowed by the `in ROLES` check above
    return parts[0], role, int(parts[2])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m localfleet", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"[{DEFAULT_RUN_DIR}]")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start engines and wait until they are healthy")
    up.add_argument("--model", choices=sorted(SHAPES), default="tiny")
    up.add_argument("--layout", choices=sorted(LAYOUTS), default="pd")
    up.add_argument("--engine", type=_engine_arg, action="append", metavar="NAME:ROLE:CORE",
                    help="an engine instead of the layout (repeatable)")  # fmt: skip
    up.add_argument("--kv-cache-mib", type=int, default=256, help="KV pool of each engine [256]")
    up.add_argument("--timeout", type=float, default=300.0, help="seconds to become healthy [300]")
    up.add_argument("--engines-file", type=Path, help="also write a pdroute engines file here")
    sub.add_parser("down", help="stop the engines recorded in the run folder")
    sub.add_parser("status", help="list the recorded engines and whether they are alive")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run_dir: Path = args.run_dir
    try:
        if args.command == "up":
            if load_state(run_dir) is not None:
                print(f"localfleet: a fleet is recorded in {run_dir}; run `down` first", file=sys.stderr)
                return 1
            model = shape_named(args.model)
            layout = args.engine or LAYOUTS[args.layout]
            specs = [
                EngineSpec(name, model, core, role, kv_cache_bytes=args.kv_cache_mib * 2**20)
                for name, role, core in layout
            ]
            fleet = Fleet.start(specs, run_dir=run_dir, start_timeout_s=args.timeout, stop_at_exit=False)
            for e in fleet:
                print(f"{e.spec.name}\t{e.spec.role}\tcore {e.spec.core}\t{e.url}\tpid {e.pid}")
            if args.engines_file:
                print(f"engines file: {fleet.engines_file(args.engines_file)}")
            print(f"healthy in {fleet.start_s:.1f} s; stop: python -m localfleet --run-dir {run_dir} down")
        elif args.command == "down":
            names = stop_state(run_dir)
            print(f"stopped {', '.join(names)}" if names else f"no fleet recorded in {run_dir}")
        else:
            state = load_state(run_dir)
            if state is None:
                print(f"no fleet recorded in {run_dir}")
                return 1
            for e in state["engines"]:
                alive = "alive" if group_alive(int(e["pid"])) else "gone"
                where = f"core {e['core']}\t{e['url']}\tpid {e['pid']}"
                print(f"{e['name']}\t{e['role']}\t{e['model']}\t{where}\t{alive}")
    except (EnginesUnavailable, EngineStartError, ValueError, OSError) as exc:
        print(f"localfleet: {str(exc).splitlines()[0]}", file=sys.stderr)
        if isinstance(exc, EngineStartError):
            print("\n".join(str(exc).splitlines()[1:]), file=sys.stderr)
        return 1
    return 0
