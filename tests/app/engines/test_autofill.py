"""Which fields a snapshot fills for which targets, and staleness (pure, injected times)."""

from __future__ import annotations

from app.engines.autofill import FleetSnapshot, Reading, Targets, fill, target_errors
from app.engines.config import fleet_from
from app.engines.request_fill import CAPS
from app.engines.sample import EngineSample

FLEET = fleet_from(
    {
        "pools": {
            "prefill": [
                {"id": "p0", "url": "http://h:1/m", "kind": "sglang"},
                {"id": "p1", "url": "http://h:2/m", "kind": "sglang"},
            ],
            "decode": [{"id": "d0", "url": "http://h:3/m", "kind": "sglang"}],
            "mixed": [{"id": "m0", "url": "http://h:4/m", "kind": "vllm"}],
        }
    }
)
P0 = EngineSample(running=2.0, waiting=3.0)
P1 = EngineSample(running=1.0, waiting=4.0)
D0 = EngineSample(running=10.0, decode_incoming=2.0, kv_used_tokens=5000.4)
M0 = EngineSample(running=6.0, waiting=1.0, kv_used_tokens=800.0)


def snapshot(taken: dict[str, float]) -> FleetSnapshot:
    samples = {"p0": P0, "p1": P1, "d0": D0, "m0": M0}
    return FleetSnapshot(FLEET, {i: Reading(samples[i], t) for i, t in taken.items()})


def values(out: dict[str, tuple[int, dict[str, object]]]) -> dict[str, int]:
    return {k: v for k, (v, _) in out.items()}


def test_a_mixed_decode_target_is_also_the_collocation_gpu() -> None:
    out = fill(snapshot(dict.fromkeys(("p0", "p1", "m0"), 10.0)), Targets(decode="m0"), 10.5, 2.0, CAPS)
    assert values(out) == {
        "decode_batch_size": 6,
        "decode_context_tokens": 800,
        "system_load": 6,
        "colloc_context_tokens": 800,
        "prefill_queue_requests": 7,
        "prefill_running_requests": 3,
        "prefill_pool_gpus": 2,
    }
    assert out["system_load"][1] == {"source": "scrape", "endpoint": "m0", "age_ms": 500.0}
    assert out["prefill_pool_gpus"][1]["endpoint"] == "pool:prefill"


def test_a_decode_pool_target_counts_incoming_decodes_and_collocates_only_where_named() -> None:
    snap = snapshot(dict.fromkeys(("d0", "m0"), 0.0))
    out = values(fill(snap, Targets(decode="d0"), 0.0, 2.0, CAPS))
    assert out == {"decode_batch_size": 12, "decode_context_tokens": 5000}
    out = values(fill(snap, Targets(decode="d0", colloc="m0"), 0.0, 2.0, CAPS))
    assert out["system_load"] == 6


def test_stale_readings_are_never_used() -> None:
    snap = snapshot({"p0": 0.0, "p1": 9.0, "m0": 0.0})
    out = fill(snap, Targets(decode="m0"), 10.0, 2.0, CAPS)
    # m0 and p0 are 10 s old: only p1 is fresh, and the pool is what is fresh.
    assert values(out) == {"prefill_queue_requests": 4, "prefill_running_requests": 1, "prefill_pool_gpus": 1}
    assert out["prefill_pool_gpus"][1]["age_ms"] == 1000.0


def test_a_named_prefill_target_is_its_own_queue() -> None:
    out = values(fill(snapshot({"p1": 0.0}), Targets(prefill="p1"), 0.0, 2.0, CAPS))
    assert out == {"prefill_queue_requests": 4, "prefill_running_requests": 1, "prefill_pool_gpus": 1}


def test_target_errors_name_the_field_and_the_id() -> None:
    assert target_errors(FLEET, Targets(decode="m0", colloc="d0", prefill="p0")) == []
    assert target_errors(FLEET, Targets(decode="zz")) == [("decode_target", "zz", "unknown endpoint 'zz'")]
    [(field, endpoint, why)] = target_errors(FLEET, Targets(prefill="d0"))
    assert (field, endpoint) == ("prefill_target", "d0") and "pool decode" in why
    [(field, _, why)] = target_errors(None, Targets(decode="m0"))
    assert field == "decode_target" and "PDROUTE_ENGINES_FILE" in why
