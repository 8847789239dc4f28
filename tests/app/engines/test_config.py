"""The engines file: strict validation, one clear line per problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engines.config import InvalidEngines, fleet_from, load_fleet

GOOD = """
pools:
  prefill:
    - {id: p0, url: "http://10.0.0.1:8000/metrics", kind: sglang}
  decode:
    - {id: d0, url: "http://10.0.0.2:8000/metrics", kind: vllm}
  mixed:
    - id: m0
      url: "https://10.0.0.3:8000/prometheus/metrics"
      kind: custom
      metrics:
        running: {name: my_running, labels: {phase: decode}}
        kv_used_tokens: {name: my_kv_tokens, scale: 2}
"""


def test_a_good_file_in_yaml(tmp_path: Path) -> None:
    path = tmp_path / "engines.yaml"
    path.write_text(GOOD)
    fleet = load_fleet(path)
    assert fleet.pools == {"prefill": ("p0",), "decode": ("d0",), "mixed": ("m0",)}
    assert fleet.endpoints["d0"].kind == "vllm"
    assert fleet.endpoints["m0"].custom == (
        ("kv_used_tokens", "my_kv_tokens", (), 2.0),
        ("running", "my_running", (("phase", "decode"),), 1.0),
    )
    assert fleet.in_pool("m0", "mixed") and not fleet.in_pool("m0", "decode")


def test_json_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "engines.json"
    path.write_text('{"pools": {"decode": [{"id": "d0", "url": "http://h:1/metrics", "kind": "trtllm"}]}}')
    assert list(load_fleet(path).endpoints) == ["d0"]


ENDPOINT = {"id": "d0", "url": "http://h:1/metrics", "kind": "vllm"}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"pools": {}}, "no endpoints"),
        ({"pools": {"decode": [ENDPOINT, ENDPOINT]}}, "appears twice"),
        ({"pools": {"decode": [{**ENDPOINT, "kind": "tgi"}]}}, "pools.decode.0.kind"),
        ({"pools": {"decode": [{**ENDPOINT, "url": "ftp://h/metrics"}]}}, "pools.decode.0.url"),
        ({"pools": {"decode": [{**ENDPOINT, "id": "has space"}]}}, "pools.decode.0.id"),
        ({"pools": {"decode": [{**ENDPOINT, "port": 1}]}}, "pools.decode.0.port"),
        ({"pools": {"gpus": [ENDPOINT]}}, "pools.gpus"),
        ({"pools": {"decode": [{**ENDPOINT, "kind": "custom"}]}}, "needs `metrics`"),
        (
            {"pools": {"decode": [{**ENDPOINT, "kind": "custom", "metrics": {"speed": {"name": "x"}}}]}},
            "unknown signal",
        ),
        ({"pools": {"decode": [{**ENDPOINT, "metrics": {"running": {"name": "x"}}}]}}, "custom only"),
        ([1, 2], "top level"),
    ],
)
def test_bad_fleets_are_refused_with_one_line(data: object, says: str) -> None:
    with pytest.raises(InvalidEngines) as info:
        fleet_from(data)
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_unreadable_or_not_yaml(tmp_path: Path) -> None:
    with pytest.raises(InvalidEngines, match="cannot read"):
        load_fleet(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [unclosed\n")
    with pytest.raises(InvalidEngines, match="not valid YAML or JSON") as info:
        load_fleet(bad)
    assert "\n" not in str(info.value)
