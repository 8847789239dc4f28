"""What a given amount of per-request app work costs under ``wrk``: the meaning of the ratio bars.

    .venv/bin/python -m bench.bench_floor [--seconds 4] [--rounds 2] [--spins 0,2.5,5,10,15,20]

``bench_route`` compares pdroute with a bare ASGI app. This runs the bare app with a busy wait
of each ``--spins`` microseconds per request (``bench.spin_app``), under the same uvicorn
settings and the same ``wrk`` load (one thread, 64 connections), and prints each one's req/s,
server CPU per request and ratio to the bare app (spin 0), then the spin at which the ratio
crosses 0.60 and 0.50. On a shared 2-core machine a microsecond of app work costs about two of
server CPU under load, not one: a slower server gets fewer requests per event-loop wake-up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from itertools import pairwise
from pathlib import Path

from bench.bench_route import DESIGN_BODY, WrkResult, free_port, run_wrk, start_server

BARS = (0.60, 0.50)


def crossing(points: list[tuple[float, float]], bar: float) -> float | None:
    """The spin (us) where the ratio falls to ``bar``, linear between measured points; None if
    no measured point is at or below it."""
    for (s0, r0), (s1, r1) in pairwise(points):
        if r0 >= bar >= r1:
            return s0 if r0 == r1 else s0 + (r0 - bar) * (s1 - s0) / (r0 - r1)
    return None


def measure(spin_us: float, body: bytes, script: Path, connections: int, seconds: float) -> WrkResult:
    port = free_port()
    proc = start_server(["bench.spin_app:app"], port, {"PDROUTE_BENCH_SPIN_US": str(spin_us)}, body)
    try:
        run_wrk(proc.pid, port, script, connections, 1.0)  # warm-up
        return run_wrk(proc.pid, port, script, connections, seconds)
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--spins", default="0,2.5,5,10,15,20", help="comma list of microseconds; 0 first")
    args = ap.parse_args()
    spins = [float(s) for s in args.spins.split(",")]
    if not spins or spins[0] != 0:
        raise SystemExit("--spins must start with 0 (the bare app, the baseline)")
    if shutil.which("wrk") is None:
        raise SystemExit("bench_floor needs wrk: run scripts/system-deps.sh (Debian's wrk package)")
    raw = json.dumps(DESIGN_BODY).encode()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(raw.decode())}\n')
        script = Path(f.name)
    requests = dict.fromkeys(spins, 0)
    cpu = dict.fromkeys(spins, 0.0)
    try:
        for _ in range(args.rounds):  # rounds alternate over the spins: drift hits all alike
            for spin in spins:
                r = measure(spin, raw, script, args.connections, args.seconds)
                requests[spin] += r.requests
                cpu[spin] += r.cpu_us_per_request / args.rounds
    finally:
        script.unlink()
    print(f"bare app + busy wait, wrk -t1 -c{args.connections}, {args.rounds} x {args.seconds:g} s each")
    points = []
    for spin in spins:
        ratio = requests[spin] / requests[0]
        points.append((spin, ratio))
        rps = requests[spin] / (args.rounds * args.seconds)
        print(
            f"  spin {spin:5.1f} us: {rps:8.0f} req/s  server CPU {cpu[spin]:5.1f} us/request"
            f"  (+{cpu[spin] - cpu[0]:4.1f})  ratio {ratio:.2f}"
        )
    for bar in BARS:
        at = crossing(points, bar)
        where = f"{at:.1f} us" if at is not None else f"beyond {spins[-1]:g} us"
        print(f"  ratio {bar:.2f} at a busy wait of {where} per request")


if __name__ == "__main__":
    main()
