"""The GPU check's host-side logic, and the whole check run on the CPU with the tiny preset."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from app.cli.main import main as pdroute
from profiling.models import PRESETS
from scripts import gpu_check
from solver.profile_io import save_profile_json
from solver.profile_result import ProfileResult
from tests.solver.synthetic_profiles import synthetic_profile

TINY = PRESETS["tiny"]

# Runs ``stage_main`` in a Python where the service's web stack cannot be imported, as on a GPU
# image that has torch, numpy and matplotlib but no fastapi or pydantic.
WITHOUT_WEB_STACK = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("fastapi", "pydantic", "pydantic_settings", "starlette", "uvicorn"):
            raise ImportError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NotInstalled())
from scripts.gpu_check import stage_main
sys.exit(stage_main(sys.argv[1:]))
"""


def test_stages_are_the_operator_commands(tmp_path: Path) -> None:
    stages = gpu_check.plan_stages(tmp_path, model="qwen3-8b", device="cuda", quick=False)
    assert [s.name for s in stages] == ["profile", "fit", "plot", "profile-long"]
    pt = str(tmp_path / "profile_data.pt")
    assert stages[0].argv == ("profile", "--model", "qwen3-8b", "--device", "cuda", "-o", pt)
    assert stages[1].argv == ("fit", pt, "-o", str(tmp_path / "params.json"))
    assert stages[2].argv[-2:] == ("-o", str(tmp_path / "plots"))
    long_pt = str(tmp_path / "long_profile.pt")
    assert stages[3].argv == (
        "profile",
        "--model",
        "qwen3-8b",
        "--device",
        "cuda",
        "--grid",
        "long",
        "-o",
        long_pt,
    )
    quick = gpu_check.plan_stages(tmp_path, model="tiny", device="cpu", quick=True)
    assert quick[0].argv[-1] == "--quick" and quick[3].argv[-5:-2] == ("--quick", "--prefix-lens", "64,256")
    no_long = gpu_check.plan_stages(tmp_path, model="tiny", device="cpu", quick=True, long=False)
    assert [s.name for s in no_long] == ["profile", "fit", "plot"]


def test_the_long_grid_stage_parses_and_fits_the_model() -> None:
    from app.cli.commands.profile import grids_from_args
    from app.cli.main import build_parser
    from profiling.grid_checks import check_context
    from profiling.models import resolve_model

    stage = gpu_check.plan_stages(Path("out"), model="qwen3-8b", device="cuda", quick=False)[3]
    grids = grids_from_args(build_parser().parse_args(list(stage.argv)))
    assert max(grids.prompt_lens) == 32768 and max(grids.prefix_lens) + max(grids.chunk_sizes) == 32768
    check_context(grids, resolve_model("qwen3-8b"))  # Qwen3-8B has 40,960 positions


def test_long_context_summary_lines() -> None:
    profile = ProfileResult(
        T_prefill={512: 10.0, 2048: 40.0, 32768: 1000.0},
        T_decode={(128, 1): 5.0},
        T_interference={(512, 4): 1.0},
        T_chunk_prefix={(2048, 512): 11.0, (32256, 64): 8.0, (32256, 512): 25.0},
        p2p_bandwidth_GBps=1.0,
        bytes_per_token=TINY.bytes_per_token(2),
        provenance={
            "chunked_prefill": {"prefill/32768": {"pass_tokens": 8192, "num_passes": 4, "why": "oom"}},
            "failed_points": [{"point": "decode/32768x32", "error": "OutOfMemoryError: x"}],
        },
    )
    assert gpu_check.long_context_summary(profile) == [
        "long context: prefill 40 ms at 2048 tokens, 1000 ms at 32768: 25.0x for 16x the tokens "
        "(1.56x linear)",
        "chunk over prefix: 512 tokens after 32256 cached: 25 ms (2.50x the same chunk fresh)",
        "measured in passes: prefill/32768, 4 passes of 8192 (oom)",
        "long profile failed points: 1",
        "  - decode/32768x32: OutOfMemoryError: x",
    ]


@pytest.mark.parametrize("control", [False, True])
def test_stages_need_no_web_stack(tmp_path: Path, control: bool) -> None:
    profile = save_profile_json(synthetic_profile(), tmp_path / "profile.json")
    params = tmp_path / "params.json"
    script = WITHOUT_WEB_STACK
    if control:  # the blocker works: pydantic cannot be imported
        script = script.replace("from scripts.gpu_check import stage_main", "import pydantic")
    argv = [sys.executable, "-c", script, "fit", str(profile), "-o", str(params)]
    done = subprocess.run(argv, cwd=gpu_check.REPO, capture_output=True, text=True, check=False)
    if control:
        assert done.returncode != 0 and "No module named 'pydantic'" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert params.is_file() and f"wrote {params}" in done.stdout


def test_flop_and_byte_counts_by_hand() -> None:
    # tiny: 2 layers, hidden 64, 4 q heads x 16, 2 kv heads, intermediate 128, vocab 256, untied.
    layer = 64 * 16 * (4 + 2 * 2) + 4 * 16 * 64 + 3 * 64 * 128 + 2 * 64 + 2 * 16
    assert TINY.num_params() == 2 * layer + 2 * 256 * 64 + 64
    body = 2 * layer + 64
    assert gpu_check.prefill_flops(TINY, 10) == 2 * body * 10 + 4 * 2 * 4 * 16 * 55 + 2 * 256 * 64
    assert gpu_check.decode_bytes(TINY, 2, 100) == (
        TINY.num_params() - 256 * 64
    ) * 2 + 100 * TINY.bytes_per_token(2)


def test_efficiency_ratios() -> None:
    profile = ProfileResult(
        T_prefill={8: 1.0, 16: 2.0},
        T_decode={(32, 1): 0.5, (64, 1): 0.6, (32, 4): 0.7},
        T_interference={(8, 2): 0.1},
        p2p_bandwidth_GBps=1.0,
        bytes_per_token=TINY.bytes_per_token(2),
    )
    eff = gpu_check.efficiency(profile, TINY, gemm_tflops=2.0, copy_gbps=4.0)
    assert eff["prefill_prompt_len"] == 16 and eff["decode_kv_len"] == 32
    assert eff["prefill_tflops"] == pytest.approx(gpu_check.prefill_flops(TINY, 16) / 2e-3 / 1e12)
    assert eff["prefill_vs_gemm"] == pytest.approx(eff["prefill_tflops"] / 2.0)
    assert eff["decode_gbps"] == pytest.approx(gpu_check.decode_bytes(TINY, 2, 32) / 0.5e-3 / 1e9)
    assert eff["decode_vs_copy"] == pytest.approx(eff["decode_gbps"] / 4.0)


def test_skips_cleanly_without_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith("SKIP: no CUDA GPU")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # profiles the tiny preset on the CPU, fits and plots
def test_the_whole_check_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def in_process(argv: Sequence[str]) -> int:
        return pdroute([*argv, "--no-progress"] if argv[0] == "profile" else list(argv))

    args = ["--out", str(tmp_path), "--model", "tiny", "--device", "cpu", "--quick"]
    assert gpu_check.main(args, run_stage=in_process) == 0
    out = capsys.readouterr().out
    expected_lines = ("params:", "alpha", "x GEMM", "x copy", "elapsed: baselines", "cpu-memcpy (no GPU)")
    for expected in (*expected_lines, "long context: prefill", "chunk over prefix: 1024 tokens after 256"):
        assert expected in out
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert len(pngs) == 4 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_a_failing_stage_stops_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--out", str(tmp_path), "--model", "tiny", "--device", "cpu", "--quick"]
    assert gpu_check.main(args, run_stage=lambda argv: 3 if argv[0] == "fit" else 0) == 3
    assert "FAILED at fit (exit 3)" in capsys.readouterr().out


def test_summary_lines() -> None:
    params = {"alpha": 0.0123456789, "bytes_per_token": 147456}
    report = {
        "parameters": {
            "alpha": {"value": 0.0123456789, "unit": "ms/token", "r_squared": 0.99123},
            "bytes_per_token": {"value": 147456.0, "unit": "bytes", "r_squared": None},
        },
        "warnings": ["alpha: something"],
    }
    lines = gpu_check.format_summary(params, report)
    assert lines[0].split() == ["alpha", "0.0123457", "ms/token", "R^2", "0.9912"]
    assert lines[1].split() == ["bytes_per_token", "147456", "bytes", "R^2", "-"]
    assert lines[2:] == ["  fit warnings: 1", "    - alpha: something"]
