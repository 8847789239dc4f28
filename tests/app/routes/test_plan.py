"""``POST /plan`` and ``POST /plan/grid`` on a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from solver.plan.curvesets import curve_set_to_mapping
from tests.app.conftest import LiveServer
from tests.solver.plan.curve_factory import make_curve_set


def _inline(**overrides: Any) -> dict[str, Any]:
    data = curve_set_to_mapping(make_curve_set())
    data.update(overrides)
    return data


def _plan(server: LiveServer, **body: Any) -> httpx.Response:
    request = {"curves": "bloom-176b-8xh100", "machines": 64, "prompt_len": 1024, "output_len": 256}
    request.update(body)
    with server.client() as client:
        return client.post("/plan", json=request)


def test_plan_with_a_builtin_set(live_server: LiveServer) -> None:
    r = _plan(live_server)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["curves"] == "bloom-176b-8xh100" and d["machines"] == 64
    assert d["best"]["policy"] in {"CUF-P", "CUF-D", "TUF-P", "TUF-D"}
    assert d["best"]["decode_machines"] + d["best"]["prefill_machines"] == 64
    assert d["reference_optimum"]["rate_rps"] >= d["best"]["rate_rps"]
    assert d["speedup"] == pytest.approx(d["best"]["rate_rps"] / d["baseline"]["rate_rps"])
    assert set(d) >= {"baseline", "best", "candidates", "reference_optimum", "speedup", "s_p", "s_d", "fits"}
    assert d["fits"]["prefill"]["throughput"]["kind"] == "piecewise"


def test_plan_with_an_inline_set_gives_the_closed_form(live_server: LiveServer) -> None:
    r = _plan(live_server, curves=_inline(), machines=10, prompt_len=100, output_len=50, all_candidates=True)
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["best"]["policy"], d["best"]["decode_machines"]) == ("CUF-P", 7)
    assert d["best"]["rate_rps"] == pytest.approx(150.0)
    assert d["baseline"]["rate_rps"] == pytest.approx(8000 / 66)
    assert d["s_p"] == pytest.approx(150 * 66 / 8000) and d["s_d"] == pytest.approx(d["s_p"])
    assert d["num_candidates"] == len(d["candidates"]) == 11


def test_an_inline_copy_of_a_builtin_set_plans_the_same(live_server: LiveServer) -> None:
    """The built-in file as an inline body (integer batches, nested provenance) is accepted."""
    path = Path(__file__).resolve().parents[3] / "solver" / "data" / "curves" / "bloom-176b-8xh100.json"
    by_name, inline = _plan(live_server), _plan(live_server, curves=json.loads(path.read_text()))
    assert by_name.status_code == inline.status_code == 200, inline.text
    assert inline.json()["best"] == by_name.json()["best"]


def test_plan_overrides_memory_and_weights(live_server: LiveServer) -> None:
    r = _plan(live_server, curves=_inline(), machines=10, prompt_len=100, output_len=50, weights_gb=30.0)
    assert r.status_code == 200, r.text
    # 30 + 0.01*B = 100 -> the prefill limit drops from 8000 to 7000 tokens
    assert r.json()["limits"]["prefill_tokens"]["batch"] == pytest.approx(7000.0)
    assert r.json()["weights_gb"] == 30.0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"machines": 1001}, "machines"),
        ({"machines": 0}, "machines"),
        ({"prompt_len": 0}, "prompt_len"),
        ({"output_len": 2_000_000}, "output_len"),
        ({"machines": "64"}, "machines"),
        ({"throughput_fit": "cubic"}, "throughput_fit"),
        ({"memory_gb": -5}, "memory_gb"),
        ({"surprise": 1}, "surprise"),
        ({"curves": ""}, "curves"),
    ],
)
def test_out_of_bounds_fields_are_422_naming_the_field(
    live_server: LiveServer, body: dict[str, Any], field: str
) -> None:
    r = _plan(live_server, **body)
    assert r.status_code == 422
    assert field in r.json()["error"]


def test_too_many_points_per_series_is_422(live_server: LiveServer) -> None:
    curves = _inline()
    curves["decode"]["throughput"]["points"] = [[float(b), 10.0 * b] for b in range(1, 258)]
    r = _plan(live_server, curves=curves, machines=10, prompt_len=100, output_len=50)
    assert r.status_code == 422 and "points" in r.json()["error"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"machines": 1}, "no feasible x"),
        ({"weights_gb": 700.0}, "larger than machine memory"),
        ({"curves": "no-such-set"}, "unknown built-in curve set"),
        ({"curves": "/etc/passwd"}, "unknown built-in curve set"),
        ({"prompt_len": 200_000}, "does not fit a prefill machine"),
        ({"curves": "llama2-70b-8xh100", "throughput_fit": "quadratic"}, "zero tokens/s"),
    ],
)
def test_infeasible_inputs_are_422_with_the_reason(
    live_server: LiveServer, body: dict[str, Any], reason: str
) -> None:
    r = _plan(live_server, **body)
    assert r.status_code == 422, r.text
    assert reason in r.json()["error"]


def test_curves_without_positive_throughput_are_422(live_server: LiveServer) -> None:
    curves = _inline()
    curves["prefill"]["throughput"]["points"] = [[100.0, 0.0], [1000.0, 0.0]]
    r = _plan(live_server, curves=curves, machines=10, prompt_len=100, output_len=50)
    assert r.status_code == 422 and "never reaches a positive throughput" in r.json()["error"]


@pytest.mark.parametrize(
    ("phase", "series", "points", "fit", "reason"),
    [
        # batches so close to 0 that max(batch)**2 underflows: the fit cannot be rescaled
        ("decode", "capacity", [[1e-300, 21.0], [2e-300, 22.0], [3e-300, 30.0]], "piecewise", "not finite"),
        ("prefill", "throughput", [[1.0, 1e308], [2.0, 5.0]], "piecewise", "must be in [0, 1e+12]"),
        ("decode", "capacity", [[1.0, 21.0], [1e300, 22.0]], "piecewise", "batch must be in (0, 1e+12]"),
        # a parabola with c2 ~ 5e307: finite coefficients, throughput overflowing at the limit
        ("decode", "throughput", [[1e-148, 5.0], [2e-148, 6.0], [3e-148, 1e12]], "quadratic", "overflow"),
    ],
)
def test_extreme_points_are_422_not_500(
    live_server: LiveServer, phase: str, series: str, points: list[list[float]], fit: str, reason: str
) -> None:
    curves = _inline()
    curves[phase][series]["points"] = points
    common = {"curves": curves, "machines": 10, "throughput_fit": fit}
    r = _plan(live_server, **common, prompt_len=100, output_len=50)
    assert r.status_code == 422, r.text
    assert reason in r.json()["error"]
    with live_server.client() as client:
        grid = client.post("/plan/grid", json={**common, "prompt_lens": [100], "output_lens": [50]})
    assert grid.status_code == 422, grid.text
    assert reason in grid.json()["error"]


def test_grid(live_server: LiveServer) -> None:
    body = {
        "curves": _inline(),
        "machines": 10,
        "prompt_lens": [100, 400, 9000],
        "output_lens": [50, 200],
    }
    with live_server.client() as client:
        r = client.post("/plan/grid", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["s_p"][0][0] == pytest.approx(150 * 66 / 8000) and d["policy"][0][0] == "CUF-P"
    assert len(d["s_d"]) == 3 and all(len(row) == 2 for row in d["s_d"])
    assert d["s_p"][2] == [None, None] and "9000" in d["infeasible"][2][0]
    # instance A at L_p 100, L_d 50: deploy the pick (equal to the reference optimum)
    assert d["recommendation"][0][0] == "CUF-P"
    assert d["recommended_speedup"][0][0] == pytest.approx(150 * 66 / 8000)
    assert d["recommendation"][2] == [None, None] and d["recommended_speedup"][2] == [None, None]
    labels = {"co-located", "reference", "CUF-P", "CUF-D", "TUF-P", "TUF-D"}
    assert all(r in labels for r in d["recommendation"][1])


def test_every_plan_answer_carries_a_recommendation(live_server: LiveServer) -> None:
    # the BLOOM-176B case: the design's pick is a TUF split at 0.54x co-located, the reference 1.34x
    r = _plan(live_server, machines=8, prompt_len=1500, output_len=200, throughput_fit="quadratic")
    assert r.status_code == 200, r.text
    d = r.json()
    rec = d["recommendation"]
    assert d["speedup"] == pytest.approx(0.54, abs=0.005)
    assert (rec["action"], rec["source"]) == ("split", "reference")
    assert rec["decode_machines"] == d["reference_optimum"]["decode_machines"]
    assert rec["speedup"] == pytest.approx(d["reference_optimum"]["speedup"])
    assert "reference optimum" in rec["reason"]
    # Llama2-70B, 64 machines, prompt 128, output 65,536: no split beats co-location
    r = _plan(live_server, curves="llama2-70b-8xh100", prompt_len=128, output_len=65536)
    rec = r.json()["recommendation"]
    assert (rec["action"], rec["decode_machines"], rec["speedup"]) == ("co-located", 64, 1.0)
    assert rec["reason"].startswith("no split beats co-location")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt_lens": list(range(1, 34))}, "prompt_lens"),
        ({"output_lens": []}, "output_lens"),
        ({"machines": 1001}, "machines"),
    ],
)
def test_grid_bounds_are_422(live_server: LiveServer, body: dict[str, Any], field: str) -> None:
    request = {"curves": "bloom-176b-8xh100", "machines": 64, "prompt_lens": [512], "output_lens": [128]}
    request.update(body)
    with live_server.client() as client:
        r = client.post("/plan/grid", json=request)
    assert r.status_code == 422 and field in r.json()["error"]


def test_grid_without_feasible_cells_is_422(live_server: LiveServer) -> None:
    body = {"curves": _inline(), "machines": 10, "prompt_lens": [9000], "output_lens": [50]}
    with live_server.client() as client:
        r = client.post("/plan/grid", json=body)
    assert r.status_code == 422 and "no feasible cell" in r.json()["error"]


def test_a_grid_solve_does_not_block_other_requests(live_server: LiveServer) -> None:
    """The handler runs in the threadpool: /healthz is answered while a large grid is being solved.

    Proved by order, not by a time limit: /healthz, sent while the grid request is in flight, is
    answered before the grid. Were the grid solved on the event loop, /healthz would wait for it."""
    lens = [128 * (k + 1) for k in range(32)]
    body = {"curves": "bloom-176b-8xh100", "machines": 1000, "prompt_lens": lens, "output_lens": lens}
    result: dict[str, Any] = {}

    def solve() -> None:
        with httpx.Client(base_url=live_server.url, timeout=120.0) as client:
            result["grid"] = client.post("/plan/grid", json=body)
            result["grid_done"] = time.perf_counter()

    worker = threading.Thread(target=solve)
    worker.start()
    time.sleep(0.3)  # let the grid request reach the server
    with httpx.Client(base_url=live_server.url, timeout=120.0) as client:
        health_sent = time.perf_counter()
        health = client.get("/healthz")
        health_done = time.perf_counter()
    worker.join(timeout=120)
    assert health.status_code == 200
    assert result["grid"].status_code == 200
    if result["grid_done"] > health_sent:  # the grid was still in flight when /healthz was sent
        assert health_done < result["grid_done"]


def test_plan_from_a_shipped_profile(live_server: LiveServer) -> None:
    r = _plan(live_server, curves=None, profile="default", machines=16, prompt_len=1024, output_len=200)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["curves"] == "profile Qwen/Qwen3-8B on 1x h100_sxm" and d["machines"] == 16
    assert d["recommendation"]["action"] in {"co-located", "split"}
    assert any("mean context 1124" in a for a in d["assumptions"])
    assert _plan(live_server).json()["assumptions"] == []  # a curve set states its own


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"profile": "default"}, "curves, profile: give exactly one of them"),
        ({"curves": None}, "curves, profile: give exactly one of them"),
        ({"curves": None, "profile": "nope"}, "unknown shipped profile 'nope'"),
        ({"curves": None, "profile": "default", "prompt_len": 131100}, "context 131228 tokens"),
    ],
)
def test_bad_profile_requests_are_422_naming_the_problem(
    live_server: LiveServer, body: dict[str, Any], error: str
) -> None:
    r = _plan(live_server, **body)
    assert r.status_code == 422, r.text
    assert error in r.json()["error"]
