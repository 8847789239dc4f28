"""The built-in curve sets: internal consistency always, and agreement with Splitwise's measured
rows when ``../shared/data/splitwise/perf_model.csv`` (relative to the repository) is present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solver.plan.curvesets import load_builtin_curve_set
from solver.plan.fitted import fit_curves
from solver.plan.plan import solve_plan

REPO = Path(__file__).resolve().parents[3]
SPLITWISE_CSV = REPO.parent / "shared" / "data" / "splitwise" / "perf_model.csv"
SCRIPT = REPO / "scripts" / "derive_splitwise_curves.py"
CURVES_DIR = REPO / "solver" / "data" / "curves"

# model facts stated in the issue: (parameters, KV bytes per token)
FACTS = {
    "bloom-176b-8xh100": (176_247_271_424, 4_014_080),
    "llama2-70b-8xh100": (68_976_648_192, 327_680),
}
REFERENCE_CONTEXT = 512 + 128


@pytest.mark.parametrize("name", sorted(FACTS))
def test_capacity_points_follow_the_stated_model_facts(name: str) -> None:
    curves = load_builtin_curve_set(name)
    params, kv = FACTS[name]
    assert curves.weights_gb == pytest.approx(params * 2 / 1e9, abs=1e-6)
    assert curves.memory_gb == 640.0
    for b, gb in zip(curves.prefill.capacity.batches, curves.prefill.capacity.values, strict=True):
        assert gb == pytest.approx(curves.weights_gb + b * kv / 1e9, abs=2e-6)
    for n, gb in zip(curves.decode.capacity.batches, curves.decode.capacity.values, strict=True):
        assert gb == pytest.approx(curves.weights_gb + n * REFERENCE_CONTEXT * kv / 1e9, abs=2e-6)
    text = " ".join(curves.assumptions)
    assert f"{kv:,} bytes per token" in text and "512 prompt + 128 output" in text
    assert curves.provenance["source"]["sha256"]
    assert curves.provenance["derived_by"] == "scripts/derive_splitwise_curves.py"


@pytest.mark.parametrize("name", sorted(FACTS))
def test_builtin_sets_plan_for_the_design_fleet(name: str) -> None:
    plan = solve_plan(fit_curves(load_builtin_curve_set(name)), 64, 1024, 256)
    assert plan.best.rate_rps > 0 and plan.reference.rate_rps >= plan.best.rate_rps * (1 - 1e-12)


@pytest.mark.skipif(
    not SPLITWISE_CSV.exists(), reason=f"Splitwise measurements not present at {SPLITWISE_CSV}"
)
def test_derived_figures_match_the_measured_rows(tmp_path: Path) -> None:
    check = subprocess.run(
        [sys.executable, str(SCRIPT), str(SPLITWISE_CSV), "--check", "--out-dir", str(CURVES_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr
    fresh = subprocess.run(
        [sys.executable, str(SCRIPT), str(SPLITWISE_CSV), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fresh.returncode == 0, fresh.stderr
    for name in FACTS:
        derived = json.loads((tmp_path / f"{name}.json").read_text())
        committed = load_builtin_curve_set(name)
        points = derived["decode"]["throughput"]["points"]
        assert [p[0] for p in points] == list(committed.decode.throughput.batches)
        assert [p[1] for p in points] == pytest.approx(list(committed.decode.throughput.values), rel=1e-9)
        points = derived["prefill"]["throughput"]["points"]
        assert [p[1] for p in points] == pytest.approx(list(committed.prefill.throughput.values), rel=1e-9)


@pytest.mark.skipif(
    not SPLITWISE_CSV.exists(), reason=f"Splitwise measurements not present at {SPLITWISE_CSV}"
)
def test_bloom_decode_median_by_hand() -> None:
    """One figure recomputed independently of the script: BLOOM decode at batch 64."""
    import csv
    import statistics

    with SPLITWISE_CSV.open(newline="") as fh:
        rows = [
            r
            for r in csv.DictReader(fh)
            if (r["model"], r["hardware"], r["tensor_parallel"], r["batch_size"])
            == ("bloom-176b", "h100-80gb", "8", "64")
        ]
    expected = statistics.median(64 / (float(r["token_time"]) / 1000) for r in rows)
    curves = load_builtin_curve_set("bloom-176b-8xh100")
    got = dict(zip(curves.decode.throughput.batches, curves.decode.throughput.values, strict=True))[64.0]
    assert got == pytest.approx(expected, abs=1e-4)
