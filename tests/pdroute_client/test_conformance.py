"""The local tier replays every conformance vector from the file alone, as a port would: the
service configuration's params document and settings make the ``/params`` body it decides on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pdroute_client import RouteQuery, ServedParams
from pdroute_core.errors import InvalidParams

DOC: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "conformance" / "vectors-v1.json").read_text()
)
SERVICES = {s["id"]: s for s in DOC["services"]}


def served(service_id: str) -> ServedParams:
    s = SERVICES[service_id]
    params = DOC["params"][s["params"]]
    body = {**s, "params_id": params["params_id"], "params": params["document"]}
    return ServedParams.from_body(body)


@pytest.mark.parametrize("service_id", sorted(SERVICES))
def test_local_tier_replays_the_file(service_id: str) -> None:
    sp = served(service_id)
    vectors = [v for v in DOC["vectors"] if v["service"] == service_id]
    queries = [RouteQuery.from_mapping(v["request"]) for v in vectors]
    one_by_one = [sp.decide(q, "local: test") for q in queries]
    many = sp.decide_many(queries, "local: test")
    for v, a, b in zip(vectors, one_by_one, many, strict=True):
        e = v["expected"]
        assert (a.decision, a.reason) == (e["decision"], e["reason"]), v["id"]
        assert (a.t_collocated_ms, a.t_disaggregated_ms) == (e["t_collocated_ms"], e["t_disaggregated_ms"])
        assert a.meets_slo == e.get("meets_slo") and list(a.assumed) == e["assumed"]
        assert (a.predicted_lateness_ms, a.admission, a.objective) == (
            e.get("predicted_lateness_ms"),
            e.get("admission"),
            e.get("objective"),
        ), v["id"]
        assert dict(a.breakdown) == e["breakdown"]
        assert b == a  # the batch path gives the same answers


def test_a_damaged_params_document_is_refused() -> None:
    service_id = sorted(SERVICES)[0]
    s = SERVICES[service_id]
    params = DOC["params"][s["params"]]
    document = {**params["document"], "alpha": params["document"]["alpha"] * 2}
    with pytest.raises(InvalidParams, match="params hash to"):
        ServedParams.from_body({**s, "params_id": params["params_id"], "params": document})
