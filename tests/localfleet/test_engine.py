"""localfleet without engines: command lines by role, the engines file, the venv check, stopping a group."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from app.engines.config import load_fleet
from localfleet import HEAVY, TINY, EngineSpec, EnginesUnavailable, Fleet, engines_python, write_model
from localfleet.engine import Engine, command, default_dtype, environment
from localfleet.process import group_alive, spawn, stop_group


def _argv(spec: EngineSpec, kv_dir: Path | None = Path("/dev/shm/kv")) -> list[str]:
    return command(spec, Path("/venv/bin/python"), Path("/m/tiny"), 8001, kv_dir)


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_every_engine_is_pinned_and_given_its_kv_size() -> None:
    argv = _argv(EngineSpec("c0", TINY, core=1, kv_cache_bytes=12345, dtype="bfloat16"), None)
    assert argv[:3] == ["taskset", "-c", "1"]
    assert _flag(argv, "--kv-cache-memory-bytes") == "12345"
    assert _flag(argv, "--host") == "127.0.0.1"
    assert _flag(argv, "--dtype") == "bfloat16"
    assert "--kv-transfer-config" not in argv
    assert "--no-enable-chunked-prefill" not in argv


def test_prefill_and_decode_engines_share_the_connector_folder() -> None:
    prefill = _argv(EngineSpec("p0", TINY, core=0, role="prefill"))
    decode = _argv(EngineSpec("d0", TINY, core=1, role="decode", max_num_batched_tokens=512))
    for argv in (prefill, decode):
        config = json.loads(_flag(argv, "--kv-transfer-config"))
        assert config == {
            "kv_connector": "CompleteSavesConnector",
            "kv_connector_module_path": "localfleet_kv",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": "/dev/shm/kv"},
        }
    assert "--no-enable-chunked-prefill" in prefill
    assert int(_flag(prefill, "--max-num-batched-tokens")) >= TINY.max_position_embeddings
    assert "--no-enable-chunked-prefill" not in decode
    assert _flag(decode, "--max-num-batched-tokens") == "512"
    with pytest.raises(ValueError, match="shared KV folder"):
        _argv(EngineSpec("p0", TINY, core=0, role="prefill"), None)


def test_the_engines_find_the_connector_module() -> None:
    env = environment(EngineSpec("d0", TINY, core=1, role="decode"), {"PYTHONPATH": "/elsewhere"})
    first, rest = env["PYTHONPATH"].split(os.pathsep)
    assert rest == "/elsewhere"
    assert (Path(first) / "localfleet_kv.py").is_file()
    assert "class CompleteSavesConnector(ExampleConnector)" in (Path(first) / "localfleet_kv.py").read_text()


def test_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="role"):
        EngineSpec("x", TINY, core=0, role="mixed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="core"):
        EngineSpec("x", TINY, core=-1)


@pytest.mark.parametrize(("flags", "dtype"), [("avx2 avx512_bf16", "bfloat16"), ("avx2 fma", "float32")])
def test_dtype_follows_the_cpus_bf16_support(tmp_path: Path, flags: str, dtype: str) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor : 0\nflags : {flags}\n")
    assert default_dtype(cpuinfo) == dtype


def test_kv_bytes_per_token_follow_the_dtype() -> None:
    # K and V x 8 layers x 4 KV heads x 64 dims x 2 or 4 bytes.
    assert EngineSpec("h", HEAVY, core=0, dtype="bfloat16").kv_bytes_per_token == 8192
    assert EngineSpec("h", HEAVY, core=0, dtype="float32").kv_bytes_per_token == 16384


def test_model_folder_holds_the_config_only(tmp_path: Path) -> None:
    folder = write_model(HEAVY, tmp_path)
    assert [p.name for p in folder.iterdir()] == ["config.json"]
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (1024, 8, 4)


def test_the_engines_file_names_every_engine_in_its_pool(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, tmp_path / "kv")
    for name, role, port in (("p0", "prefill", 1), ("d0", "decode", 2), ("c0", "collocated", 3)):
        spec = EngineSpec(name, TINY, core=0, role=role)  # type: ignore[arg-type]
        fleet.engines[name] = Engine(spec, 9000 + port, 1, tmp_path / f"{name}.log")
    parsed = load_fleet(fleet.engines_file(tmp_path / "engines.json"))
    assert parsed.pools == {"prefill": ("p0",), "decode": ("d0",), "mixed": ("c0",)}
    assert parsed.endpoints["d0"].url == "http://127.0.0.1:9002/metrics"


def test_a_venv_without_vllm_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EnginesUnavailable, match="no engines venv at"):
        engines_python({"PDROUTE_ENGINES_VENV": str(tmp_path / "none")})
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)  # a python without vllm
    with pytest.raises(EnginesUnavailable, match="cannot import vllm") as info:
        engines_python({"PDROUTE_ENGINES_VENV": str(tmp_path)})
    assert "\n" not in str(info.value)


def test_stopping_a_group_stops_the_children_it_spawned(tmp_path: Path) -> None:
    # A leader that starts a child and ignores SIGTERM: the child must go too (SIGKILL after grace).
    script = "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    script += "subprocess.Popen(['sleep', '300']); time.sleep(300)"
    proc = spawn([sys.executable, "-c", script], {"PATH": "/usr/bin:/bin"}, tmp_path / "log")
    time.sleep(0.5)
    assert group_alive(proc.pid)
    stop_group(proc.pid, proc=proc, grace_s=0.5)
    assert not group_alive(proc.pid)
    assert proc.returncode is not None
