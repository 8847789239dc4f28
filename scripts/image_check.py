"""Run a built image as an operator would, and check it (``scripts/image.sh`` calls this).

The containers are started by ``scripts/image_runner.py``: read-only root, the image's user,
host network, a tmpfs on ``/tmp``; the service's get a params directory mounted read-only at
``/etc/pdroute/params``.

Usage: ``python -m scripts.image_check --image NAME --work DIR -- BUILDAH...`` (as root). Prints
the figures it measured as one ``key=value`` line on stdout; any failure is one line on stderr and
exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.bench_route import parse_wrk
from pdroute_core.errors import InvalidParams
from scripts.image_runner import CheckFailed, Container, Runner, Volume, last_line, wait_exit
from solver.params import load_params

ROOT = Path(__file__).resolve().parents[1]
PARAMS_MOUNT = "/etc/pdroute/params"
IMAGE_USER = "10001:10001"  # the Dockerfile's USER; the Kubernetes manifests' runAsUser and runAsGroup
# A request whose answer differs between the two params files the check uses.
ROUTE_BODY = {"prompt_len": 2048, "predicted_output_len": 200, "system_load": 48, "decode_batch_size": 8}


def wait_ready(c: Container, timeout_s: float = 120) -> float:
    """Seconds from start until ``/readyz`` answers 200."""
    deadline = c.started + timeout_s
    while time.monotonic() < deadline:
        if c.proc.poll() is not None:
            raise CheckFailed(f"{c.name}: the service exited ({c.proc.returncode}): {c.log_tail()}")
        try:
            if httpx.get(c.url + "/readyz", timeout=2).status_code == 200:
                return time.monotonic() - c.started
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise CheckFailed(f"{c.name}: /readyz not 200 within {timeout_s:g} s: {c.log_tail()}")


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of ``/metrics`` (0 when absent), parsed by prometheus_client."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def expect(ok: bool, message: str) -> None:
    if not ok:
        raise CheckFailed(message)


def proc_status(pid: int, key: str) -> list[str]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split()[1:]
    raise CheckFailed(f"/proc/{pid}/status has no {key}")


def rss_mib(pid: int) -> float:
    kib = proc_status(pid, "VmRSS")[0]
    return int(kib) / 1024


def local_route(params: Path) -> dict[str, Any]:
    """What ``/route`` must answer for ``ROUTE_BODY`` with these params: ``pdroute route`` here."""
    b = ROUTE_BODY
    out = subprocess.run(
        [sys.executable, "-m", "app", "route", "--params", str(params), "--json",
         "--prompt-len", str(b["prompt_len"]), "--output-len", str(b["predicted_output_len"]),
         "--system-load", str(b["system_load"]), "--decode-batch-size", str(b["decode_batch_size"])],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


def check_route(c: Container, params: Path) -> str:
    """One ``/route`` answer equal to the local decision; returns the decision."""
    got = httpx.post(c.url + "/route", json=ROUTE_BODY, timeout=10)
    expect(got.status_code == 200, f"{c.name}: /route answered {got.status_code}: {got.text[:200]}")
    answer, want = got.json(), local_route(params)
    for key in ("decision", "reason", "model", "params_id", "t_collocated_ms", "t_disaggregated_ms"):
        expect(
            answer.get(key) == want.get(key), f"{c.name}: /route {key} {answer.get(key)!r} != {want[key]!r}"
        )
    return str(answer["decision"])


def served_id(c: Container) -> dict[str, Any]:
    got = httpx.get(c.url + "/params", timeout=10)
    expect(got.status_code == 200, f"{c.name}: /params answered {got.status_code}")
    body: dict[str, Any] = got.json()
    return body


def stop(c: Container, timeout_s: float = 30) -> float:
    """SIGTERM to the service, as ``docker stop`` sends; it must exit 0. Returns seconds taken."""
    t0 = time.monotonic()
    os.kill(c.pid, signal.SIGTERM)
    try:
        code = c.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{c.name}: still running {timeout_s:g} s after SIGTERM") from None
    log = c.log.read_text(errors="replace")
    expect(code == 0, f"{c.name}: exit status {code} after SIGTERM: {c.log_tail()}")
    expect("Traceback" not in log, f"{c.name}: a traceback in its log: {c.log}")
    return time.monotonic() - t0


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by renaming a new file over it, as ``pdroute fit`` and editors do."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(path)


def under_load(c: Container, seconds: float) -> tuple[float, float, int]:
    """``wrk`` on ``POST /route`` for ``seconds``: (req/s, peak RSS in MiB sampled every 0.1 s,
    the number of samples)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", dir=c.log.parent, delete=False) as f:
        f.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(json.dumps(ROUTE_BODY))}\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
    peak = [rss_mib(c.pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak.append(rss_mib(c.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        out = subprocess.run(
            ["wrk", "-t1", "-c8", f"-d{seconds:g}s", "--latency", "-s", f.name, c.url + "/route"],
            capture_output=True, text=True, timeout=seconds + 60,
        )  # fmt: skip
    finally:
        done.set()
        sampler.join()
    result = parse_wrk(out.stdout)
    expect(result.errors == 0, f"{c.name}: {result.errors} errors under wrk")
    expect(len(peak) > seconds * 5, f"{c.name}: only {len(peak)} RSS samples in {seconds:g} s")
    return result.rps, max(peak), len(peak)


def run_checks(runner: Runner, work: Path, load_s: float) -> dict[str, str]:
    figures: dict[str, str] = {}
    user = runner.config.user
    expect(user == IMAGE_USER, f"the image runs as {user!r}, not {IMAGE_USER}")
    expect(bool(runner.config.healthcheck), "the image has no exec-form HEALTHCHECK")
    good = ROOT / "solver/data/params/qwen3-8b_h200_sxm_vllm_nvlink.json"
    good_id = load_params(good).params_id
    embedded_id = load_params(ROOT / "solver/data/params/default.json").params_id
    expect(good_id != embedded_id, "the check needs params that differ from the embedded default")

    # 1. A params file mounted read-only and served; /route, /metrics, the health check, the
    #    read-only root, the user; a bad file written over it keeps the served params; SIGTERM.
    mounted = work / "params"
    mounted.mkdir()
    shutil.copy(good, mounted / "params.json")
    env = {"PDROUTE_PARAMS_PATH": f"{PARAMS_MOUNT}/params.json"}
    c = runner.start("mounted", env, [Volume(mounted, PARAMS_MOUNT)])
    figures["ready_s"] = f"{wait_ready(c):.2f}"
    uid, gid = user.split(":")
    expect(proc_status(c.pid, "Uid") == [uid] * 4, f"mounted: uids {proc_status(c.pid, 'Uid')}, not {uid}")
    expect(proc_status(c.pid, "Gid") == [gid] * 4, f"mounted: gids {proc_status(c.pid, 'Gid')}, not {gid}")
    write = c.exec(["/usr/bin/touch", "/etc/probe"], as_image_user=False)  # as root: only ro stops it
    expect(write.returncode != 0 and "Read-only file system" in write.stderr, "mounted: the root is writable")
    served = served_id(c)
    expect(
        served["params_id"] == good_id, f"mounted: serves {served['params_id']}, not the mounted {good_id}"
    )
    decision = check_route(c, good)
    metrics = httpx.get(c.url + "/metrics", timeout=10).text
    expect(
        metric(metrics, "pdroute_route_decisions_total", decision=decision) == 1, "mounted: decision count"
    )
    expect(metric(metrics, "pdroute_params_info", params_id=good_id) == 1, "mounted: pdroute_params_info")
    health = c.exec(runner.config.healthcheck, as_image_user=True)
    expect(health.returncode == 0, f"mounted: HEALTHCHECK failed: {last_line(health.stderr)}")
    figures["rss_idle_mib"] = f"{rss_mib(c.pid):.1f}"
    if load_s > 0:
        rps, peak, samples = under_load(c, load_s)
        figures["load_rps"], figures["rss_load_mib"] = f"{rps:.0f}", f"{peak:.1f}"
        figures["rss_samples"] = str(samples)
    write_atomically(mounted / "params.json", '{"schema_version": 2, "not": "params"')
    deadline = time.monotonic() + 60
    while metric(httpx.get(c.url + "/metrics", timeout=10).text, "pdroute_params_reloads_total",
                 trigger="watch", outcome="failure") < 1:  # fmt: skip
        expect(time.monotonic() < deadline, "mounted: the bad params file was not refused within 60 s")
        time.sleep(0.5)
    after = served_id(c)
    expect(after["params_id"] == good_id, f"mounted: a bad file replaced the params ({after['params_id']})")
    expect(bool(after["last_reload_error"]), "mounted: /params shows no reload error")
    check_route(c, good)
    figures["stop_s"] = f"{stop(c):.2f}"

    # 2. No params file: the embedded default.
    c = runner.start("embedded", {}, [])
    wait_ready(c)
    expect(served_id(c)["params_id"] == embedded_id, "embedded: not the embedded default params")
    check_route(c, ROOT / "solver/data/params/default.json")
    stop(c)

    # 3. A bad file at start: one clear line and a non-zero exit, as outside the image.
    bad = work / "bad"
    bad.mkdir()
    (bad / "params.json").write_text("{not json")
    c = runner.start("bad", env, [Volume(bad, PARAMS_MOUNT)])
    try:
        code = c.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise CheckFailed("bad: still running 120 s after start with a bad params file") from None
    log = c.log.read_text(errors="replace")
    expect(code != 0, "bad: exit status 0 with a bad params file")
    expect("params.json" in c.log_tail() and "Traceback" not in log, f"bad: unclear refusal: {c.log_tail()}")
    return figures


def run_profiler_checks(runner: Runner, work: Path) -> dict[str, str]:
    """``pdroute profile --help``, then the entry point (profile, fit) on a tiny model on the CPU,
    as uid 10001 on a read-only root, writing into a mounted ``/work``."""
    c = runner.start("help", {}, [], ["pdroute", "profile", "--help"])
    code = wait_exit(c, 300)
    expect(
        code == 0 and "usage: pdroute profile" in c.log.read_text(), f"help: status {code}: {c.log_tail()}"
    )
    out = work / "out"
    out.mkdir()
    expect(runner.config.user == IMAGE_USER, f"the image runs as {runner.config.user!r}, not {IMAGE_USER}")
    uid, gid = (int(x) for x in runner.config.user.split(":"))
    os.chown(out, uid, gid)
    args = "--model tiny --device cpu --quick --no-progress --src-gpu 0 --dst-gpu 0"
    c = runner.start("profile", {"PDROUTE_PROFILE_ARGS": args}, [Volume(out, "/work", writable=True)])
    code = wait_exit(c, 1200)
    expect(code == 0, f"profile: exit status {code}: {c.log_tail()}")
    params = load_params(out / "params.json")  # raises InvalidParams on a bad file
    expect("params.json" in c.log_tail(), f"profile: {c.log_tail()}")
    return {"profile_s": f"{time.monotonic() - c.started:.1f}", "params_id": params.params_id}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", required=True)
    p.add_argument("--work", type=Path, required=True, help="an empty scratch directory")
    p.add_argument("--load-s", type=float, default=10, help="seconds of wrk load (0: none)")
    p.add_argument("--target", choices=("service", "profiler"), default="service")
    p.add_argument("buildah", nargs="+", help="the buildah command with its storage options")
    args = p.parse_args(argv)
    if args.target == "service" and args.load_s > 0 and shutil.which("wrk") is None:
        print("image_check: wrk not installed (scripts/system-deps.sh); use --load-s 0", file=sys.stderr)
        return 1
    runner: Runner | None = None
    try:
        runner = Runner(args.buildah, args.image, args.work)
        if args.target == "service":
            figures = run_checks(runner, args.work, args.load_s)
        else:
            figures = run_profiler_checks(runner, args.work)
    except (CheckFailed, InvalidParams, httpx.HTTPError, subprocess.SubprocessError, OSError) as exc:
        print(f"image_check: {exc}", file=sys.stderr)
        return 1
    finally:
        if runner is not None:
            runner.stop_all()
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
