"""``bench.bench_decisions``: the load search, and a small end-to-end run without ../shared."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from bench.bench_decisions import LOWEST_RATE, Bench, NoOverloadPoint, find_top_rate, load_requests, main
from solver.profile_io import save_profile_json
from solver.sim import OutputPrediction
from solver.sim.sweep import strict_json
from tests.solver.sim.profiles import make_profile


@pytest.mark.parametrize("knee", [0.3, 7.0, 55.0, 900.0])
def test_load_search_finds_the_knee_within_ten_percent(knee: float) -> None:
    asked: list[float] = []

    def miss_at(rate: float) -> float:
        asked.append(rate)
        return 0.5 if rate >= knee else 0.01

    top = find_top_rate(miss_at, 0.2)
    assert knee <= top <= 1.1 * knee
    assert len(asked) < 30


def test_load_search_stops_where_no_rate_is_an_overload_point() -> None:
    with pytest.raises(NoOverloadPoint, match="never misses"):
        find_top_rate(lambda rate: 0.0, 0.2)
    asked: list[float] = []

    def always(rate: float) -> float:
        asked.append(rate)
        return 1.0

    with pytest.raises(NoOverloadPoint, match=r"misses the SLO for 20% of requests already at 0\.078125"):
        find_top_rate(always, 0.2)
    assert min(asked) >= LOWEST_RATE


def test_bench_says_so_in_one_line_when_the_targets_are_tighter_than_the_fleet_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = save_profile_json(make_profile(), tmp_path / "synthetic.json")
    args = ["--profile", str(profile), "--lengths", "fixed:512,16", "--max-requests", "50"]
    args += ["--ttft-slo-ms", "0.001", "--topology", "conditional", "--allow-extrapolation"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("bench_decisions: always-collocated misses the SLO")
    assert "targets are tighter than this fleet serves" in err


def test_bench_runs_on_a_poisson_load_when_the_trace_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = save_profile_json(make_profile(), tmp_path / "synthetic.json")
    out = tmp_path / "bench.json"
    args = ["--profile", str(profile), "--trace", str(tmp_path / "none.csv"), "--max-requests", "300"]
    args += ["--allow-extrapolation"]
    args += ["--topology", "conditional,pools", "--predict", "exact,mean", "--json", str(out), "--jobs", "2"]
    assert main(args) == 0
    printed = capsys.readouterr()
    assert "no trace at" in printed.err
    doc = json.loads(out.read_text())
    assert [(b["topology"], b["predict"]) for b in doc["blocks"]] == [
        ("conditional", "exact"),
        ("conditional", "mean"),
        ("pools", "exact"),
        ("pools", "mean"),
    ]
    for block in doc["blocks"]:
        loads = block["loads"]
        assert len(loads) == 4 and [x["rate"] for x in loads] == sorted(x["rate"] for x in loads)
        top = {p["policy"]: p for p in loads[-1]["policies"]}
        assert 1 - top["collocated"]["slo_attainment"] >= 0.2  # the highest load overloads collocation
        for load in loads:
            names = [p["policy"] for p in load["policies"]]
            assert names[:5] == ["collocated", "disaggregated", "threshold", "threshold-queue", "best-static"]
            summary = load["candidate"]
            assert summary["best_rule"] in names[:4]
            best = {p["policy"]: p for p in load["policies"]}
            expected = best["queue-aware"]["goodput_rps"] / best["best-static"]["goodput_rps"]
            assert summary["goodput_vs_best_static"] == pytest.approx(expected)
            assert summary["ttft_err_p50_pct"] is not None  # the queue-aware model predicts
    # One process gives the same figures as two.
    serial = tmp_path / "serial.json"
    assert main([*args[:-4], "--json", str(serial)]) == 0
    assert json.loads(serial.read_text())["blocks"] == doc["blocks"]
    # Static rules ignore the prediction: their rows are the same in both modes.
    exact, mean = doc["blocks"][0]["loads"][0]["policies"], doc["blocks"][1]["loads"][0]["policies"]
    assert exact[:5] == mean[:5]


def test_lengths_runs_a_poisson_load_of_those_lengths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = save_profile_json(make_profile(), tmp_path / "synthetic.json")
    out = tmp_path / "bench.json"
    args = [
        "--profile",
        str(profile),
        "--lengths",
        "fixed:3000,20",
        "--max-requests",
        "200",
        "--allow-extrapolation",
    ]
    assert main([*args, "--loads", "2", "--json", str(out)]) == 0
    assert "lengths fixed:3000,20" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert len(doc["blocks"]) == 1 and len(doc["blocks"][0]["loads"]) == 2
    # A 3,000-token prompt is over the threshold rule's 1,000: it disaggregates every request.
    loads = doc["blocks"][0]["loads"]
    rows = {p["policy"]: p for p in loads[0]["policies"]}
    assert rows["threshold"]["goodput_rps"] == rows["disaggregated"]["goodput_rps"]


def test_prefill_gpus_that_batch_prompts_change_the_pools_runs_alone(tmp_path: Path) -> None:
    profile = save_profile_json(make_profile(), tmp_path / "synthetic.json")
    args = ["--profile", str(profile), "--lengths", "fixed:3000,20", "--max-requests", "200"]
    rows = {}
    for tokens in ("0", "8192"):
        out = tmp_path / f"bench-{tokens}.json"
        extra = [
            "--allow-extrapolation",
            "--loads",
            "2",
            "--prefill-batch-tokens",
            tokens,
            "--json",
            str(out),
        ]
        assert main([*args, *extra]) == 0
        loads = json.loads(out.read_text())["blocks"][0]["loads"]
        rows[tokens] = {p["policy"]: p for p in loads[0]["policies"]}
    # Two 3,000-token prompts fit a pass of 8,192: the pool's queue drains faster, the decode GPUs
    # run as before.
    assert rows["8192"]["disaggregated"] != rows["0"]["disaggregated"]
    assert rows["8192"]["collocated"] == rows["0"]["collocated"]


def test_prompts_beyond_the_profile_are_refused_without_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = save_profile_json(make_profile(), tmp_path / "synthetic.json")
    args = ["--profile", str(profile), "--lengths", "fixed:3000,20", "--max-requests", "50", "--loads", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "prompts up to 3,000 tokens, but the profile's T_prefill covers 64-2,048 tokens" in err
    assert "--allow-extrapolation" in err


def test_a_bad_length_spec_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--lengths", "lognormal:abc"])
    assert exc.value.code == 2
    assert "--lengths: length spec 'lognormal:abc'" in capsys.readouterr().err


def test_a_learning_candidate_starts_fresh_in_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = save_profile_json(make_profile(), tmp_path / "synthetic.json")
    out = tmp_path / "bench.json"
    args = ["--profile", str(profile), "--lengths", "lognormal:1500,150", "--max-requests", "300"]
    args += ["--allow-extrapolation"]
    args += ["--predict", "exact,mean", "--loads", "2", "--json", str(out)]
    args += ["--policies", "queue-aware,queue-aware+len", "--candidate", "queue-aware+len"]
    assert main(args) == 0
    assert "queue-aware+len: goodput" in capsys.readouterr().out
    exact, mean = json.loads(out.read_text())["blocks"]
    for load in exact["loads"]:  # exact predictions: the correction is the identity
        rows = {p["policy"]: p for p in load["policies"]}
        learnt, plain = rows["queue-aware+len"], rows["queue-aware"]
        assert {k: v for k, v in learnt.items() if k not in ("policy", "label")} == {
            k: v for k, v in plain.items() if k not in ("policy", "label")
        }
    # Told the mean, it differs from queue-aware; the same run again gives the same figures,
    # which it would not if the learner carried over from one run to the next.
    base = load_requests(tmp_path / "none.csv", 300, "lognormal:1500,150")
    bench = Bench(
        str(profile),
        "conditional",
        base,
        argparse.Namespace(
            ttft_slo_ms=1000.0,
            tpot_slo_ms=50.0,
            shed=False,
            objective="latency",
            allow_extrapolation=True,
            prefill_batch_tokens=0,
        ),
    )
    rate, prediction = mean["loads"][0]["rate"], OutputPrediction("mean")

    def figures(name: str) -> str:
        return json.dumps(strict_json(bench.metrics(name, rate, prediction).to_json_dict()))

    first = figures("queue-aware+len")
    assert figures("queue-aware+len") == first
    assert first != figures("queue-aware").replace('"queue-aware"', '"queue-aware+len"')


def test_sessions_run_over_the_profiles_prefix_caches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = dataclasses.replace(make_profile(), kv_capacity_tokens=200_000)
    path = save_profile_json(profile, tmp_path / "synthetic.json")
    out = tmp_path / "bench.json"
    spec = "chat:sessions=300,turns=4,max_context=1500"
    args = ["--profile", str(path), "--sessions", spec, "--loads", "2"]
    assert main([*args, "--allow-extrapolation", "--json", str(out)]) == 0
    assert "multi-turn sessions" in capsys.readouterr().err
    (block,) = json.loads(out.read_text())["blocks"]
    for load in block["loads"]:
        rows = {p["policy"]: p for p in load["policies"]}
        # Later turns find their context on the GPU that served the earlier ones.
        assert rows["collocated"]["prefix_hit_token_share"] > 0.2
        assert rows["queue-aware"]["prefix_hit_request_share"] > 0.2
    with pytest.raises(SystemExit) as exc:
        main(["--sessions", "chat:turns=0"])
    assert exc.value.code == 2
    assert "--sessions: sessions: turns must be >= 1" in capsys.readouterr().err
