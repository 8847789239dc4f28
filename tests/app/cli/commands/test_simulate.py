"""``pdroute simulate`` end to end on a synthetic profile, a small Azure-format trace and params."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.cli.main import main
from solver.profile_io import save_profile_json
from solver.sim import SWEEP_NAMES
from tests.solver.plots.png import assert_real_png
from tests.solver.sim.profiles import make_profile


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    return save_profile_json(make_profile(), tmp_path / "profile.json")


@pytest.fixture
def azure_trace(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = 0.0
    for _ in range(150):
        t += float(rng.exponential(0.2))
        minutes, seconds = divmod(t, 60)
        stamp = f"2023-11-16 18:{int(minutes):02d}:{seconds:010.7f}"
        lines.append(f"{stamp},{int(rng.integers(50, 2500))},{int(rng.integers(1, 120))}")
    path = tmp_path / "azure.csv"
    path.write_text("\r\n".join(lines))
    return path


def test_simulate_trace_all_policies(
    tmp_path: Path,
    profile_file: Path,
    params_file: Path,
    azure_trace: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "results"
    code = main(
        [
            "simulate",
            "--profile",
            str(profile_file),
            "--params",
            str(params_file),
            "--trace",
            str(azure_trace),
            "--policies",
            "all",
            "--rates",
            "2,6",
            "--prefill-gpus",
            "1",
            "--decode-gpus",
            "2",
            "--allow-extrapolation",  # the trace's prompts reach past the synthetic 2,048-token grid
            "-o",
            str(out),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    printed = captured.out
    for name in SWEEP_NAMES:
        assert name in printed
    assert "prediction error" in printed
    doc = json.loads((out / "results.json").read_text())
    results = doc["results"]
    assert len(results) == 2 * len(SWEEP_NAMES)
    assert sorted({r["offered_rate"] for r in results}) == pytest.approx([2.0, 6.0])
    for r in results:
        assert r["num_requests"] == 150
        assert 0.0 <= r["share_disaggregated"] <= 1.0
        assert r["e2e_ms"]["p99"] >= r["e2e_ms"]["p50"] > 0
    by_policy = {(r["policy"], r["offered_rate"]): r for r in results}
    assert by_policy[("collocated", 2.0)]["share_disaggregated"] == 0.0
    assert by_policy[("disaggregated", 2.0)]["share_disaggregated"] == 1.0
    best = [r for r in results if r["policy"] == "best-static"]
    assert len(best) == 2 and all(r["label"] == f"best-static[{r['setting']}]" for r in best)
    assert all(r["label"] in printed for r in best)
    for r in results:  # only the models predict; no policy here sheds
        predicts = r["policy"] in ("cost-model", "queue-aware", "queue-aware+len")
        assert (r["ttft_error"] is None) == (not predicts)
        assert r["share_shed"] == 0.0
    err = by_policy[("cost-model", 2.0)]["e2e_error"]
    assert err["num_predicted"] == 150 and err["p90_abs_ms"] >= err["median_abs_ms"] >= 0
    assert "fitted them from --profile" in captured.err  # the test params are schema version 1
    assert doc["settings"]["shed"] is False
    assert doc["settings"]["fleet"]["num_decode"] == 2
    assert doc["settings"]["fleet"]["max_num_batched_tokens"] == 512  # the largest profiled chunk
    assert doc["settings"]["fleet"]["prefill_queue"] == "round-robin"
    assert "extrapolated passes (allowed; tables extended linearly" in printed
    assert all(r["allow_extrapolation"] for r in results)
    assert sum(r["num_extrapolated_passes"] for r in results) > 0
    assert set(results[0]["extrapolated"]) == {"T_prefill", "T_decode", "T_interference", "T_chunk_prefix"}
    assert doc["settings"]["fleet"]["allow_extrapolation"] is True
    assert doc["settings"]["fleet"]["kv_capacity_tokens"] is None  # the profile has none: no limit
    markdown = (out / "results.md").read_text()
    assert markdown.startswith("| policy |") and "Prediction error of the chosen path" in markdown
    assert "| cost-model | 2.00 |" in markdown
    assert_real_png(out / "latency_vs_load.png")
    assert_real_png(out / "e2e_cdf.png")


def test_simulate_poisson_pools_without_cost_model(
    tmp_path: Path, profile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p"
    args = ["simulate", "--profile", str(profile_file), "--poisson", "300", "--lengths", "fixed:600,20"]
    args += ["--rates", "5", "--policies", "threshold,threshold-queue", "--topology", "pools"]
    args += ["--mixed-gpus", "2", "--prefill-gpus", "1", "--decode-gpus", "1", "--predict", "mean"]
    args += ["--max-num-seqs", "16"]  # the synthetic profile's interference covers 16 decodes
    args += ["--no-plots", "-o", str(out)]
    assert main(args) == 0
    doc = json.loads((out / "results.json").read_text())
    assert [r["policy"] for r in doc["results"]] == ["threshold", "threshold-queue"]
    assert doc["settings"]["fleet"]["topology"] == "pools"
    assert not (out / "latency_vs_load.png").exists()


def test_simulate_without_a_profile_runs_on_the_embedded_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = Path(__file__).resolve().parents[4] / "solver" / "data" / "profiles" / "default.json"
    args = ["simulate", "--poisson", "200", "--lengths", "fixed:600,20", "--rates", "5"]
    args += ["--policies", "threshold,queue-aware", "--no-plots"]
    assert main([*args, "-o", str(tmp_path / "embedded")]) == 0
    assert "the embedded default profile" in capsys.readouterr().err
    assert main([*args, "--profile", str(shipped), "-o", str(tmp_path / "named")]) == 0
    embedded, named = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("embedded", "named"))
    assert embedded["results"] == named["results"] and len(embedded["results"]) == 2


def test_a_prefill_budget_puts_waiting_prompts_in_one_pass(tmp_path: Path) -> None:
    args = ["simulate", "--poisson", "300", "--lengths", "fixed:300,4", "--rates", "60"]
    args += ["--policies", "disaggregated", "--prefill-gpus", "1", "--no-plots"]
    assert main([*args, "-o", str(tmp_path / "one")]) == 0
    assert main([*args, "--prefill-batch-tokens", "4096", "-o", str(tmp_path / "packed")]) == 0
    one, packed = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "packed"))
    # The same requests, fewer prefill passes: the busy pool's waiting prompts share one.
    assert packed["results"][0]["num_passes"] < one["results"][0]["num_passes"]


def test_simulate_best_static_with_shedding(tmp_path: Path, profile_file: Path) -> None:
    out = tmp_path / "b"
    args = ["simulate", "--profile", str(profile_file), "--poisson", "200", "--lengths", "lognormal:900,40"]
    args += ["--rates", "3,12", "--policies", "best-static,threshold", "--shed", "--prefill-gpus", "1"]
    args += ["--decode-gpus", "2", "--allow-extrapolation", "--no-plots", "-o", str(out)]
    assert main(args) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["settings"]["shed"] is True and doc["settings"]["policies"] == ["best-static", "threshold"]
    best = [r for r in doc["results"] if r["policy"] == "best-static"]
    assert len(best) == 2
    for r in best:
        assert r["setting"] and r["label"] == f"best-static[{r['setting']}]"
        assert r["label"] in (out / "results.md").read_text()
    threshold = {r["offered_rate"]: r for r in doc["results"] if r["policy"] == "threshold"}
    for r in best:
        assert r["goodput_rps"] >= threshold[r["offered_rate"]]["goodput_rps"] * (1 - 1e-3)
    assert all(r["share_shed"] == 0.0 for r in doc["results"])  # rules never answer infeasible


POISSON_20_SHORT = ["--poisson", "20", "--rates", "1", "--lengths", "fixed:100,5", "--max-num-seqs", "16"]
POISSON_10_LONG = ["--poisson", "10", "--rates", "1", "--lengths", "fixed:1000,50", "--max-num-seqs", "16"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trace", "MISSING"], "file not found"),
        (["--trace", "BAD"], "expected 3 fields"),
        (["--poisson", "10"], "--poisson needs --rates"),
        (["--trace", "GOOD", "--rates", "1,x"], "--rates: expected comma-separated numbers"),
        (["--trace", "GOOD", "--rates", "1", "--scales", "2"], "not both"),
        (["--trace", "GOOD", "--policies", "best"], "unknown policy 'best'"),
        (["--trace", "GOOD", "--topology", "pools"], "pools topology needs"),
        (["--trace", "GOOD", "--predict", "fixed:0"], "fixed needs a value"),
        (["--trace", "HUGE"], "prompt tokens must be <= 10,000,000"),
        (["--poisson", "10", "--rates", "1", "--seed", "-1"], "seed must be an integer >= 0"),
        (
            ["--poisson", "10", "--rates", "1", "--lengths", "uniform:1-99999999999999999999,1-5"],
            "<= 10,000,000",
        ),
        (["--trace", "GOOD", "--cdf-rate", "nan"], "--cdf-rate: expected a load > 0"),
        (["--trace", "GOOD", "--policies", "queue-aware", "--harm-weight", "-1"], "--harm-weight: expected"),
        (["--trace", "GOOD", "--policies", "queue-aware", "--slo-margin", "1"], "--slo-margin: expected"),
        (
            ["--trace", "GOOD", "--policies", "queue-aware", "--objective", "fast"],
            "--objective: expected latency or goodput",
        ),
        (["--trace", "GOOD", "-o", "FILE"], "cannot create the output folder"),
        (["--trace", "GOOD", "--calibrate", "--calibrate-refresh", "0"], "--calibrate-refresh: expected"),
        (["--trace", "GOOD", "--max-num-batched-tokens", "100"], "100 is below max_num_seqs 256"),
        (["--trace", "GOOD", "--max-num-batched-tokens", "512", "--chunk-size", "512"], "not both"),
        (["--trace", "GOOD", "--prefix-cache-tokens", "lots"], "--prefix-cache-tokens: expected N, profile"),
        (
            ["--trace", "GOOD", "--prefix-cache-tokens", "-5"],
            "--prefix-cache-tokens: expected a number of tokens >= 0",
        ),
        (["--sessions", "chat:turns=0", "--rates", "1"], "turns must be >= 1"),
        (["--sessions", "chat", "--scales", "2"], "--sessions needs --rates"),
        (
            ["--poisson", "10", "--rates", "1", "--lengths", "fixed:3000,5", "--max-num-seqs", "16"],
            "prompts up to 3,000 tokens, but the profile's T_prefill covers 64-2,048 tokens",
        ),
        (
            ["--poisson", "300", "--rates", "1", "--lengths", "fixed:100,5"],
            "decode batches up to 256 (max_num_seqs 256), but the profile's T_decode covers batches 1-32",
        ),
        (
            [*POISSON_20_SHORT, "--max-num-batched-tokens", "1024"],
            "prefill chunks beside decodes up to 1,023 tokens (max_num_batched_tokens 1,024), but the "
            "profile's T_interference covers chunks 64-512 tokens",
        ),
        (
            ["--poisson", "10", "--rates", "1", "--lengths", "fixed:100,5", "--kv-capacity-tokens", "lots"],
            "--kv-capacity-tokens: expected N, profile or none",
        ),
        (
            ["--poisson", "10", "--rates", "1", "--lengths", "fixed:100,5", "--prefill-batch-tokens", "-1"],
            "prefill_batch_tokens: expected an integer >= 0, got -1",
        ),
        (
            [*POISSON_10_LONG, "--kv-capacity-tokens", "1000"],
            "a request's context of 1,049 tokens does not fit the 992 tokens (62 blocks of 16)",
        ),
    ],
)
def test_simulate_errors_are_one_line(
    tmp_path: Path,
    profile_file: Path,
    params_file: Path,
    azure_trace: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("0,10\n")
    huge = tmp_path / "huge.csv"
    huge.write_text("0,99999999999999999999,10\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    paths = {
        "MISSING": str(tmp_path / "none.csv"),
        "BAD": str(bad),
        "HUGE": str(huge),
        "GOOD": str(azure_trace),
        "FILE": str(a_file),
    }
    extra = [paths.get(a, a) for a in extra]
    args = ["simulate", "--profile", str(profile_file), "--params", str(params_file)]
    args += ["--prefill-gpus", "0", "--decode-gpus", "0"] if "pools" in extra else []
    output = [] if "-o" in extra else ["-o", str(tmp_path / "o")]
    assert main([*args, *extra, *output]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing simulated: every check comes before the runs
    err = captured.err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("pdroute simulate: error:") and message in err[0]


def test_non_finite_slo_limits_are_written_as_strict_json(tmp_path: Path, profile_file: Path) -> None:
    # An infinite TPOT limit means "TTFT only"; the JSON file must still be strict JSON.
    out = tmp_path / "r"
    args = ["simulate", "--profile", str(profile_file), "--poisson", "30", "--lengths", "fixed:100,5"]
    args += ["--rates", "2", "--policies", "collocated", "--tpot-slo-ms", "inf", "--no-plots", "-o", str(out)]
    args += ["--max-num-seqs", "16"]
    assert main(args) == 0
    doc = json.loads((out / "results.json").read_text(), parse_constant=pytest.fail)
    assert doc["arguments"]["tpot_slo_ms"] == "inf" and doc["settings"]["slo"]["tpot_ms"] is None
    assert doc["results"][0]["slo_attainment"] == 1.0


def test_simulate_calibrate_adds_the_calibrated_policy_per_load(
    tmp_path: Path, profile_file: Path, params_file: Path
) -> None:
    out = tmp_path / "c"
    args = ["simulate", "--profile", str(profile_file), "--params", str(params_file), "--poisson", "400"]
    args += ["--lengths", "lognormal:900,60", "--rates", "4,8", "--policies", "collocated", "--calibrate"]
    args += [
        "--calibrate-refresh",
        "20",
        "--prefill-gpus",
        "1",
        "--decode-gpus",
        "2",
        "--allow-extrapolation",
        "--no-plots",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    doc = json.loads((out / "results.json").read_text())
    rows = [(r["policy"], r["offered_rate"]) for r in doc["results"]]
    assert [p for p, _ in rows] == ["collocated", "queue-aware", "queue-aware+cal"] * 2
    cal = [r for r in doc["results"] if r["policy"] == "queue-aware+cal"]
    assert all(r["e2e_error"] is not None for r in cal)


def test_simulate_sessions_reports_prefix_hits(
    tmp_path: Path, profile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    args = ["simulate", "--profile", str(profile_file), "--sessions", "chat:sessions=40,turns=4"]
    args += [
        "--rates",
        "1,2",
        "--policies",
        "collocated,threshold-queue",
        "--allow-extrapolation",
        "--no-plots",
    ]
    args += ["-o"]
    cache = ["--prefix-cache-tokens", "50000", "--decode-choice", "prefix-affinity"]
    assert main([*args, str(out), *cache]) == 0
    printed = capsys.readouterr()
    assert "hit tok %" in printed.out and "prefix caches: 50,000 tokens per GPU" in printed.err
    doc = json.loads((out / "results.json").read_text())
    assert doc["settings"]["fleet"]["prefix_cache_tokens"] == 50_000
    shares = [r["prefix_hit_token_share"] for r in doc["results"]]
    assert len(shares) == 4 and all(0.2 < s < 1 for s in shares)
    # Without a capacity (the synthetic profile gives none) nothing is reused or shown.
    assert main([*args, str(tmp_path / "off")]) == 0
    assert "hit tok %" not in capsys.readouterr().out


def test_simulate_a_jsonl_trace_with_hash_ids(
    tmp_path: Path, profile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):  # one shared 1,024-token prefix, then a private block
        ids = [1, 2, 100 + i]
        rows.append(
            {
                "timestamp": 100 * i,
                "input_length": int(rng.integers(1536, 1800)),
                "output_length": 8,
                "hash_ids": ids,
            }
        )
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "results"
    args = ["simulate", "--profile", str(profile_file), "--trace", str(trace), "--policies", "collocated"]
    args += ["--allow-extrapolation"]  # the synthetic profile's batches stop below max_num_seqs
    assert main([*args, "--prefix-cache-tokens", "20000", "--no-plots", "-o", str(out)]) == 0
    assert "hit tok %" in capsys.readouterr().out
    share = json.loads((out / "results.json").read_text())["results"][0]["prefix_hit_token_share"]
    assert 0.5 < share < 0.7  # 1,024 of about 1,670 tokens, after each GPU's first request


def test_kv_capacity_is_printed_and_recorded(
    tmp_path: Path, profile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "kv"
    args = [
        "simulate",
        "--profile",
        str(profile_file),
        "--poisson",
        "300",
        "--lengths",
        "uniform:64-1400,2-60",
    ]
    args += ["--rates", "20", "--policies", "collocated", "--prefill-gpus", "0", "--decode-gpus", "2"]
    args += ["--max-num-seqs", "16", "--max-num-batched-tokens", "256", "--kv-capacity-tokens", "2,100"]
    assert main([*args, "--no-plots", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "KV capacity: 2,100 tokens per engine GPU in blocks of 16" in captured.err
    line = next(
        s for s in captured.out.splitlines() if s.startswith("KV capacity 2,100 tokens per engine GPU: ")
    )
    doc = json.loads((out / "results.json").read_text())
    row = doc["results"][0]
    assert (
        row["kv_capacity_tokens"] == 2100 and row["num_preemptions"] > 0 and row["num_recomputed_tokens"] > 0
    )
    assert f"{row['num_preemptions']:,} preemptions (recompute)" in line
    assert (
        doc["settings"]["fleet"]["kv_capacity_tokens"] == 2100
        and doc["settings"]["fleet"]["block_size"] == 16
    )
    assert row["allow_extrapolation"] is False and row["num_extrapolated_passes"] == 0
    assert line in (out / "results.md").read_text()
    # none: no limit, no line
    assert main([*args[:-1], "none", "--no-plots", "-o", str(tmp_path / "none")]) == 0
    assert "KV capacity" not in capsys.readouterr().out
