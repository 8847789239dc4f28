"""Which fields a snapshot fills for which targets, and staleness (pure, injected times)."""

from __future__ import annotations

from app.engines.autofill import (
    Filled,
    FleetSnapshot,
    Reading,
    Targets,
    cached_fill,
    fill,
    target_errors,
    with_rate,
)
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


def values(out: Filled) -> dict[str, float]:
    return out.values


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
    sources = out.sources(10.5)
    assert sources["system_load"] == {"source": "scrape", "endpoint": "m0", "age_ms": 500.0}
    assert sources["prefill_pool_gpus"]["endpoint"] == "pool:prefill"
    assert set(sources) == set(out.values)


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
    assert out.sources(10.0)["prefill_pool_gpus"]["age_ms"] == 1000.0
    assert out.valid_until == 11.0  # p1 (taken at 9) goes stale after 11


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


def test_cached_fill_holds_while_every_reading_used_is_fresh() -> None:
    snap = snapshot({"p0": 0.0, "p1": 1.0, "m0": 0.5})
    first = cached_fill(snap, Targets(decode="m0"), 1.0, 2.0, CAPS)
    assert cached_fill(snap, Targets(decode="m0"), 2.0, 2.0, CAPS) is first  # p0 fresh until 2.0
    later = cached_fill(snap, Targets(decode="m0"), 2.2, 2.0, CAPS)  # p0 now stale: recomputed
    assert later is not first
    assert later.values["prefill_pool_gpus"] == 1 and later.values["system_load"] == 6
    assert (
        cached_fill(snap, Targets(decode="m0"), 2.9, 2.0, CAPS).values
        == fill(snap, Targets(decode="m0"), 2.9, 2.0, CAPS).values
    )
    gone = cached_fill(snap, Targets(decode="m0"), 3.6, 2.0, CAPS)
    assert gone.values == {}  # everything stale


def counted(tokens: float | None, at: float) -> Reading:
    return Reading(EngineSample(running=1.0, prompt_tokens_total=tokens), at)


def test_the_rate_is_the_counter_increase_over_the_time_between_readings() -> None:
    first = with_rate(counted(10_000.0, 50.0), None, 2.0)
    assert first.prefill_tokens_per_s is None  # first reading: nothing to compare with
    second = with_rate(counted(13_000.0, 50.25), first, 2.0)
    assert second.prefill_tokens_per_s == 3000.0 / 0.25
    idle = with_rate(counted(13_000.0, 50.5), second, 2.0)
    assert idle.prefill_tokens_per_s == 0.0  # an idle GPU prefills nothing: a known zero
    assert idle.sample == second.sample and idle.taken_at == 50.5  # the reading itself unchanged


def test_a_reset_a_stale_previous_or_a_missing_counter_gives_no_rate() -> None:
    before = counted(13_000.0, 50.0)
    assert with_rate(counted(200.0, 50.5), before, 2.0).prefill_tokens_per_s is None  # engine restarted
    assert with_rate(counted(20_000.0, 52.5), before, 2.0).prefill_tokens_per_s is None  # 2.5 s > 2 s
    assert with_rate(counted(20_000.0, 52.0), before, 2.0).prefill_tokens_per_s == 3500.0  # 2 s: fresh
    assert with_rate(counted(None, 50.5), before, 2.0).prefill_tokens_per_s is None
    assert with_rate(counted(20_000.0, 50.5), counted(None, 50.0), 2.0).prefill_tokens_per_s is None
    assert with_rate(counted(20_000.0, 50.0), before, 2.0).prefill_tokens_per_s is None  # no time between


def test_rates_feed_the_collocation_and_decode_fields_and_age_out() -> None:
    decode = with_rate(counted(900.0, 9.5), counted(400.0, 9.0), 2.0)
    colloc = with_rate(counted(2500.0, 10.0), counted(2000.0, 9.75), 2.0)
    snap = FleetSnapshot(FLEET, {"d0": decode, "m0": colloc})
    out = fill(snap, Targets(decode="d0", colloc="m0"), 10.5, 2.0, CAPS)
    assert out.values["decode_prefill_tokens_per_s"] == 1000.0
    assert out.values["colloc_prefill_tokens_per_s"] == 2000.0
    sources = out.sources(10.5)
    assert sources["decode_prefill_tokens_per_s"] == {"source": "scrape", "endpoint": "d0", "age_ms": 1000.0}
    assert sources["colloc_prefill_tokens_per_s"]["endpoint"] == "m0"
    # A mixed decode target is its own collocation GPU: one rate feeds both.
    mixed = fill(snap, Targets(decode="m0"), 10.5, 2.0, CAPS).values
    assert mixed["decode_prefill_tokens_per_s"] == mixed["colloc_prefill_tokens_per_s"] == 2000.0
    # Once the decode reading is stale its rate is missing, like its other fields.
    later = fill(snap, Targets(decode="d0", colloc="m0"), 11.75, 2.0, CAPS).values
    assert "decode_prefill_tokens_per_s" not in later and later["colloc_prefill_tokens_per_s"] == 2000.0


def test_a_rate_is_kept_as_measured_and_capped() -> None:
    fast = with_rate(counted(1e12, 1.0), counted(0.0, 0.5), 2.0)
    slow = with_rate(counted(0.4, 1.0), counted(0.0, 0.5), 2.0)
    assert (
        fill(FleetSnapshot(FLEET, {"m0": fast}), Targets(decode="m0"), 1.0, 2.0, CAPS).values[
            "colloc_prefill_tokens_per_s"
        ]
        == CAPS["colloc_prefill_tokens_per_s"]
    )
    assert (
        fill(FleetSnapshot(FLEET, {"m0": slow}), Targets(decode="m0"), 1.0, 2.0, CAPS).values[
            "colloc_prefill_tokens_per_s"
        ]
        == 0.8  # not rounded to a whole count
    )
