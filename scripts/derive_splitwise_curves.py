#!/usr/bin/env python3
"""Derive pdroute's built-in planner curve sets from Splitwise's measured ``perf_model.csv``.

Usage::

    python scripts/derive_splitwise_curves.py PATH/TO/perf_model.csv            # write the sets
    python scripts/derive_splitwise_curves.py PATH/TO/perf_model.csv --check    # compare only

The CSV is SplitwiseSim's ``data/perf_model.csv`` (Patel et al., "Splitwise", ISCA 2024; MIT
licence, Copyright (c) 2024 Pratyush Patel). It is read, never copied: only the derived medians
below are written to ``solver/data/curves/<name>.json``.

Derivation, for each model, on the rows with ``hardware == "h100-80gb"`` (the measured H100 rows;
the ``h100-80gb-pcap`` rows are derived from them) and ``tensor_parallel == 8``:

* prefill throughput (tokens/s) of a row = prompt_size * batch_size / (prompt_time / 1000), with
  ``prompt_time`` in ms per prefill batch; rows are grouped by the batch in tokens
  (prompt_size * batch_size) and each point is the median over its group;
* decode throughput (tokens/s) of a row = batch_size / (token_time / 1000), with ``token_time`` in
  ms per decode iteration; rows are grouped by batch_size (all prompt and output sizes of that
  batch) and each point is the median over its group.

Capacity points are computed from model facts (weights and KV-cache bytes per token) at the same
batches, and every assumption is written into the file. Output is deterministic (no timestamps),
so ``--check`` can tell whether the committed files still match the data.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "solver" / "data" / "curves"
EXPECTED_SHA256 = "dbbe505d1d64fc4bd1ec03c50edf944643586de4f68a81e94cbd55dd5bdfbf41"
HARDWARE = "h100-80gb"
TENSOR_PARALLEL = 8
MEMORY_GB = 640.0  # 8 x 80 GB, the design's machine
REFERENCE_CONTEXT_TOKENS = 512 + 128  # the measurement setting of the batch sweep
PREFILL_MAX_BATCH_TOKENS = 131_072
DECODE_MAX_BATCH_REQUESTS = 512

# Facts per model: parameter count, KV-cache bytes per token (fp16), and how they are obtained.
MODELS: dict[str, dict[str, Any]] = {
    "bloom-176b": {
        "set_name": "bloom-176b-8xh100",
        "model": "BLOOM-176B (bigscience/bloom)",
        "parameters": 176_247_271_424,
        "kv_bytes_per_token": 2 * 70 * 14336 * 2,
        "kv_formula": "2 (K and V) x 70 layers x 14336 hidden (112 heads x 128, multi-head) x 2 bytes",
    },
    "llama2-70b": {
        "set_name": "llama2-70b-8xh100",
        "model": "Llama-2-70B (meta-llama/Llama-2-70b-hf)",
        "parameters": 68_976_648_192,
        "kv_bytes_per_token": 2 * 80 * 8 * 128 * 2,
        "kv_formula": "2 (K and V) x 80 layers x 8 KV heads (GQA) x 128 head dim x 2 bytes",
    },
}


def _round(value: float) -> float:
    return round(value, 4)


def _round_gb(value: float) -> float:
    return round(value, 6)  # 1 kB resolution, so the linear capacity points stay linear


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _medians(groups: dict[int, list[float]]) -> list[tuple[int, float, int]]:
    return [(batch, statistics.median(vals), len(vals)) for batch, vals in sorted(groups.items())]


def derive(csv_path: Path) -> dict[str, dict[str, Any]]:
    """Return ``{set_name: curve-set mapping}`` for every model in ``MODELS``."""
    with csv_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    sha = _sha256(csv_path)
    sets: dict[str, dict[str, Any]] = {}
    for model_key, facts in MODELS.items():
        selected = [
            r
            for r in rows
            if r["model"] == model_key
            and r["hardware"] == HARDWARE
            and int(r["tensor_parallel"]) == TENSOR_PARALLEL
        ]
        if not selected:
            raise SystemExit(f"no rows for {model_key} on {HARDWARE} TP{TENSOR_PARALLEL} in {csv_path}")
        prefill: dict[int, list[float]] = defaultdict(list)
        decode: dict[int, list[float]] = defaultdict(list)
        for r in selected:
            tokens = int(r["prompt_size"]) * int(r["batch_size"])
            prefill[tokens].append(tokens / (float(r["prompt_time"]) / 1000.0))
            batch = int(r["batch_size"])
            decode[batch].append(batch / (float(r["token_time"]) / 1000.0))
        sets[facts["set_name"]] = _curve_set(model_key, facts, _medians(prefill), _medians(decode), sha)
        sets[facts["set_name"]]["provenance"]["rows_used"] = len(selected)
    return sets


def _curve_set(
    model_key: str,
    facts: dict[str, Any],
    prefill: list[tuple[int, float, int]],
    decode: list[tuple[int, float, int]],
    sha: str,
) -> dict[str, Any]:
    kv = int(facts["kv_bytes_per_token"])
    weights_gb = facts["parameters"] * 2 / 1e9
    source = {
        "repository": "https://github.com/Mutinifni/splitwise-sim",
        "path": "data/perf_model.csv",
        "commit": "8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0",
        "sha256": sha,
        "license": "MIT, Copyright (c) 2024 Pratyush Patel",
        "paper": "Patel et al., Splitwise: Efficient Generative LLM Inference Using Phase Splitting, "
        "ISCA 2024 (arXiv 2311.18677), Fig. 6; vLLM on 8xH100 TP8",
    }
    rows_filter = f"model == {model_key!r}, hardware == {HARDWARE!r}, tensor_parallel == {TENSOR_PARALLEL}"
    return {
        "schema_version": 1,
        "name": facts["set_name"],
        "model": facts["model"],
        "hardware": "8x NVIDIA H100 80GB, 8-way tensor parallel, vLLM",
        "memory_gb": MEMORY_GB,
        "weights_gb": _round_gb(weights_gb),
        "provenance": {
            "source": source,
            "derived_by": "scripts/derive_splitwise_curves.py",
            "rows_filter": rows_filter,
        },
        "assumptions": [
            f"machine memory C = {MEMORY_GB:g} GB (8 x 80 GB, decimal GB), as in the design",
            f"weights C_w = {facts['parameters']:,} parameters x 2 bytes (fp16) = {weights_gb:.4f} GB",
            f"KV cache = {kv:,} bytes per token: {facts['kv_formula']}",
            "prefill capacity C_p(B_p) = C_w + B_p x KV bytes (B_p in tokens); activations ignored",
            f"decode capacity C_d(n) = C_w + n x {REFERENCE_CONTEXT_TOKENS} x KV bytes: a fixed reference "
            "context of 512 prompt + 128 output tokens (the measurement setting); the design ignores "
            "sequence length in decode capacity",
            "capacity points are evaluated at the measured batches, so the quadratic fit is exact "
            "(c2 = 0) and its inverse may extrapolate beyond the measured batches",
            "prefill tokens/s = prompt_size x batch_size / prompt_time (ms per prefill batch), median "
            "per batch in tokens over all matching rows",
            "decode tokens/s = batch_size / token_time (ms per decode iteration), median per "
            "batch_size over all matching rows (every prompt and output size of that batch)",
            f"rows: {rows_filter}; the h100-80gb-pcap rows are derived in the source and not used",
            f"max_batch (prefill {PREFILL_MAX_BATCH_TOKENS:,} tokens, decode {DECODE_MAX_BATCH_REQUESTS} "
            "requests) bounds the planner's search domain; it is not a measured limit",
            "KV transfer between pools is ignored; beam = 1",
        ],
        "prefill": {
            "batch_unit": "tokens",
            "max_batch": PREFILL_MAX_BATCH_TOKENS,
            "capacity": {
                "label": f"{model_key} prefill memory (weights + KV of the batch)",
                "provenance": f"computed: {weights_gb:.4f} GB + B_p x {kv} bytes",
                "points": [[b, _round_gb(weights_gb + b * kv / 1e9)] for b, _, _ in prefill],
            },
            "throughput": {
                "label": f"{model_key} prefill, Splitwise Fig. 6 (H100 TP8)",
                "provenance": {
                    "source": "perf_model.csv (see set provenance)",
                    "formula": "median of prompt_size * batch_size / (prompt_time / 1000) per batch tokens",
                    "rows_per_point": [n for _, _, n in prefill],
                },
                "points": [[b, _round(v)] for b, v, _ in prefill],
            },
        },
        "decode": {
            "batch_unit": "requests",
            "max_batch": DECODE_MAX_BATCH_REQUESTS,
            "capacity": {
                "label": f"{model_key} decode memory (weights + KV at reference context)",
                "provenance": f"computed: {weights_gb:.4f} GB + n x {REFERENCE_CONTEXT_TOKENS} x {kv} bytes",
                "points": [
                    [b, _round_gb(weights_gb + b * REFERENCE_CONTEXT_TOKENS * kv / 1e9)] for b, _, _ in decode
                ],
            },
            "throughput": {
                "label": f"{model_key} decode, Splitwise Fig. 6 (H100 TP8)",
                "provenance": {
                    "source": "perf_model.csv (see set provenance)",
                    "formula": "median of batch_size / (token_time / 1000) per batch_size",
                    "rows_per_point": [n for _, _, n in decode],
                },
                "points": [[b, _round(v)] for b, v, _ in decode],
            },
        },
    }


_NUMBER_LIST = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]")


def render(data: dict[str, Any]) -> str:
    """The exact text written to a curve-set file (lists of numbers kept on one line)."""
    text = json.dumps(data, indent=2)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="path to Splitwise's perf_model.csv")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help="where the sets go")
    parser.add_argument("--check", action="store_true", help="only compare with the files in --out-dir")
    args = parser.parse_args(argv)
    if _sha256(args.csv) != EXPECTED_SHA256:
        print(f"warning: {args.csv} is not the recorded copy (sha256 {EXPECTED_SHA256})", file=sys.stderr)
    mismatched = []
    for name, data in derive(args.csv).items():
        path = args.out_dir / f"{name}.json"
        if args.check:
            if not path.exists() or path.read_text() != render(data):
                mismatched.append(str(path))
        else:
            args.out_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(render(data))
            print(f"wrote {path}")
    if mismatched:
        print("differs from the derivation: " + ", ".join(mismatched), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
