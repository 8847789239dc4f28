"""The tier choice without a network: the local tier's own failure falls to the static rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdroute_client import RouteQuery, ServedParams, StaticFallback
from pdroute_client.tiers import Tiers

DOC = json.loads((Path(__file__).resolve().parents[2] / "conformance" / "vectors-v1.json").read_text())


def _served() -> ServedParams:
    s = DOC["services"][0]
    p = DOC["params"][s["params"]]
    return ServedParams.from_body({**s, "params_id": p["params_id"], "params": p["document"]})


def test_a_local_model_failure_answers_statically(monkeypatch: pytest.MonkeyPatch) -> None:
    tiers = Tiers(StaticFallback(disaggregate_from_prompt_len=100), None, None, lambda: 0.0, lambda: None)
    tiers.served = _served()
    query = RouteQuery(prompt_len=500, system_load=3)
    assert tiers.fallback_answer(query, "service timeout").why == "local: service timeout"

    def refuse(*args: object) -> None:
        raise ZeroDivisionError("a bug in the model")

    monkeypatch.setattr(ServedParams, "decide", refuse)
    monkeypatch.setattr(ServedParams, "decide_many", refuse)
    answer = tiers.fallback_answer(query, "service timeout")
    assert (answer.tier, answer.why, answer.remote_cause) == (
        "static",
        "static: local model error",
        "service timeout",
    )
    assert (answer.decision, answer.reason) == ("disaggregated", "static_long_prompt")
    assert [a.why for a in tiers.fallback_answers([query, query], "breaker open")] == [
        "static: local model error"
    ] * 2


def test_no_params_answers_statically() -> None:
    tiers = Tiers(StaticFallback(), None, None, lambda: 0.0, lambda: None)
    answer = tiers.fallback_answer(RouteQuery(prompt_len=10**6, system_load=0), "service unreachable")
    assert (answer.tier, answer.decision, answer.why) == ("static", "collocated", "static: no params yet")
    assert answer.t_collocated_ms is None and answer.model is None


@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_a_bad_static_threshold_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="disaggregate_from_prompt_len"):
        StaticFallback(disaggregate_from_prompt_len=value)  # type: ignore[arg-type]  # bad values on purpose
