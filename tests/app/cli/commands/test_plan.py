"""``pdroute plan`` and ``pdroute plan-grid`` end to end through ``app.cli.main``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from PIL import Image

from app.cli.main import main
from solver.plan.curvesets import curve_set_to_mapping
from tests.solver.plan.curve_factory import make_curve_set

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def curves_file(tmp_path: Path) -> Path:
    path = tmp_path / "curves.json"
    path.write_text(json.dumps(curve_set_to_mapping(make_curve_set())))
    return path


def test_plan_prints_the_pick_the_baseline_and_the_reference(
    curves_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "plan",
        "--curves",
        str(curves_file),
        "--machines",
        "10",
        "--prompt-len",
        "100",
        "--output-len",
        "50",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = {line.split("  ")[0].strip(): line.split() for line in out.splitlines() if "  " in line}
    pick = rows["CUF-P (pick)"]
    assert pick[2:4] == ["7", "3"] and pick[-1] == "150"
    colocated = rows["co-located"]
    assert colocated[1:3] == ["10", "10"] and float(colocated[-1]) == pytest.approx(8000 / 66, rel=1e-4)
    assert float(rows["reference"][-1]) == pytest.approx(150.0)
    assert f"speedup R_s/R_u {150 * 66 / 8000:.4f}" in out
    recommendation = out.splitlines()[-1]
    assert recommendation.startswith("recommendation: deploy the design's pick: 3 prefill machines")
    assert "7 decode machines" in recommendation and "150 req/s (1.24x co-located)" in recommendation


def test_plan_recommends_the_reference_optimum_when_the_pick_falls_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", "--curves", "bloom-176b-8xh100", "--machines", "8", "--prompt-len", "1500"]
    assert main([*args, "--output-len", "200", "--throughput-fit", "quadratic"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("recommendation: deploy the reference optimum: 4 prefill machines")
    assert "(1.34x co-located)" in last and "(0.54x co-located)" in last


def test_plan_json_is_the_full_answer(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--curves", "llama2-70b-8xh100", "--machines", "32", "--prompt-len", "512"]
    assert main([*args, "--output-len", "128", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["curves"] == "llama2-70b-8xh100" and d["machines"] == 32
    # Llama2-70B's KV cache is small: both limits are the search-domain bounds, flagged inexact
    assert d["limits"]["decode_requests"]["is_exact"] is False
    assert any("took the domain upper bound" in n for n in d["notes"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--machines", "1"], "no feasible x"),
        (["--machines", "8", "--weights-gb", "700"], "larger than machine memory"),
        (["--machines", "8", "--prompt-len", "0"], "--prompt-len: every value must be >= 1"),
        # a bound instead of a process killed for memory (candidates are vectorised over x)
        (["--machines", "100000001"], "--machines: at most 100000"),
    ],
)
def test_plan_errors_are_one_line_with_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"--curves": "bloom-176b-8xh100", "--prompt-len": "1024", "--output-len": "256"}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        base[flag] = value
    assert main(["plan", *[x for kv in base.items() for x in kv]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pdroute plan: error:") and message in err and "\n" not in err


def test_unknown_curves_name_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--curves", "nope", "--machines", "8", "--prompt-len", "1", "--output-len", "1"]
    assert main(args) == 2
    assert "neither a built-in set" in capsys.readouterr().err


def _drawn(path: Path) -> bool:
    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    return path.read_bytes()[:8] == PNG_MAGIC and colours is not None and len(colours) > 8


def test_plan_grid_writes_heatmaps_csv_and_model_parameters(
    tmp_path: Path, curves_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    args = ["plan-grid", "--curves", str(curves_file), "--machines", "10", "-o", str(out)]
    assert main([*args, "--prompt-lens", "100", "400", "9000", "--output-lens", "50", "200"]) == 0
    printed = capsys.readouterr().out
    assert "solved 6 cells (2 infeasible) for X = 10" in printed
    for name in ("heatmap_s_p.png", "heatmap_s_d.png", "policy_map.png", "curve_fits.png"):
        assert _drawn(out / name), name
    with (out / "grid.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6
    first = rows[0]
    assert (first["prompt_len"], first["output_len"], first["policy"]) == ("100", "50", "CUF-P")
    assert float(first["s_p"]) == pytest.approx(150 * 66 / 8000, rel=1e-5)
    assert (first["recommendation"], first["recommended_decode_machines"]) == ("CUF-P", "7")
    assert float(first["recommended_speedup"]) == pytest.approx(150 * 66 / 8000, rel=1e-5)
    assert rows[-1]["policy"] == "" and "9000" in rows[-1]["infeasible"]
    assert rows[-1]["recommendation"] == ""
    params = json.loads((out / "model_parameters.json").read_text())
    assert params["fits"]["prefill"]["capacity"]["c1"] == pytest.approx(0.01)
    assert params["cells"][0]["recommendation"]["source"] == "pick"
    assert params["cells"][0]["prefill_limit"]["is_exact"] is True
    assert len(params["cells"]) == 6


@pytest.mark.parametrize("below", ["", "sub"], ids=["a file", "under a file"])
def test_plan_grid_output_that_cannot_be_written_is_one_line(
    tmp_path: Path, below: str, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("not a folder")
    out = blocker / below if below else blocker
    args = ["plan-grid", "--curves", "bloom-176b-8xh100", "--machines", "8", "-o", str(out)]
    assert main([*args, "--prompt-lens", "512", "--output-lens", "128"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pdroute plan-grid: error: -o {out}:") and "\n" not in err
    assert blocker.read_text() == "not a folder"


def test_plan_from_a_profile_file_prints_a_recommendation_and_the_assumptions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    profile = Path(__file__).resolve().parents[4] / "solver" / "data" / "profiles" / "default.json"
    args = ["plan", "--profile", str(profile), "--machines", "16"]
    assert main([*args, "--prompt-len", "1024", "--output-len", "200"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("curves profile Qwen/Qwen3-8B on 1x h100_sxm")
    assert "\nrecommendation: " in out
    assert "assumption: decode: step times at the mean context 1124 tokens" in out


def test_plan_from_a_profile_beyond_its_range_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # The shipped default profiles decode up to kv_len 32768; plans extrapolate to 4x that.
    args = ["plan", "--profile", "default", "--machines", "16", "--prompt-len", "131000"]
    assert main([*args, "--output-len", "400"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "context 131200 tokens" in err and "kv_len 32768" in err


def test_plan_verify_simulates_the_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    # Contexts of 32,867 tokens reach past the profile's 32,768-token decode grid: refused.
    longest = [
        "plan",
        "--profile",
        "default",
        "--machines",
        "16",
        "--prompt-len",
        "32768",
        "--output-len",
        "100",
    ]
    assert main([*longest, "--verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "T_decode covers kv_len 128-32,768 tokens" in err
    args = ["plan", "--profile", "default", "--machines", "16", "--prompt-len", "2048", "--output-len", "100"]
    assert main([*args, "--verify"]) == 0
    lines = capsys.readouterr().out.splitlines()
    verify = [line for line in lines if line.startswith("verify")]
    assert verify[0].startswith("verify (pools: 0 mixed + 11 prefill + 5 decode GPUs; 4000 Poisson requests")
    assert "SLO attainment" in verify[0] and "(agrees within 10%)" in verify[1]
    assert main([*args, "--verify", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verification"]["predicted_rate_rps"] == d["recommendation"]["rate_rps"]
    assert d["verification"]["likely_cause"] is None


def test_plan_verify_needs_a_profile(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--curves", "bloom-176b-8xh100", "--machines", "8", "--prompt-len", "100"]
    assert main([*args, "--output-len", "100", "--verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--verify: needs --profile" in err
