"""``pdroute fit`` and ``pdroute plot`` end to end through ``app.cli.main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main
from solver.params import load_params
from solver.profile_io import save_profile_json
from tests.solver.synthetic_profiles import synthetic_profile

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    profile = synthetic_profile(alpha=0.05, beta=7.0, batch_thresh=12.0, gamma=0.04, noise=0.02, seed=1)
    return save_profile_json(profile, tmp_path / "profile.json")


def test_fit_writes_params_and_report_and_prints_the_table(
    tmp_path: Path, profile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "deploy" / "params.json"
    assert main(["fit", str(profile_file), "-o", str(out), "--hardware", "gpu-under-test"]) == 0
    printed = capsys.readouterr().out
    params = load_params(out)
    assert params.metadata.hardware == "gpu-under-test"
    assert params.alpha == pytest.approx(0.05, rel=0.02)
    report = json.loads((tmp_path / "deploy" / "params.fit_report.json").read_text())
    assert report["params_id"] == params.params_id
    for name in ("alpha", "beta", "batch_thresh", "gamma", "bandwidth_GBps", "bytes_per_token"):
        assert f"\n{name} " in printed
    assert f"params_id {params.params_id}" in printed
    assert "warnings" in printed


def test_fit_twice_gives_identical_files(tmp_path: Path, profile_file: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["fit", str(profile_file), "-o", str(a)]) == 0
    assert main(["fit", str(profile_file), "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "a.fit_report.json").read_bytes() == (tmp_path / "b.fit_report.json").read_bytes()


def test_plot_draws_four_pngs_from_fitted_params(
    tmp_path: Path, profile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = tmp_path / "params.json"
    assert main(["fit", str(profile_file), "-o", str(params)]) == 0
    plots = tmp_path / "plots"
    code = main(
        ["plot", str(params), "--profile", str(profile_file), "-o", str(plots), "--output-len", "100"]
    )
    assert code == 0
    pngs = sorted(plots.glob("*.png"))
    assert len(pngs) == 4
    assert all(p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 10_000 for p in pngs)
    printed = capsys.readouterr().out
    assert all(f"wrote {p}" in printed for p in pngs)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fit", "{bad}"], "T_decode: missing"),
        (["fit", "{absent}"], "file not found"),
        (["plot", "{bad}"], "alpha: missing"),
        (["plot", "{params}", "--profile", "{bad}"], "T_decode: missing"),
        (["plot", "{params}", "--chunk-size", "0"], "--chunk-size: must be >= 1"),
        (["fit", "{good}", "-o", "{blocker}/params.json"], "cannot write {blocker}/params.json ("),
        (["plot", "{params}", "-o", "{blocker}"], "cannot write the plots into {blocker} ("),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, profile_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    bad = tmp_path / "bad.json"
    data = json.loads(profile_file.read_text())
    del data["T_decode"]
    bad.write_text(json.dumps(data))
    params = tmp_path / "params.json"
    assert main(["fit", str(profile_file), "-o", str(params)]) == 0
    capsys.readouterr()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    paths = {"bad": str(bad), "absent": str(tmp_path / "absent.json"), "params": str(params)}
    paths |= {"good": str(profile_file), "blocker": str(blocker)}
    message = message.format(**paths)
    code = main([a.format(**paths) for a in argv])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"pdroute {argv[0]}: error:")
    assert message in captured.err
    assert not (tmp_path / "plots").exists()


def test_fit_reads_a_torch_profile(tmp_path: Path, profile_file: Path) -> None:
    torch = pytest.importorskip("torch")
    pt = tmp_path / "profile_data.pt"
    torch.save(json.loads(profile_file.read_text()), pt)
    from_pt, from_json = tmp_path / "pt.json", tmp_path / "json.json"
    assert main(["fit", str(pt), "-o", str(from_pt)]) == 0
    assert main(["fit", str(profile_file), "-o", str(from_json)]) == 0
    assert load_params(from_pt).params_id == load_params(from_json).params_id
