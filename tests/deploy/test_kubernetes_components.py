"""The opt-in kustomize Components (deploy/kubernetes/components/): each, added to an overlay,
renders and validates like the overlays, keeps the pods locked down, and configures what the
service reads: the engines file and the scraper's egress (autofill), calibration (calibration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from app.engines.config import fleet_from
from app.settings import Settings
from tests.deploy import test_kubernetes as overlay_checks
from tests.deploy.conftest import KUBERNETES, compose, find, load_yaml
from tests.deploy.test_kubernetes import check_ingress_from_gateway_and_prometheus_only, pod_spec, rendered

AUTOFILL = "kubernetes/components/autofill"
CALIBRATION = "kubernetes/components/calibration"
# (overlay, components) pairs an operator would build.
VARIANTS = {
    "production+autofill": ("kubernetes/overlays/production", (AUTOFILL,)),
    "production+calibration": ("kubernetes/overlays/production", (CALIBRATION,)),
    "production+both": ("kubernetes/overlays/production", (AUTOFILL, CALIBRATION)),
    "dev+autofill": ("kubernetes/overlays/dev", (AUTOFILL,)),
}


@pytest.fixture(scope="module")
def overlays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each variant as a kustomization path that ``rendered`` accepts."""
    root = tmp_path_factory.mktemp("overlays")
    return {name: compose(root / name, (base,), comps) for name, (base, comps) in VARIANTS.items()}


def container_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    (container,) = pod_spec(find(objects, "Deployment", "pdroute"))["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.mark.parametrize("component", [AUTOFILL, CALIBRATION])
def test_components_are_components(component: str) -> None:
    # A Component is only ever added to an overlay: applied alone it would do nothing.
    assert load_yaml(KUBERNETES.parent / component / "kustomization.yaml")["kind"] == "Component"


@pytest.mark.parametrize("variant", VARIANTS)
def test_overlay_with_components_renders_validates_and_stays_locked_down(
    variant: str, overlays: dict[str, str]
) -> None:
    path = overlays[variant]
    # The overlays' own checks, on the overlay with the components added.
    overlay_checks.test_renders_and_validates(path)
    overlay_checks.test_pods_are_locked_down(path)
    overlay_checks.test_probes_ports_and_service(path)
    overlay_checks.test_params_configmap_is_mounted_where_the_service_reads_it(path)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_pdroute_env_var_is_a_setting(variant: str, overlays: dict[str, str]) -> None:
    # pydantic-settings ignores unknown PDROUTE_* variables: a misspelt one would silently do nothing.
    env = container_env(rendered(overlays[variant]))
    unknown = {n for n in env if n.startswith("PDROUTE_")} - {
        "PDROUTE_" + f.upper() for f in Settings.model_fields
    }
    assert unknown == set()
    settings = Settings.model_validate({k.removeprefix("PDROUTE_").lower(): v for k, v in env.items()})
    assert settings.calibration_enabled is (CALIBRATION in VARIANTS[variant][1])
    assert (settings.engines_file is not None) is (AUTOFILL in VARIANTS[variant][1])


def engines_files(objects: list[dict[str, Any]]) -> dict[str, str]:
    return dict(find(objects, "ConfigMap", "pdroute-engines")["data"])


def test_autofill_mounts_the_engines_file_where_the_service_reads_it(overlays: dict[str, str]) -> None:
    objects = rendered(overlays["production+autofill"])
    spec = pod_spec(find(objects, "Deployment", "pdroute"))
    (container,) = spec["containers"]
    engines_path = container_env(objects)["PDROUTE_ENGINES_FILE"]
    (mount,) = [m for m in container["volumeMounts"] if engines_path.startswith(m["mountPath"] + "/")]
    # A directory mount, read-only: subPath mounts never see updates, so no reload would happen.
    assert "subPath" not in mount and mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    # The exact name (no hash suffix): an update changes the file in place, the service reloads it.
    assert volume["configMap"]["name"] == "pdroute-engines"
    files = engines_files(objects)
    key = engines_path.removeprefix(mount["mountPath"] + "/")
    assert key in files
    # Every shipped example is a valid fleet, the way the service loads it.
    for name, text in files.items():
        fleet = fleet_from(yaml.safe_load(text), name)
        assert fleet.pools["prefill"] and fleet.pools["decode"], name
    assert {e.kind for e in fleet_from(yaml.safe_load(files[key])).endpoints.values()} == {"vllm"}
    assert any("kind: sglang" in text for text in files.values())


def test_autofill_egress_reaches_the_engines_metrics_ports_and_dns_only(overlays: dict[str, str]) -> None:
    objects = rendered(overlays["production+autofill"])
    # Ingress is untouched: still the gateway and Prometheus only.
    policy = check_ingress_from_gateway_and_prometheus_only(objects)
    base_policy = find(rendered("kubernetes/overlays/production"), "NetworkPolicy", "pdroute")
    assert policy["spec"]["ingress"] == base_policy["spec"]["ingress"]
    egress = policy["spec"]["egress"]
    # Every rule names its peers and ports: nothing opens egress to everywhere or on every port.
    for rule in egress:
        assert rule.get("to") and rule.get("ports"), rule
        for peer in rule["to"]:
            assert "ipBlock" not in peer, "egress by pod and namespace selectors only"
            assert peer["podSelector"]["matchLabels"] and peer["namespaceSelector"]["matchLabels"], peer
    allowed = {(p["protocol"], p["port"]) for rule in egress for p in rule["ports"]}
    # DNS, both protocols (large answers fall back to TCP).
    assert {("UDP", 53), ("TCP", 53)} <= allowed
    # Every metrics port of every shipped engines file.
    urls = [
        e.url
        for name, text in engines_files(objects).items()
        for e in fleet_from(yaml.safe_load(text), name).endpoints.values()
    ]
    ports = {urlsplit(u).port or {"http": 80, "https": 443}[urlsplit(u).scheme] for u in urls}
    assert ports and {("TCP", p) for p in ports} <= allowed
    assert allowed == {("UDP", 53), ("TCP", 53)} | {("TCP", p) for p in ports}, "egress beyond the engines"


def test_calibration_changes_nothing_but_the_setting(overlays: dict[str, str]) -> None:
    plain = rendered("kubernetes/overlays/production")
    calibrated = rendered(overlays["production+calibration"])
    assert container_env(calibrated) == {**container_env(plain), "PDROUTE_CALIBRATION_ENABLED": "true"}
    # No egress: feedback comes in over the service port, the router still calls nothing.
    assert find(calibrated, "NetworkPolicy", "pdroute")["spec"]["egress"] == []
    assert {(o["kind"], o["metadata"]["name"]) for o in calibrated} == {
        (o["kind"], o["metadata"]["name"]) for o in plain
    }


def test_components_are_off_in_the_shipped_overlays() -> None:
    # Opt-in: the engines file must name the operator's fleet before auto-fill can run.
    for overlay in ("kubernetes/overlays/dev", "kubernetes/overlays/production"):
        env = container_env(rendered(overlay))
        assert "PDROUTE_ENGINES_FILE" not in env and "PDROUTE_CALIBRATION_ENABLED" not in env
        assert not [o for o in rendered(overlay) if o["metadata"]["name"] == "pdroute-engines"]


def test_compose_writes_relative_paths(tmp_path: Path) -> None:
    path = compose(tmp_path / "o", ("kubernetes/base",), (AUTOFILL,))
    doc = load_yaml(Path(path) / "kustomization.yaml")
    assert not any(p.startswith("/") for p in doc["resources"] + doc["components"])
    assert find(rendered(path), "ConfigMap", "pdroute-engines")
