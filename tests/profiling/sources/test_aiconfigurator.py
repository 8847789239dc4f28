"""The aiconfigurator profile source, against the real installed database (no mocks).

One default-grid profile of Qwen3-8B on h100_sxm with vLLM is shared by the module (the first
profile loads the database, about 2-4 s; later ones take well under a second).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from app.main import create_app
from app.settings import Settings, embedded_params_path
from pdroute_core.routing.design import AnalyticalCostModel
from profiling.sources.aiconfigurator import profile_from_aiconfigurator
from solver.errors import InvalidProfile, UnsupportedSource
from solver.fit import fit_profile
from solver.params import load_params, save_params
from solver.profile_io import load_profile, save_profile_json
from solver.profile_result import ProfileGrids, ProfileResult, profile_from_json_dict

ROOT = Path(__file__).resolve().parents[3]
GRIDS = ProfileGrids()
SMALL = ProfileGrids(
    prompt_lens=(128, 512),
    kv_lens=(512,),
    batch_sizes=(1, 8),
    chunk_sizes=(128,),
    decode_batches=(8,),
)
QWEN3_8B: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "system": "h100_sxm", "backend": "vllm"}
# The database interpolates kernel tables: a mixed step can come out a hair cheaper than the
# pure decode step it contains. Tolerated: 1% of that decode step.
INTERFERENCE_NOISE = 0.01


def _spec(system: str) -> Mapping[str, Any]:
    """The system's spec, read straight from aiconfigurator's YAML file (not through pdroute)."""
    path = resources.files("aiconfigurator_core") / "systems" / f"{system}.yaml"
    spec: Mapping[str, Any] = yaml.safe_load(path.read_text())
    return spec


@pytest.fixture(scope="module")
def profile() -> ProfileResult:
    return profile_from_aiconfigurator(**QWEN3_8B, backend_version=None, transfer="nvlink", grids=GRIDS)


def test_grids_are_complete(profile: ProfileResult) -> None:
    assert set(profile.T_prefill) == set(GRIDS.prompt_lens)
    assert set(profile.T_decode) == set(itertools.product(GRIDS.kv_lens, GRIDS.batch_sizes))
    pairs = set(itertools.product(GRIDS.chunk_sizes, GRIDS.decode_batches))
    assert set(profile.T_interference) == set(profile.T_mixed) == set(profile.T_baseline) == pairs
    assert profile.interference_kv_len == GRIDS.interference_kv_len
    assert profile.provenance["omitted_points"] == []
    for length in GRIDS.prompt_lens:
        assert profile.samples[f"prefill/{length}"] == [profile.T_prefill[length]]
    for chunk, batch in pairs:
        assert profile.samples[f"mixed/{chunk}x{batch}"] == [profile.T_mixed[(chunk, batch)]]


def test_step_times_are_positive(profile: ProfileResult) -> None:
    for table in (profile.T_prefill, profile.T_decode, profile.T_mixed, profile.T_baseline):
        assert all(v > 0 for v in table.values())


def test_longer_prompts_are_never_cheaper(profile: ProfileResult) -> None:
    times = [profile.T_prefill[n] for n in sorted(profile.T_prefill)]
    assert all(a <= b for a, b in itertools.pairwise(times)), times


def test_larger_decode_batches_and_longer_contexts_are_never_cheaper(profile: ProfileResult) -> None:
    for kv in GRIDS.kv_lens:
        times = [profile.T_decode[(kv, b)] for b in sorted(GRIDS.batch_sizes)]
        assert all(a <= b for a, b in itertools.pairwise(times)), (kv, times)
    for batch in GRIDS.batch_sizes:
        times = [profile.T_decode[(kv, batch)] for kv in sorted(GRIDS.kv_lens)]
        assert all(a <= b for a, b in itertools.pairwise(times)), (batch, times)


def test_interference_is_mixed_minus_decode_and_never_negative_beyond_noise(profile: ProfileResult) -> None:
    kv = profile.interference_kv_len
    for (chunk, batch), value in profile.T_interference.items():
        base = profile.T_baseline[(chunk, batch)]
        assert value == profile.T_mixed[(chunk, batch)] - base
        # The baseline is the same decode step as the decode table's point at that kv_len.
        assert base == profile.T_decode[(kv, batch)]
        assert value >= -INTERFERENCE_NOISE * base, (chunk, batch, value)
    for batch in GRIDS.decode_batches:
        by_chunk = [profile.T_interference[(c, batch)] for c in sorted(GRIDS.chunk_sizes)]
        assert all(a <= b for a, b in itertools.pairwise(by_chunk)), (batch, by_chunk)


def test_bytes_per_token_from_the_architecture(profile: ProfileResult) -> None:
    cfg = profile.model_config
    assert (cfg["num_layers"], cfg["num_kv_heads"], cfg["head_dim"]) == (36, 8, 128)
    assert cfg["kv_dtype"] == "bfloat16"
    assert profile.bytes_per_token == 36 * 8 * 128 * 2 * 2  # K and V, 2 bytes each


def test_provenance_states_the_database_and_a_spec_bandwidth(profile: ProfileResult) -> None:
    prov = profile.provenance
    assert prov["source"] == "aiconfigurator"
    assert prov["aiconfigurator_version"] == profile.versions["aiconfigurator"]
    assert prov["database_version"].endswith(profile.versions["aiconfigurator-core"])
    assert (prov["system"], prov["backend"], prov["database_mode"]) == ("h100_sxm", "vllm", "SILICON")
    assert prov["backend_version"]  # resolved: the database's current vLLM version
    assert prov["tp_size"] == 1
    assert prov["kv_dtype"] == "bfloat16"
    assert prov["bandwidth_kind"] == "spec"
    assert "not a measurement" in prov["bandwidth_note"]
    assert profile.transfer_path == prov["transfer_path"] == "nvlink"
    assert profile.p2p_bandwidth_GBps == _spec("h100_sxm")["node"]["intra_node_bw"] / 1e9


def test_json_round_trip_and_determinism(profile: ProfileResult, tmp_path: Path) -> None:
    path = save_profile_json(profile, tmp_path / "profile.json")
    assert load_profile(path) == profile_from_json_dict(profile.to_json_dict())
    again = profile_from_aiconfigurator(**QWEN3_8B, grids=GRIDS)
    assert json.dumps(again.to_json_dict()) == json.dumps(profile.to_json_dict())


@pytest.mark.parametrize(
    ("transfer", "spec_key"), [("network", "inter_node_bw"), ("pcie", "pcie_bw"), ("nvlink", "intra_node_bw")]
)
@pytest.mark.parametrize(("system", "tp_size"), [("h200_sxm", 1), ("h100_sxm", 2)])
def test_bandwidth_is_the_spec_figure_per_gpu_times_tp(
    transfer: str, spec_key: str, system: str, tp_size: int
) -> None:
    p = profile_from_aiconfigurator(
        **{**QWEN3_8B, "system": system}, transfer=transfer, tp_size=tp_size, grids=SMALL
    )
    per_gpu = _spec(system)["node"][spec_key] / 1e9
    assert p.p2p_bandwidth_GBps == per_gpu * tp_size
    assert p.provenance["bandwidth_GBps_per_gpu"] == per_gpu
    assert p.transfer_path == transfer
    assert p.bytes_per_token == 147456  # the whole model's KV per token, whatever the TP


def test_tensor_parallel_steps_are_faster() -> None:
    tp1 = profile_from_aiconfigurator(**QWEN3_8B, grids=SMALL)
    tp2 = profile_from_aiconfigurator(**QWEN3_8B, tp_size=2, grids=SMALL)
    assert tp2.T_prefill[512] < tp1.T_prefill[512]
    assert tp2.provenance["hardware"] == "h100_sxm tp2"


def test_points_out_of_memory_are_left_out_and_listed() -> None:
    grids = ProfileGrids(
        prompt_lens=(128, 512), kv_lens=(2048,), batch_sizes=(1, 512), chunk_sizes=(64,), decode_batches=(4,)
    )
    p = profile_from_aiconfigurator(**QWEN3_8B, grids=grids)
    # 2048 tokens x 512 sequences x 147456 bytes = 155 GB of KV cache: no 80 GB H100 holds it.
    assert set(p.T_decode) == {(2048, 1)}
    assert p.provenance["omitted_points"] == ["decode/2048x512: out of GPU memory"]


def test_a_model_too_large_for_the_gpu_is_refused_in_one_short_line() -> None:
    # Qwen3-32B in bf16 is 64 GB of weights: no point fits on one 48 GB L40S.
    with pytest.raises(UnsupportedSource) as exc:
        profile_from_aiconfigurator(**{**QWEN3_8B, "model": "Qwen/Qwen3-32B", "system": "l40s"}, grids=SMALL)
    message = _one_line(exc)
    assert message.startswith("T_prefill: every grid point is out of GPU memory for Qwen/Qwen3-32B on l40s")
    assert "--tp" in message and len(message) < 250


def _one_line(exc: pytest.ExceptionInfo[UnsupportedSource]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("override", "named", "listed"),
    [
        ({"system": "h100_pcie"}, "h100_pcie", ["h100_sxm", "h200_sxm", "b200_sxm"]),
        ({"backend": "tensorrt"}, "tensorrt", ["vllm", "sglang", "trtllm"]),
        ({"backend_version": "0.1.0"}, "0.1.0", ["0.24.0 (current)"]),
        ({"model": "deepseek-ai/DeepSeek-V3"}, "DeepSeek-V3", ["Qwen/Qwen3-8B", "Qwen/Qwen3-32B"]),
        (
            {"model": "acme/never-released"},
            "never-released",
            ["Qwen/Qwen3-8B", "meta-llama/Meta-Llama-3.1-8B"],
        ),
        ({"transfer": "infiniband"}, "infiniband", ["nvlink", "pcie", "network"]),
        ({"tp_size": 3}, "tp size 3", ["1, 2, 4, 8"]),
    ],
)
def test_unsupported_combinations_name_what_is_supported(
    override: dict[str, Any], named: str, listed: list[str]
) -> None:
    kwargs: dict[str, Any] = {**QWEN3_8B, "grids": SMALL, **override}
    with pytest.raises(UnsupportedSource) as exc:
        profile_from_aiconfigurator(**kwargs)
    message = _one_line(exc)
    assert named in message
    for item in listed:
        assert item in message


def test_fitted_params_load_and_serve(profile: ProfileResult, tmp_path: Path) -> None:
    params, _ = fit_profile(profile)
    path = save_params(params, tmp_path / "params.json")
    loaded = load_params(path)
    assert loaded == params
    assert loaded.metadata.source == "aiconfigurator"
    assert loaded.metadata.hardware == "h100_sxm"
    assert loaded.bytes_per_token == profile.bytes_per_token
    decision, t_c, t_d = AnalyticalCostModel(loaded).route(1024, 200, 8)
    assert decision in ("collocated", "disaggregated") and t_c > 0 and t_d > 0
    app = create_app(Settings(params_path=path, watch_params=False), registry=CollectorRegistry())
    assert app.state.store.current.params_id == params.params_id


def test_embedded_default_is_qwen3_8b_on_h100_vllm_nvlink() -> None:
    path = embedded_params_path()
    assert path == ROOT / "solver" / "data" / "params" / "default.json"
    params = load_params(path)
    meta = params.metadata
    assert (meta.model, meta.hardware, meta.transfer_path, meta.source) == (
        "Qwen/Qwen3-8B",
        "h100_sxm",
        "nvlink",
        "aiconfigurator",
    )
    assert meta.extra["profile_provenance"]["backend"] == "vllm"
    assert params.bytes_per_token == 147456
    shipped_profile = load_profile(ROOT / "solver" / "data" / "profiles" / "default.json")
    assert shipped_profile.provenance["generated_by"].startswith(
        "pdroute profile --source aiconfigurator --model Qwen/Qwen3-8B --system h100_sxm --backend vllm"
    )


def test_the_cli_source_never_imports_torch(tmp_path: Path) -> None:
    # A fresh interpreter, so modules other tests loaded do not count.
    out = tmp_path / "p.json"
    argv = ["profile", "--source", "aiconfigurator", "--model", "Qwen/Qwen3-8B", "--system", "h100_sxm"]
    argv += ["--prompt-lens", "128", "--kv-lens", "512", "--batch-sizes", "1", "--chunk-sizes", "64"]
    argv += ["--decode-batches", "4", "-o", str(out)]
    code = (
        "import json, sys\n"
        "from app.cli.main import main\n"
        f"code = main({argv!r})\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print(json.dumps({'code': code, 'heavy': heavy}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}
    assert load_profile(out).provenance["source"] == "aiconfigurator"


def test_default_params_regenerate_from_the_documented_command(tmp_path: Path) -> None:
    env = {**os.environ, "PDROUTE": f"{sys.executable} -m app"}
    script = ROOT / "scripts" / "make-default-params.sh"
    args = ["bash", str(script), "--out", str(tmp_path), "--only", "default", "--no-plots"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rels = (
        "solver/data/params/default.json",
        "solver/data/profiles/default.json",
        "deploy/kubernetes/base/params.json",  # the kustomize base's copy of the default
    )
    for rel in rels:
        shipped, regenerated = ROOT / rel, tmp_path / rel
        assert regenerated.read_text() == shipped.read_text(), rel
    shipped_params = load_params(ROOT / "solver/data/params/default.json")
    assert load_params(tmp_path / "solver/data/params/default.json") == shipped_params
    # The fit report beside it comes out the same too.
    report = "solver/data/params/default.fit_report.json"
    assert json.loads((tmp_path / report).read_text()) == json.loads((ROOT / report).read_text())


CHUNK_GRIDS = dataclasses.replace(SMALL, chunk_sizes=(64, 512), prefix_lens=(2048, 16384, 32256))


@pytest.fixture(scope="module")
def chunked() -> ProfileResult:
    return profile_from_aiconfigurator(**QWEN3_8B, backend_version="0.24.0", grids=CHUNK_GRIDS)


def test_chunk_prefix_covers_every_prefix_and_chunk(chunked: ProfileResult) -> None:
    assert set(chunked.T_chunk_prefix) == set(itertools.product((2048, 16384, 32256), (64, 512)))
    assert chunked.samples["chunk_prefix/2048x512"] == [chunked.T_chunk_prefix[(2048, 512)]]
    assert chunked.grids["prefix_lens"] == [2048, 16384, 32256]
    assert "--prefix-lens 2048,16384,32256" in chunked.provenance["generated_by"]


def test_chunk_prefix_is_the_context_step_over_a_cached_prefix(chunked: ProfileResult) -> None:
    # The figures the database gives Qwen3-8B on h100_sxm, vLLM 0.24.0, for a 512-token chunk:
    # 12.9 ms with nothing cached (T_prefill[512]), rising with the prefix it attends over.
    t = chunked.T_chunk_prefix
    assert chunked.T_prefill[512] == pytest.approx(12.9, abs=0.05)
    assert t[(2048, 512)] == pytest.approx(13.8, abs=0.05)
    assert t[(16384, 512)] == pytest.approx(19.7, abs=0.05)
    assert t[(32256, 512)] == pytest.approx(27.2, abs=0.05)
    for chunk in (64, 512):
        row = [t[(p, chunk)] for p in (2048, 16384, 32256)]
        assert row == sorted(row), chunk
    # A pass over a 32k prefix costs far less than a fresh prefill of the whole context.
    assert t[(32256, 512)] < chunked.T_prefill[512] * 3


def test_chunk_prefix_is_not_estimated_without_prefix_lens(profile: ProfileResult) -> None:
    assert profile.T_chunk_prefix == {}
    assert "prefix_lens" not in profile.grids and "T_chunk_prefix" not in profile.to_json_dict()
    assert "--prefix-lens" not in profile.provenance["generated_by"]


def test_a_chunk_past_the_models_context_is_refused() -> None:
    # Qwen3 has 40,960 positions: a 512-token chunk over 40,449 cached tokens needs 40,961.
    grids = dataclasses.replace(SMALL, chunk_sizes=(512,), prefix_lens=(40449,))
    with pytest.raises(InvalidProfile, match=r"grids\.prefix_lens: a point needs 40961 positions .* 40960"):
        profile_from_aiconfigurator(**QWEN3_8B, grids=grids)
    with pytest.raises(InvalidProfile, match=r"grids\.prompt_lens"):
        profile_from_aiconfigurator(**QWEN3_8B, grids=dataclasses.replace(SMALL, prompt_lens=(40961,)))
    longest = dataclasses.replace(SMALL, chunk_sizes=(512,), prefix_lens=(40448,), prompt_lens=(40960,))
    assert (40448, 512) in profile_from_aiconfigurator(**QWEN3_8B, grids=longest).T_chunk_prefix


def test_chunk_prefix_points_out_of_memory_are_left_out_and_listed() -> None:
    # Qwen3-32B's 64 GB of weights leave an 80 GB H100 too little for the activations of a
    # 32,768-token chunk; a 64-token one over the same prefix fits.
    grids = dataclasses.replace(SMALL, chunk_sizes=(64, 32768), prefix_lens=(1024,))
    p = profile_from_aiconfigurator(**{**QWEN3_8B, "model": "Qwen/Qwen3-32B"}, grids=grids)
    assert set(p.T_chunk_prefix) == {(1024, 64)}
    assert p.provenance["omitted_points"] == ["chunk_prefix/1024x32768: out of GPU memory"]


@pytest.mark.parametrize(
    ("model", "system", "tp_size"),
    [("Qwen/Qwen3-8B", "h100_sxm", 1), ("Qwen/Qwen3-8B", "h200_sxm", 1), ("Qwen/Qwen3-32B", "h100_sxm", 2)],
)
def test_kv_capacity_is_memory_times_the_engines_fraction_less_non_kv_over_bytes_per_token(
    model: str, system: str, tp_size: int
) -> None:
    request = {**QWEN3_8B, "model": model, "system": system, "backend_version": "0.24.0"}
    p = profile_from_aiconfigurator(**request, tp_size=tp_size, grids=SMALL)
    derivation = p.provenance["kv_capacity"]
    memory = _spec(system)["gpu"]["mem_capacity"]
    assert derivation["gpu_memory_bytes"] == memory
    assert derivation["memory_fraction"] == 0.92  # vLLM's gpu_memory_utilization since 0.22
    non_kv = sum(derivation["non_kv_bytes_per_gpu"].values())
    weights = derivation["non_kv_bytes_per_gpu"]["weights_bytes"]
    # bf16 weights: about 2 bytes per parameter, split over the tp GPUs (8.2B and 32.8B params).
    params_b = {"Qwen/Qwen3-8B": 8.2e9, "Qwen/Qwen3-32B": 32.8e9}[model]
    assert weights == pytest.approx(2 * params_b / tp_size, rel=0.05)
    # Each GPU holds its 1/tp share of every token's KV heads: the per-GPU tokens are the instance's.
    assert derivation["kv_bytes_per_token_per_gpu"] * tp_size == p.bytes_per_token
    expected = int((memory * 0.92 - non_kv) // (p.bytes_per_token // tp_size))
    assert p.kv_capacity_tokens is not None and abs(p.kv_capacity_tokens - expected) <= 1
    again = profile_from_json_dict(json.loads(json.dumps(p.to_json_dict())))
    assert again.kv_capacity_tokens == p.kv_capacity_tokens


def test_kv_capacity_grows_with_the_gpus_memory() -> None:
    h100 = profile_from_aiconfigurator(**QWEN3_8B, backend_version="0.24.0", grids=SMALL)
    h200_request = {**QWEN3_8B, "system": "h200_sxm", "backend_version": "0.24.0"}
    h200 = profile_from_aiconfigurator(**h200_request, grids=SMALL)
    assert h100.kv_capacity_tokens is not None and h200.kv_capacity_tokens is not None
    # The same non-KV memory on both: the extra 61 GB of the H200 (times 0.92) is all KV cache.
    extra = (_spec("h200_sxm")["gpu"]["mem_capacity"] - _spec("h100_sxm")["gpu"]["mem_capacity"]) * 0.92
    assert h200.kv_capacity_tokens - h100.kv_capacity_tokens == pytest.approx(extra / 147456, abs=2)
