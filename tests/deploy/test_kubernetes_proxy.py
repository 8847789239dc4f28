"""The proxy's kustomize Component (deploy/kubernetes/components/proxy/): added to an overlay it
renders and validates, leaves the router as it was, locks its pods down, and configures what
the proxy reads (its settings, the params, the engines file) and the egress it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from app.engines.config import fleet_from
from pdroute_core.params import parse_params
from pdroute_proxy.app import create_proxy_app
from pdroute_proxy.settings import ProxySettings
from tests.deploy.conftest import DEPLOY, compose, find, load_yaml
from tests.deploy.test_kubernetes import K8S_VERSION, pod_spec, rendered

PROXY = "kubernetes/components/proxy"
OVERLAYS = ("kubernetes/overlays/production", "kubernetes/overlays/dev")


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    # As an operator adds it: in the overlay, whose namespace then covers the proxy's objects.
    root = tmp_path_factory.mktemp("proxy-overlays")
    out = {}
    for overlay in OVERLAYS:
        path = Path(compose(root / overlay.rsplit("/", 1)[1], (overlay,), (PROXY,)))
        doc = load_yaml(path / "kustomization.yaml")
        doc["namespace"] = load_yaml(DEPLOY / overlay / "kustomization.yaml")["namespace"]
        (path / "kustomization.yaml").write_text(yaml.safe_dump(doc))
        out[overlay] = rendered(str(path))
    return out


def proxy_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec(find(objects, "Deployment", "pdroute-proxy"))["containers"]
    (container,) = containers
    return container


def proxy_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in proxy_container(objects)["env"]}


def names(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renders_validates_and_leaves_the_router_as_it_was(
    overlay: str, variants: dict[str, list[dict[str, Any]]]
) -> None:
    objects = variants[overlay]
    for obj in objects:
        if obj["kind"] not in ("ServiceMonitor", "PrometheusRule"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    plain = rendered(overlay)
    added = names(objects) - names(plain)
    assert added == {
        ("Deployment", "pdroute-proxy"),
        ("Service", "pdroute-proxy"),
        ("PodDisruptionBudget", "pdroute-proxy"),
        ("NetworkPolicy", "pdroute-proxy"),
        ("ConfigMap", "pdroute-proxy-engines"),
    }
    mine = {("Deployment", "pdroute-proxy"), ("ConfigMap", "pdroute-proxy-engines")}
    assert [o for o in objects if (o["kind"], o["metadata"]["name"]) not in added] == plain
    # The overlay's namespace reaches the proxy's objects too.
    namespaces = {
        o["metadata"].get("namespace") for o in objects if (o["kind"], o["metadata"]["name"]) in mine
    }
    assert namespaces == {find(plain, "Deployment", "pdroute")["metadata"].get("namespace")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_proxys_pods_are_locked_down(overlay: str, variants: dict[str, list[dict[str, Any]]]) -> None:
    spec = pod_spec(find(variants[overlay], "Deployment", "pdroute-proxy"))
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    container = proxy_container(variants[overlay])
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert all({"cpu", "memory"} <= set(container["resources"][k]) for k in ("requests", "limits"))
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert all(m.get("readOnly") and "subPath" not in m for p, m in mounts.items() if p != "/tmp")


def test_every_setting_is_the_proxys_and_valid(variants: dict[str, list[dict[str, Any]]]) -> None:
    env = proxy_env(variants[OVERLAYS[0]])
    # pydantic-settings ignores unknown PDROUTE_* variables: a misspelt one would do nothing.
    known = {"PDROUTE_" + f.upper() for f in ProxySettings.model_fields}
    assert {n for n in env if n.startswith("PDROUTE_")} - known == set()
    settings = ProxySettings.model_validate({k.removeprefix("PDROUTE_").lower(): v for k, v in env.items()})
    assert settings.workers == 1  # the account of what was sent is per process
    container = proxy_container(variants[OVERLAYS[0]])
    assert container["args"][:1] == ["proxy"] and "0.0.0.0" in container["args"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": settings.port}


def test_the_probes_ask_an_endpoint_the_proxy_serves(
    variants: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objects = variants[OVERLAYS[0]]
    container = proxy_container(objects)
    paths = {container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    assert {container[p]["httpGet"]["port"] for p in ("readinessProbe", "livenessProbe")} == {"http"}
    engines = tmp_path / "engines.yaml"
    engines.write_text(find(objects, "ConfigMap", "pdroute-proxy-engines")["data"]["engines.yaml"])
    served = {getattr(r, "path", None) for r in create_proxy_app(ProxySettings(engines_file=engines)).routes}
    assert paths and paths <= served


def test_the_params_and_the_engines_file_are_mounted_where_the_proxy_reads_them(
    variants: dict[str, list[dict[str, Any]]],
) -> None:
    objects = variants[OVERLAYS[0]]
    spec = pod_spec(find(objects, "Deployment", "pdroute-proxy"))
    env = proxy_env(objects)

    def mounted(path: str) -> tuple[dict[str, Any], str]:
        mounts = proxy_container(objects)["volumeMounts"]
        (mount,) = [m for m in mounts if path.startswith(m["mountPath"] + "/")]
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        key = path.removeprefix(mount["mountPath"] + "/")
        return find(objects, "ConfigMap", volume["configMap"]["name"]), key

    params, key = mounted(env["PDROUTE_PARAMS_PATH"])
    # The router's params (the reprofile Job updates them): the proxy decides as the router does.
    assert params["metadata"]["name"] == "pdroute-params" and parse_params(params["data"][key]).params_id
    assert env["PDROUTE_WATCH_PARAMS"] == "true"
    engines, key = mounted(env["PDROUTE_ENGINES_FILE"])
    assert engines["metadata"]["name"] == "pdroute-proxy-engines"
    fleet = fleet_from(yaml.safe_load(engines["data"][key]), key)
    assert fleet.pools["prefill"] and fleet.pools["decode"]
    assert {e.kind for e in fleet.endpoints.values()} == {"vllm"}


def test_the_service_and_budget_select_the_proxy_only(variants: dict[str, list[dict[str, Any]]]) -> None:
    objects = variants[OVERLAYS[0]]
    proxy_labels = find(objects, "Deployment", "pdroute-proxy")["spec"]["template"]["metadata"]["labels"]
    router_labels = find(objects, "Deployment", "pdroute")["spec"]["template"]["metadata"]["labels"]
    for kind, name in (("Service", "pdroute-proxy"), ("PodDisruptionBudget", "pdroute-proxy")):
        obj = find(objects, kind, name)
        selector = obj["spec"]["selector"] if kind == "Service" else obj["spec"]["selector"]["matchLabels"]
        assert selector.items() <= proxy_labels.items() and not selector.items() <= router_labels.items()
    for kind in ("Service", "PodDisruptionBudget"):
        obj = find(objects, kind, "pdroute")
        selector = obj["spec"]["selector"] if kind == "Service" else obj["spec"]["selector"]["matchLabels"]
        assert not selector.items() <= proxy_labels.items(), f"the router's {kind} selects the proxy"
    service = find(objects, "Service", "pdroute-proxy")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8100, "http")]


def test_egress_reaches_the_engines_and_dns_only(variants: dict[str, list[dict[str, Any]]]) -> None:
    objects = variants[OVERLAYS[0]]
    policy = find(objects, "NetworkPolicy", "pdroute-proxy")
    labels = find(objects, "Deployment", "pdroute-proxy")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == ["http"]
    egress = policy["spec"]["egress"]
    for rule in egress:
        assert rule.get("to") and rule.get("ports"), rule
        for peer in rule["to"]:
            assert "ipBlock" not in peer and peer["podSelector"]["matchLabels"], peer
    allowed = {(p["protocol"], p["port"]) for rule in egress for p in rule["ports"]}
    engines = find(objects, "ConfigMap", "pdroute-proxy-engines")["data"]
    ports = {
        urlsplit(e.url).port or 80
        for key, text in engines.items()
        for e in fleet_from(yaml.safe_load(text), key).endpoints.values()
    }
    assert allowed == {("UDP", 53), ("TCP", 53)} | {("TCP", p) for p in ports}


def test_the_component_is_off_in_the_shipped_overlays() -> None:
    for overlay in OVERLAYS:
        assert ("Deployment", "pdroute-proxy") not in names(rendered(overlay))
    text = (Path(__file__).resolve().parents[2] / "deploy" / PROXY / "kustomization.yaml").read_text()
    assert yaml.safe_load(text)["kind"] == "Component"
