"""The dashboard's proxy row reads only series a live proxy exports."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.conftest import DASHBOARD
from tests.deploy.promql import dashboard_expressions, metric_names
from tests.pdroute_proxy.conftest import start_proxy
from tests.pdroute_proxy.fake_engine import FakeEngine, Faults
from tests.pdroute_proxy.test_paths import prompt_of, stream_tokens


def test_every_proxy_metric_of_the_dashboard_is_exported(tmp_path: Path) -> None:
    referenced = {
        where: {n for n in metric_names(expr) if n.startswith("pdroute_proxy_")}
        for where, expr in dashboard_expressions(DASHBOARD).items()
    }
    referenced = {where: names for where, names in referenced.items() if names}
    assert len(referenced) >= 5  # the proxy row
    prefill, decode = FakeEngine("p0", faults=Faults(status=500)), FakeEngine("d0")
    proxy = start_proxy(tmp_path, [prefill], [decode], policy="disaggregated")
    try:
        stream_tokens(proxy, {"prompt": prompt_of(10), "max_tokens": 3})  # a fallback, an upstream error
        with proxy.client() as client:
            text = client.get("/metrics").text
    finally:
        proxy.stop()
        prefill.stop()
        decode.stop()
    exported = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    unknown = {where: names - exported for where, names in referenced.items() if names - exported}
    assert unknown == {}
