"""scripts/compare-aiconfigurator.sh: its argument checks, its answer without aiconfigurator, and
the table it builds from aiconfigurator's saved results (a stand-in command writes them) and from
the real ``pdroute plan``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare-aiconfigurator.sh"

AGG_HEADER = "model,isl,osl,request_rate,bs,ttft,tpot,num_total_gpus,tp,parallel"
DISAGG_HEADER = "model,request_rate,(p)bs,(p)workers,(d)bs,(d)workers,ttft,tpot,num_total_gpus,(p)tp,(d)tp"

# Writes best_config_topn.csv files the way aiconfigurator 0.12 lays them out under --save-dir:
# default mode -> agg/ and disagg/; exp mode -> one folder per experiment of the YAML.
# Per replica: the agg worker serves 10.5 req/s on 1 GPU; the disagg replica (3P + 1D) 20.25 on 4.
STAND_IN = f"""#!/usr/bin/env bash
set -eu
mode="$2"; save=""
while [ $# -gt 0 ]; do
  if [ "$1" = --save-dir ]; then save="$2"; fi
  if [ "$1" = --yaml-path ]; then cp "$2" "$STAND_IN_YAML"; fi
  shift
done
d="$save/Qwen/run"
if [ "$mode" = default ]; then agg=agg; dis=disagg; else agg=agg_same; dis=disagg_same; fi
mkdir -p "$d/$agg" "$d/$dis"
f=best_config_topn.csv
printf '%s\\n%s\\n' '{AGG_HEADER}' 'Qwen/X,1024,200,10.5,64,100,40,1,1,tp1pp1' > "$d/$agg/$f"
printf '%s\\n%s\\n' '{DISAGG_HEADER}' 'Qwen/X,20.25,1,3,96,1,50,30,4,1,1' > "$d/$dis/$f"
echo "    Best Experiment Chosen: agg at 123.00 tokens/s/gpu (agg 1.29x better than disagg)"
"""


def _run(
    args: list[str], env_extra: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_extra}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_without_aiconfigurator_it_says_so_in_one_line_and_exits_cleanly(tmp_path: Path) -> None:
    result = _run([], {"AICONFIGURATOR": str(tmp_path / "missing" / "aiconfigurator")})
    assert result.returncode == 0
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert "aiconfigurator is not installed" in lines[0]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--gpus", "x"], "--gpus"),
        (["--gpus", "3"], "--gpus"),
        (["--gpus", "0"], "--gpus"),
        (["--workloads", "1024/"], "'1024/'"),
        (["--workloads", "1024/200 0/5"], "'0/5'"),
        (["--workloads", "1/2/3"], "'1/2/3'"),
        (["--bogus"], "'--bogus'"),
    ],
)
def test_bad_arguments_get_one_line_naming_them(args: list[str], named: str) -> None:
    result = _run(args, {"AICONFIGURATOR": "/bin/true"})
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert named in lines[0]


def test_the_table_scales_per_replica_rates_to_the_fleet(tmp_path: Path) -> None:
    stand_in = tmp_path / "aiconfigurator"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    pdroute = f"env PYTHONPATH={ROOT} {sys.executable} -m app"
    result = _run(
        ["--gpus", "8", "--workloads", "1024/200"],
        {
            "AICONFIGURATOR": str(stand_in),
            "PDROUTE": pdroute,
            "STAND_IN_YAML": str(tmp_path / "same.yaml"),
        },
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| Qwen")]
    assert len(rows) == 3
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    # 8 GPUs: 8 agg workers of 1 GPU, 2 disagg replicas of 4 GPUs.
    for row in cells:
        assert row[6] == "84.0 (8 x tp1, bs 64)"
        assert row[7] == "40.5 (2 x (3P tp1 + 1D tp1), decode bs 96)"
        assert row[8] == "agg, 1.29x"
        assert row[9] == "84.0 (8 x tp1, bs 64) / 40.5 (2 x (3P tp1 + 1D tp1), decode bs 96)"
        assert float(row[2]) > 0  # pdroute's co-located rate, from the real plan
    assert cells[0][0] == "Qwen3-8B h100_sxm (8 x tp1)"
    assert cells[2][0] == "Qwen3-32B h100_sxm (4 x tp2)"
    assert cells[0][4].startswith(("stay co-located", "deploy"))
    # The last like-for-like YAML holds aiconfigurator to pdroute's TP2 machine, underated.
    yaml = (tmp_path / "same.yaml").read_text()
    assert "agg_tp_candidates: [2]" in yaml
    assert "decode_tp_candidates: [2]" in yaml
    assert "rate_match_prefill_degradation: 1.0" in yaml
    assert "total_gpus: 8" in yaml
