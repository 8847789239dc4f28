"""``pdroute profile``: measure (torch) or look up (aiconfigurator) a ``ProfileResult`` and save it.

    pdroute profile --model qwen3-8b -o profile_data.pt                 # on the GPU, full grid
    pdroute profile --quick --model tiny --device cpu -o profile.json   # seconds on a CPU
    pdroute profile --grid long --model qwen3-8b -o long.pt              # on the GPU, to 32,768 tokens
    pdroute profile --source aiconfigurator --model Qwen/Qwen3-8B --system h100_sxm -o profile.json
    pdroute profile --engine-url URL --handoff-url URL2 --quick -o live.json   # a live engine's API

torch, ``profiling`` and aiconfigurator are imported inside ``run`` only, so the service and
the other subcommands never load them.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from app.cli.commands import profile_engine
from app.cli.usage import UsageError

TORCH_DEFAULT_MODEL = "qwen3-8b"
AICONFIGURATOR_DEFAULT_MODEL = "Qwen/Qwen3-8B"
GRID_OPTIONS = ("prompt_lens", "kv_lens", "batch_sizes", "chunk_sizes", "decode_batches", "prefix_lens")
GRID_PRESETS = ("design", "quick", "long")
GRID_HELP = {
    "prefix_lens": "T_chunk_prefix: tokens already cached before a pass of each chunk size "
    "[none; long: 512 to 32,256]"
}


def int_list(text: str) -> tuple[int, ...]:
    """``"64,128,256"`` -> ``(64, 128, 256)``; every entry a positive integer."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _positive_int(text: str) -> int:
    value = int_list(text)
    if len(value) != 1:
        raise argparse.ArgumentTypeError(f"expected one positive integer, got {text!r}")
    return value[0]


def _non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else _positive_int(text)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure prefill/decode/interference latencies and KV bandwidth into a profile",
        description="Produce a profile (.pt or .json) for `pdroute fit`: measured on this machine "
        "with torch (default) or looked up in NVIDIA's aiconfigurator database.",
    )
    p.add_argument(
        "--source", choices=("torch", "aiconfigurator", "engine"), help="[torch; engine with --engine-url]"
    )
    p.add_argument(
        "--model",
        help=f"torch: preset (qwen3-8b, qwen3-0.6b, llama-3.1-8b, tiny) or a config.json path "
        f"[{TORCH_DEFAULT_MODEL}]; aiconfigurator: Hugging Face id [{AICONFIGURATOR_DEFAULT_MODEL}]",
    )
    p.add_argument("-o", "--output", required=True, help="profile file to write (.pt or .json)")
    g = p.add_argument_group("torch source")
    g.add_argument("--checkpoint", metavar="DIR", help="load weights from a safetensors directory")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), help="[auto: cuda when present]")
    g.add_argument("--dtype", help="auto (bfloat16 on CUDA, float32 on CPU), bfloat16, float16, float32")
    g.add_argument("--src-gpu", type=_non_negative_int, help="GPU running the model [0]")
    g.add_argument("--dst-gpu", type=_non_negative_int, help="other end of the KV path [1]")
    g.add_argument("--attention", choices=("auto", "sdpa", "flash-attn"), help="[auto]")
    g.add_argument("--no-cuda-graphs", action="store_true", help="time eager steps, not graph replays")
    g.add_argument("--seed", type=_non_negative_int, help="random weights and tokens [0]")
    g.add_argument("--cpu-threads", type=_positive_int, help="intra-op threads of a CPU run [1]")
    g.add_argument("--bandwidth-gbps", type=float, help="state the KV bandwidth (GB/s) instead of measuring")
    g.add_argument("--transfer-path", help="label of that stated path (e.g. rdma-network)")
    g.add_argument(
        "--prefill-pass-tokens",
        type=_positive_int,
        metavar="N",
        help="measure prompts over N tokens as chunked prefill, passes of N over the cached ones "
        "[one forward; passes of 8192 where that runs out of GPU memory]",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    grid = p.add_argument_group(
        "grids (default: the design's; --quick: a small CPU grid; --grid long: to 32,768 tokens, "
        "with T_chunk_prefix)"
    )
    grid.add_argument("--quick", action="store_true", help="the same as --grid quick")
    grid.add_argument("--grid", choices=GRID_PRESETS, help="the preset the options below change [design]")
    for name in GRID_OPTIONS:
        flag = f"--{name.replace('_', '-')}"
        grid.add_argument(flag, type=int_list, metavar="N,N,...", help=GRID_HELP.get(name))
    grid.add_argument("--interference-kv-len", type=_positive_int)
    grid.add_argument("--warmup", type=_non_negative_int)
    grid.add_argument("--repeats", type=_positive_int)
    a = p.add_argument_group("aiconfigurator source")
    a.add_argument("--system", help="database system, e.g. h100_sxm, h200_sxm [h100_sxm]")
    a.add_argument("--backend", help="inference engine: vllm, trtllm, sglang [vllm]")
    a.add_argument("--backend-version", help="engine version in the database [latest]")
    a.add_argument("--transfer", choices=("nvlink", "pcie", "network"), help="KV path [nvlink]")
    a.add_argument("--tp", type=_positive_int, help="tensor parallel size [1]")
    profile_engine.add_options(p, int_list, _positive_int)
    p.set_defaults(func=run)


def grids_from_args(args: argparse.Namespace) -> Any:
    """The ``ProfileGrids`` of the command line: the preset (``--grid``; ``--quick`` is ``--grid
    quick``; the design's by default), each option replacing its grid."""
    from solver.profile_result import LONG_GRIDS, QUICK_GRIDS, ProfileGrids

    preset = args.grid or ("quick" if args.quick else "design")
    if args.quick and preset != "quick":
        raise UsageError(f"--quick is --grid quick; it cannot go with --grid {preset}")
    quick = profile_engine.quick_grids() if args.source == "engine" else QUICK_GRIDS
    base = {"design": ProfileGrids(), "quick": quick, "long": LONG_GRIDS}[preset]
    fields = (*GRID_OPTIONS, "interference_kv_len", "warmup", "repeats")
    changes = {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
    return dataclasses.replace(base, **changes)


TORCH_ONLY = (
    "checkpoint",
    "device",
    "dtype",
    "src_gpu",
    "dst_gpu",
    "attention",
    "seed",
    "cpu_threads",
    "bandwidth_gbps",
    "transfer_path",
    "prefill_pass_tokens",
)
AICONFIGURATOR_ONLY = ("system", "backend", "backend_version", "transfer", "tp")
ENGINE_USES = ("seed", "bandwidth_gbps")  # torch options the live engine source also reads


def check_source_options(args: argparse.Namespace) -> None:
    """Resolve the source (`engine` with --engine-url, else `torch`) and refuse options of the
    other sources rather than silently ignoring them."""
    if args.source is None:
        args.source = "engine" if args.engine_url is not None else "torch"
    if args.source == "engine" and args.engine_url is None:
        raise UsageError("--source engine needs --engine-url")
    other = {
        "torch": (*AICONFIGURATOR_ONLY, *profile_engine.LIVE_OPTIONS),
        "aiconfigurator": (*TORCH_ONLY, *profile_engine.LIVE_OPTIONS),
        "engine": (*AICONFIGURATOR_ONLY, *(n for n in TORCH_ONLY if n not in ENGINE_USES), "model"),
    }[args.source]
    wrong = [f"--{n.replace('_', '-')}" for n in other if getattr(args, n) is not None]
    if args.source != "torch" and args.no_cuda_graphs:
        wrong.append("--no-cuda-graphs")
    if wrong:
        raise UsageError(f"not used by --source {args.source}: {', '.join(wrong)}")


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def run(args: argparse.Namespace) -> int:
    check_source_options(args)
    grids = grids_from_args(args)
    if args.source == "engine":
        profile, out = profile_engine.run(args, grids)
    elif args.source == "aiconfigurator":
        from profiling.io import check_output_path, save_profile
        from profiling.sources.aiconfigurator import profile_from_aiconfigurator

        out = check_output_path(args.output)
        profile = profile_from_aiconfigurator(
            model=args.model or AICONFIGURATOR_DEFAULT_MODEL,
            system=_or(args.system, "h100_sxm"),
            backend=_or(args.backend, "vllm"),
            backend_version=args.backend_version,
            transfer=_or(args.transfer, "nvlink"),
            tp_size=_or(args.tp, 1),
            grids=grids,
        )
        save_profile(profile, out)
    else:
        from profiling.io import check_output_path
        from profiling.measure import run_full_profile

        out = check_output_path(args.output)
        profile = run_full_profile(
            args.model or TORCH_DEFAULT_MODEL,
            out,
            _or(args.src_gpu, 0),
            _or(args.dst_gpu, 1),
            grids=grids,
            device=_or(args.device, "auto"),
            dtype=args.dtype,
            checkpoint=args.checkpoint,
            seed=_or(args.seed, 0),
            attention=_or(args.attention, "auto"),
            cuda_graphs=not args.no_cuda_graphs,
            cpu_threads=_or(args.cpu_threads, 1),
            bandwidth_gbps=args.bandwidth_gbps,
            transfer_path=args.transfer_path,
            progress=not args.no_progress,
            prefill_pass_tokens=args.prefill_pass_tokens,
        )
    _summary(profile, out)
    return 0


def _summary(profile: Any, out: Any) -> None:
    from solver.fit_provenance import hardware_name

    prov, failed = profile.provenance, profile.provenance.get("failed_points", [])
    print(
        f"profile: {len(profile.T_prefill)} prefill, {len(profile.T_decode)} decode, "
        f"{len(profile.T_interference)} interference"
        + (f", {len(profile.T_chunk_prefix)} chunk-over-prefix" if profile.T_chunk_prefix else "")
        + f" points; KV path {profile.transfer_path} at "
        f"{profile.p2p_bandwidth_GBps:.3g} GB/s; device {hardware_name(profile)}"
        + (f"; KV cache {profile.kv_capacity_tokens} tokens" if profile.kv_capacity_tokens else "")
        + (f"; {len(omitted)} points out of memory" if (omitted := prov.get("omitted_points")) else "")
        + (f"; {len(failed)} points failed" if failed else "")
        + (f"; {prov['elapsed_s']:.1f} s" if "elapsed_s" in prov else "")
    )
    print(f"wrote {out}")
