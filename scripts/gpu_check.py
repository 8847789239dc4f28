"""The profiling job's acceptance check on a GPU: full default grid on qwen3-8b (random weights), fit, plots.

    python -m scripts.gpu_check [--out gpu_check_out] [--model qwen3-8b] [--quick] [--device cuda] [--no-long]

Run from the repository root with a Python that has a CUDA build of torch plus numpy,
matplotlib and tqdm (pdroute itself is imported from the working tree; the routing service's
web stack, fastapi and pydantic, is not needed). Stages, each through the ``pdroute`` command
line as an operator runs it (``app.cli.main`` with only these subcommands registered):

1. baselines measured in this run on the same device: a large GEMM (TFLOP/s) and a
   device-to-device copy (GB/s of memory traffic);
2. ``pdroute profile`` -> ``profile_data.pt``; 3. ``pdroute fit`` -> ``params.json`` and its fit
   report; 4. ``pdroute plot`` -> ``plots/*.png``;
5. unless ``--no-long``: ``pdroute profile --grid long`` -> ``long_profile.pt``, the grids to
   32,768 tokens with ``T_chunk_prefix`` (with ``--quick``: the quick grid plus two prefix
   lengths, which the tiny preset's 4,096 positions hold).

It prints the GPU, the elapsed time of every stage and in total, the fitted parameters with
their R^2 and warnings, and two ratios against the baselines: prefill FLOP/s at the longest
prompt over the GEMM's, and decode (batch 1, shortest context) bytes/s over the copy's. Without
CUDA it prints ``SKIP`` and exits 0; ``--device cpu`` runs the same stages on the CPU. Of the
long profile it prints prefill at 2,048 against the longest prompt (and how far from linear),
the costliest chunk over the longest prefix against the same chunk fresh, and the prompts
measured in passes because one forward did not fit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiling.models import ModelConfig
from solver.profile_result import ProfileResult

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stage:
    """One ``pdroute`` invocation."""

    name: str
    argv: tuple[str, ...]  # arguments after ``pdroute``


QUICK_PREFIX_LENS = "64,256"  # the long stage's prefixes on the quick grid


def plan_stages(out_dir: Path, *, model: str, device: str, quick: bool, long: bool = True) -> list[Stage]:
    """The command-line stages, with every output under ``out_dir``."""
    profile, params = out_dir / "profile_data.pt", out_dir / "params.json"
    prof = ["profile", "--model", model, "--device", device, "-o", str(profile)]
    stages = [
        Stage("profile", tuple([*prof, "--quick"] if quick else prof)),
        Stage("fit", ("fit", str(profile), "-o", str(params))),
        Stage("plot", ("plot", str(params), "--profile", str(profile), "-o", str(out_dir / "plots"))),
    ]
    if long:
        grid = ["--quick", "--prefix-lens", QUICK_PREFIX_LENS] if quick else ["--grid", "long"]
        long_prof = [
            "profile",
            "--model",
            model,
            "--device",
            device,
            *grid,
            "-o",
            str(out_dir / LONG_PROFILE),
        ]
        stages.append(Stage("profile-long", tuple(long_prof)))
    return stages


LONG_PROFILE = "long_profile.pt"


# The subcommands the check runs. Registering only these keeps the service's modules (and so
# fastapi and pydantic) out of the child process: a GPU image often has torch but no web stack.
STAGE_COMMANDS = ("app.cli.commands.profile", "app.cli.commands.fit", "app.cli.commands.plot")


def stage_main(argv: Sequence[str]) -> int:
    """``pdroute ARGV`` (same parsing, same one-line errors) with only ``STAGE_COMMANDS``."""
    import app.cli.main as cli

    cli.COMMAND_MODULES = STAGE_COMMANDS  # only the stages, whose modules need no fastapi
    return cli.main(argv)


def run_subprocess(argv: Sequence[str]) -> int:
    """Run ``pdroute ARGV`` (``stage_main``) as a child process from the repository root."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    code = "import sys; from scripts.gpu_check import stage_main; sys.exit(stage_main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, env=env, check=False).returncode


def prefill_flops(config: ModelConfig, prompt_len: int) -> float:
    """Matmul FLOPs of one prefill: 2 x weights x tokens, causal attention, LM head on one token.

    Per layer the projections and MLP take ``2 * params_layer`` FLOPs per token; attention's
    ``QK^T`` and ``PV`` take ``2 * 2 * heads * head_dim`` per (query, key) pair, of which there
    are ``L (L + 1) / 2`` under the causal mask.
    """
    embed = config.vocab_size * config.hidden_size
    lm_head = 0 if config.tie_word_embeddings else embed
    body = config.num_params() - embed - lm_head
    attention = (
        4 * config.num_layers * config.num_q_heads * config.head_dim * prompt_len * (prompt_len + 1) / 2
    )
    return 2.0 * body * prompt_len + attention + 2.0 * embed


def decode_bytes(config: ModelConfig, dtype_bytes: int, kv_len: int) -> float:
    """Bytes one decode step of one sequence must read: every weight once plus its KV cache."""
    embed = config.vocab_size * config.hidden_size
    weights = config.num_params() - (0 if config.tie_word_embeddings else embed)  # one embedding row only
    return float(weights * dtype_bytes + kv_len * config.bytes_per_token(dtype_bytes))


def efficiency(
    profile: ProfileResult, config: ModelConfig, gemm_tflops: float, copy_gbps: float
) -> dict[str, float]:
    """Achieved prefill TFLOP/s and decode GB/s, and their ratios to the measured baselines."""
    dtype_bytes = profile.bytes_per_token // config.bytes_per_token(1)
    longest = max(profile.T_prefill)
    prefill_tflops = prefill_flops(config, longest) / (profile.T_prefill[longest] * 1e-3) / 1e12
    kv, batch1 = min(k for k, b in profile.T_decode if b == 1), 1
    decode_gbps = decode_bytes(config, dtype_bytes, kv) / (profile.T_decode[(kv, batch1)] * 1e-3) / 1e9
    return {
        "prefill_prompt_len": float(longest),
        "prefill_tflops": prefill_tflops,
        "prefill_vs_gemm": prefill_tflops / gemm_tflops,
        "decode_kv_len": float(kv),
        "decode_gbps": decode_gbps,
        "decode_vs_copy": decode_gbps / copy_gbps,
    }


def measure_baselines(device: str) -> dict[str, float]:
    """GEMM TFLOP/s and copy GB/s (read + write traffic) on ``device``, medians of a few runs."""
    import torch

    from profiling.engine import resolve_device, resolve_dtype
    from profiling.timing import time_step

    dev = resolve_device(device)
    dtype = resolve_dtype(None, dev)
    n = 8192 if dev.type == "cuda" else 1024
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    gemm = time_step(lambda: a @ b, warmup=3, repeats=10, device=dev)
    num_bytes = (1 << 30) if dev.type == "cuda" else (64 << 20)
    src = torch.ones(num_bytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy = time_step(lambda: dst.copy_(src), warmup=3, repeats=10, device=dev)
    return {
        "gemm_tflops": 2 * n**3 / (gemm.median_ms * 1e-3) / 1e12,
        "copy_gbps": 2 * num_bytes / (copy.median_ms * 1e-3) / 1e9,
    }


def long_context_summary(profile: ProfileResult) -> list[str]:
    """Lines on a long-grid profile: prefill at 2,048 (or the nearest shorter prompt) against the
    longest, the longest prefix's costliest chunk against the same chunk fresh, and the prompts
    measured in passes."""
    lines = []
    lens = sorted(profile.T_prefill)
    short = max((n for n in lens if n <= 2048 and n < lens[-1]), default=lens[0])
    longest = lens[-1]
    if longest > short:
        a, b = profile.T_prefill[short], profile.T_prefill[longest]
        growth = (b / a) / (longest / short)
        lines.append(
            f"long context: prefill {a:.4g} ms at {short} tokens, {b:.4g} ms at {longest}: "
            f"{b / a:.1f}x for {longest / short:.0f}x the tokens ({growth:.2f}x linear)"
        )
    if profile.T_chunk_prefix:
        prefix = max(p for p, _ in profile.T_chunk_prefix)
        chunk = max(c for p, c in profile.T_chunk_prefix if p == prefix)
        ms = profile.T_chunk_prefix[(prefix, chunk)]
        fresh = profile.T_prefill.get(chunk)
        versus = f" ({ms / fresh:.2f}x the same chunk fresh)" if fresh else ""
        lines.append(f"chunk over prefix: {chunk} tokens after {prefix} cached: {ms:.4g} ms{versus}")
    chunked = profile.provenance.get("chunked_prefill", {})
    for name, how in sorted(chunked.items()):
        lines.append(
            f"measured in passes: {name}, {how['num_passes']} passes of {how['pass_tokens']} ({how['why']})"
        )
    failed = profile.provenance.get("failed_points", [])
    lines.append(f"long profile failed points: {len(failed)}")
    lines.extend(f"  - {f['point']}: {f['error']}" for f in failed)
    return lines


def format_summary(params: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """One line per parameter (value, unit, R^2), then the fit's warnings."""
    lines = []
    for name, fit in report.get("parameters", {}).items():
        value, r2 = params.get(name, fit.get("value")), fit.get("r_squared")
        value_text = f"{value:.6g}" if isinstance(value, int | float) else str(value)
        r2_text = f"R^2 {r2:.4f}" if isinstance(r2, int | float) else "R^2 -"
        lines.append(f"  {name:<16} {value_text:>12} {fit.get('unit', ''):<10} {r2_text}")
    warnings = report.get("warnings", [])
    lines.append(f"  fit warnings: {len(warnings)}")
    lines.extend(f"    - {w}" for w in warnings)
    return lines


def main(
    argv: Sequence[str] | None = None, run_stage: Callable[[Sequence[str]], int] = run_subprocess
) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check_out"), help="output directory")
    parser.add_argument("--model", default="qwen3-8b")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="the small --quick grid (smoke run)")
    parser.add_argument("--no-long", action="store_true", help="skip the long-context profile")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the stages run from the repository root
    started = time.monotonic()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"SKIP: no CUDA GPU visible (torch {torch.__version__}, CUDA build {torch.version.cuda})")
        return 0
    from profiling.models import resolve_model
    from solver.fit_report import fit_report_path
    from solver.profile_io import load_profile

    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"gpu_check: {args.model} on {name}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    elapsed: dict[str, float] = {}
    t0 = time.monotonic()
    baselines = measure_baselines(args.device)
    if args.device == "cuda":
        torch.cuda.empty_cache()
    elapsed["baselines"] = time.monotonic() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    stages = plan_stages(
        args.out, model=args.model, device=args.device, quick=args.quick, long=not args.no_long
    )
    for stage in stages:
        t0 = time.monotonic()
        code = run_stage(stage.argv)
        elapsed[stage.name] = time.monotonic() - t0
        if code != 0:
            print(f"gpu_check: FAILED at {stage.name} (exit {code}) after {time.monotonic() - started:.1f} s")
            return code
    params_path = args.out / "params.json"
    params = json.loads(params_path.read_text())
    report = json.loads(fit_report_path(params_path).read_text())
    profile = load_profile(args.out / "profile_data.pt")
    eff = efficiency(profile, resolve_model(args.model), baselines["gemm_tflops"], baselines["copy_gbps"])
    print(f"\n== gpu_check: {args.model} on {name} ==")
    print(f"KV path {profile.transfer_path} at {profile.p2p_bandwidth_GBps:.2f} GB/s")
    print("params:")
    print("\n".join(format_summary(params, report)))
    print(
        f"baselines: GEMM {baselines['gemm_tflops']:.3g} TFLOP/s, copy {baselines['copy_gbps']:.4g} GB/s\n"
        f"prefill {eff['prefill_prompt_len']:.0f} tokens: {eff['prefill_tflops']:.3g} TFLOP/s "
        f"= {eff['prefill_vs_gemm']:.2f} x GEMM\n"
        f"decode batch 1 at kv {eff['decode_kv_len']:.0f}: {eff['decode_gbps']:.4g} GB/s "
        f"= {eff['decode_vs_copy']:.2f} x copy"
    )
    failed = profile.provenance.get("failed_points", [])
    print(f"failed points: {len(failed)}; cuda graphs: {profile.provenance.get('cuda_graphs')}")
    if not args.no_long:
        print("\n".join(long_context_summary(load_profile(args.out / LONG_PROFILE))))
    print("elapsed: " + ", ".join(f"{k} {v:.1f} s" for k, v in elapsed.items()))
    print(f"total {time.monotonic() - started:.1f} s; outputs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
