"""``pdroute profile`` end to end on the CPU (tiny preset), and its one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.cli.main import main
from solver.fit import fit_profile
from solver.params import load_params
from solver.profile_io import load_profile
from solver.profile_result import QUICK_GRIDS

TORCH_REASON = "pdroute profile --source torch needs torch (pip install '.[profiling]')"


def needs_torch() -> None:
    """Skip the calling test where torch is not installed (the service and CI run without it)."""
    pytest.importorskip("torch", reason=TORCH_REASON)


def test_quick_profile_of_the_tiny_preset_into_pt_then_params(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    needs_torch()
    out = tmp_path / "profile_data.pt"
    args = ["profile", "--quick", "--model", "tiny", "--device", "cpu", "-o", str(out)]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.out and "profile:" in captured.err  # progress bar on stderr
    profile = load_profile(out)
    assert set(profile.T_prefill) == set(QUICK_GRIDS.prompt_lens)
    assert len(profile.T_decode) == len(QUICK_GRIDS.kv_lens) * len(QUICK_GRIDS.batch_sizes)
    assert len(profile.T_interference) == len(QUICK_GRIDS.chunk_sizes) * len(QUICK_GRIDS.decode_batches)
    assert profile.grids == QUICK_GRIDS.to_json_dict()
    assert all(
        len(profile.samples[f"mixed/{c}x{b}"]) == QUICK_GRIDS.repeats for c, b in profile.T_interference
    )
    params_path = tmp_path / "params.json"
    assert main(["fit", str(out), "-o", str(params_path)]) == 0
    # The service's own reader accepts the params.json fitted from a CPU profile.
    params = load_params(params_path)
    assert params == fit_profile(profile)[0] and params.metadata.source == "torch-profiler"


def test_grid_options_override_into_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    needs_torch()
    out = tmp_path / "p.json"
    args = ["profile", "--quick", "--model", "tiny", "--device", "cpu", "--no-progress", "-o", str(out)]
    args += ["--prompt-lens", "8,12", "--kv-lens", "10", "--batch-sizes", "1,2", "--chunk-sizes", "4"]
    args += ["--decode-batches", "3", "--interference-kv-len", "6", "--warmup", "0", "--repeats", "2"]
    args += ["--bandwidth-gbps", "50", "--transfer-path", "rdma-network"]
    assert main(args) == 0
    assert "rdma-network at 50 GB/s" in capsys.readouterr().out
    profile = load_profile(out)
    assert set(profile.T_prefill) == {8, 12} and set(profile.T_decode) == {(10, 1), (10, 2)}
    assert set(profile.T_interference) == {(4, 3)} and profile.interference_kv_len == 6
    assert all(len(s) == 2 for s in profile.samples.values())
    assert (profile.p2p_bandwidth_GBps, profile.transfer_path) == (50.0, "rdma-network")


def test_hf_config_path_as_model(tmp_path: Path) -> None:
    needs_torch()
    cfg = {
        "model_type": "llama",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "vocab_size": 100,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "p.json"
    grids = ["--prompt-lens", "4", "--kv-lens", "4", "--batch-sizes", "1", "--chunk-sizes", "4"]
    grids += ["--decode-batches", "1", "--warmup", "0", "--repeats", "1"]
    args = ["profile", "--model", str(tmp_path / "config.json"), "--device", "cpu", "--no-progress", *grids]
    assert main([*args, "-o", str(out)]) == 0
    profile = load_profile(out)
    assert profile.model_config["num_layers"] == 1
    assert profile.bytes_per_token == 1 * 2 * 8 * 2 * 4  # float32 on the CPU


@pytest.mark.parametrize(
    ("args", "message", "is_torch_checked"),  # is_torch_checked: found by the profiler itself
    [
        (["--model", "gpt-9"], "unknown model 'gpt-9'", True),
        (["--model", "/nonexistent/config.json"], "config file not found", True),
        (["--model", "tiny", "--system", "h100_sxm"], "not used by --source torch: --system", False),
        (
            ["--source", "aiconfigurator", "--checkpoint", "x"],
            "not used by --source aiconfigurator: --checkpoint",
            False,
        ),
        (["--model", "tiny", "--bandwidth-gbps", "10"], "together", True),
        (["--model", "tiny", "--dtype", "int4"], "unknown dtype", True),
        (["--model", "tiny", "--checkpoint", "/nonexistent"], "/nonexistent: not a directory", True),
    ],
)
def test_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str, is_torch_checked: bool
) -> None:
    if is_torch_checked:
        needs_torch()
    out = tmp_path / "p.json"
    code = main(["profile", "--quick", "--device", "cpu", "--no-progress", *args, "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("pdroute profile: error: ")
    assert re.search(message, err)
    assert not out.exists()


def test_bad_output_suffix_and_missing_cuda(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_torch()
    assert main(["profile", "--model", "tiny", "-o", str(tmp_path / "p.txt")]) == 2
    assert ".pt or .json" in capsys.readouterr().err
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert (
        main(["profile", "--quick", "--model", "tiny", "--device", "cuda", "-o", str(tmp_path / "p.pt")]) == 2
    )
    assert "CUDA was requested but is not available" in capsys.readouterr().err


def test_bad_grid_values_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--prompt-lens", "64,-1", "-o", "p.pt"])
    assert exc.value.code == 2
    assert "expected positive integers" in capsys.readouterr().err


def test_aiconfigurator_source_is_dispatched_and_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    needs_torch()  # the profiling package (its result type) imports torch
    out = tmp_path / "aic.pt"
    args = ["profile", "--source", "aiconfigurator", "--model", "Qwen/Qwen3-8B", "--system", "h100_sxm"]
    args += ["--prompt-lens", "128,256", "--kv-lens", "512", "--batch-sizes", "1,8", "--chunk-sizes", "128"]
    args += ["--decode-batches", "8", "-o", str(out)]
    assert main(args) == 0
    assert "device h100_sxm" in capsys.readouterr().out
    profile = load_profile(out)
    assert set(profile.T_prefill) == {128, 256} and set(profile.T_decode) == {(512, 1), (512, 8)}


def test_default_grids_are_the_designs_and_every_one_is_overridable() -> None:
    from app.cli.commands.profile import grids_from_args
    from app.cli.main import build_parser

    defaults = grids_from_args(build_parser().parse_args(["profile", "-o", "p.pt"]))
    assert defaults.to_json_dict() == {
        "prompt_lens": [64, 128, 256, 512, 1024, 2048],
        "kv_lens": [128, 512, 1024, 2048],
        "batch_sizes": [1, 4, 8, 16, 32],
        "chunk_sizes": [64, 128, 256, 512],
        "decode_batches": [4, 8, 16],
        "interference_kv_len": 512,
        "warmup": 3,
        "repeats": 10,
    }
    argv = ["profile", "-o", "p.pt", "--prompt-lens", "7", "--kv-lens", "8", "--batch-sizes", "9"]
    argv += ["--chunk-sizes", "10", "--decode-batches", "11", "--interference-kv-len", "12"]
    argv += ["--warmup", "0", "--repeats", "13"]
    overridden = grids_from_args(build_parser().parse_args(argv)).to_json_dict()
    assert overridden == {
        "prompt_lens": [7],
        "kv_lens": [8],
        "batch_sizes": [9],
        "chunk_sizes": [10],
        "decode_batches": [11],
        "interference_kv_len": 12,
        "warmup": 0,
        "repeats": 13,
    }


def test_the_long_preset_and_prefix_lens() -> None:
    from app.cli.commands.profile import grids_from_args
    from app.cli.main import build_parser
    from solver.profile_result import LONG_GRIDS

    parse = build_parser().parse_args
    long = grids_from_args(parse(["profile", "-o", "p.pt", "--grid", "long"]))
    assert long == LONG_GRIDS and max(long.prompt_lens) == 32768 and max(long.kv_lens) == 32768
    assert long.prefix_lens == (512, 2048, 8192, 16384, 32256)
    assert long.to_json_dict()["prefix_lens"] == [512, 2048, 8192, 16384, 32256]
    changed = grids_from_args(parse(["profile", "-o", "p.pt", "--grid", "long", "--prefix-lens", "100"]))
    assert changed.prefix_lens == (100,) and changed.prompt_lens == LONG_GRIDS.prompt_lens
    quick = grids_from_args(parse(["profile", "-o", "p.pt", "--quick", "--prefix-lens", "64,256"]))
    assert quick.prefix_lens == (64, 256) and quick.prompt_lens == (16, 32, 64, 128)
    assert grids_from_args(parse(["profile", "-o", "p.pt", "--grid", "quick"])) == grids_from_args(
        parse(["profile", "-o", "p.pt", "--quick"])
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prefix-lens", "512,0"], "argument --prefix-lens: expected positive integers"),
        (["--prefix-lens", "x"], "argument --prefix-lens: expected comma-separated integers"),
        (["--quick", "--grid", "long"], "--quick is --grid quick; it cannot go with --grid long"),
        (["--grid", "huge"], "argument --grid: invalid choice"),
        (["--source", "aiconfigurator", "--prefill-pass-tokens", "8"], "not used by --source aiconfigurator"),
    ],
)
def test_bad_grid_options_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code: str | int | None
    try:
        code = main(["profile", "-o", "p.json", *argv])
    except SystemExit as exc:  # argparse's own errors exit 2 after the usage lines
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err.splitlines()[-1] and "Traceback" not in err, err


def test_the_aiconfigurator_source_with_prefix_lens(tmp_path: Path) -> None:
    needs_torch()  # the profiling package (its result type) imports torch
    out = tmp_path / "aic.json"
    args = ["profile", "--source", "aiconfigurator", "--prompt-lens", "512", "--kv-lens", "512"]
    args += ["--batch-sizes", "1", "--chunk-sizes", "512", "--decode-batches", "8", "--prefix-lens", "2048"]
    assert main([*args, "-o", str(out)]) == 0
    profile = load_profile(out)
    assert set(profile.T_chunk_prefix) == {(2048, 512)} and profile.kv_capacity_tokens is not None
    assert profile.provenance["generated_by"].endswith("--prefix-lens 2048")
