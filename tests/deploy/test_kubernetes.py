"""The Kubernetes manifests: every kustomization renders, every object validates against the
Kubernetes schemas offline, and the objects agree with each other and with the service."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from pdroute_core.params import parse_params
from tests.deploy.conftest import KUBERNETES, KUSTOMIZATIONS, find, render

# The schema version checked against; kubernetes-validate ships it (strict: unknown fields
# are errors, so a misspelt field cannot pass).
K8S_VERSION = "1.32.0"
# Custom resources (Prometheus Operator) have no schema in kubernetes-validate; their fields
# are checked in test_prometheus.py.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
OVERLAYS = ("kubernetes/base", "kubernetes/overlays/dev", "kubernetes/overlays/production")


@cache
def rendered(kustomization: str) -> list[dict[str, Any]]:
    return render(kustomization)


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_renders_and_validates(kustomization: str) -> None:
    objects = rendered(kustomization)
    assert objects
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{kustomization}: {name} is invalid at {path}: {exc.message}")


def test_validation_catches_a_misspelt_field() -> None:
    deployment = find(rendered("kubernetes/base"), "Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_pods_are_locked_down(kustomization: str) -> None:
    objects = rendered(kustomization)
    deployment = find(objects, "Deployment", "pdroute")
    spec = pod_spec(deployment)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    # A Service named pdroute would inject PDROUTE_PORT=tcp://..., which the settings read.
    assert spec["enableServiceLinks"] is False
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    # The only writable path is an emptyDir on /tmp.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert all(m.get("readOnly") for p, m in mounts.items() if p != "/tmp")


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_probes_ports_and_service(kustomization: str) -> None:
    objects = rendered(kustomization)
    deployment = find(objects, "Deployment", "pdroute")
    (container,) = pod_spec(deployment)["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert ports["http"] == int(env["PDROUTE_PORT"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["args"][:1] == ["serve"] and "0.0.0.0" in container["args"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    service = find(objects, "Service", "pdroute")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    pdb = find(objects, "PodDisruptionBudget", "pdroute")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_params_configmap_is_mounted_where_the_service_reads_it(kustomization: str) -> None:
    objects = rendered(kustomization)
    deployment = find(objects, "Deployment", "pdroute")
    spec = pod_spec(deployment)
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    params_path = env["PDROUTE_PARAMS_PATH"]
    assert env["PDROUTE_WATCH_PARAMS"] == "true"
    (mount,) = [m for m in container["volumeMounts"] if params_path.startswith(m["mountPath"] + "/")]
    # A directory mount: subPath mounts never see ConfigMap updates, so reloads would not happen.
    assert "subPath" not in mount
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    # The exact name: no hash suffix, so an update changes the mounted file in place.
    cm = find(objects, "ConfigMap", volume["configMap"]["name"])
    assert cm["metadata"]["name"] == "pdroute-params"
    key = params_path.removeprefix(mount["mountPath"] + "/")
    assert parse_params(cm["data"][key]).params_id  # the shipped params are valid
    assert cm["data"][key] == (KUBERNETES / "base" / "params.json").read_text()


def check_ingress_from_gateway_and_prometheus_only(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The router's NetworkPolicy, once its ingress is checked: the gateway and Prometheus only."""
    policy = find(objects, "NetworkPolicy", "pdroute")
    pod_labels = find(objects, "Deployment", "pdroute")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    (rule,) = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == ["http"]
    sources = rule["from"]
    assert len(sources) == 2
    assert all(s.get("podSelector", {}).get("matchLabels") for s in sources), "every peer is a pod selector"
    prometheus = [s for s in sources if "namespaceSelector" in s]
    assert len(prometheus) == 1
    assert prometheus[0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    return policy


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_network_policy_admits_gateway_and_prometheus_only(kustomization: str) -> None:
    policy = check_ingress_from_gateway_and_prometheus_only(rendered(kustomization))
    # Without the autofill component the router calls nothing: no egress at all.
    assert policy["spec"]["egress"] == []


def test_dev_has_one_replica_and_no_autoscaler() -> None:
    objects = rendered("kubernetes/overlays/dev")
    assert find(objects, "Deployment", "pdroute")["spec"]["replicas"] == 1
    assert not [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    assert not [o for o in objects if o["kind"] == "Job"]
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == {"pdroute-dev"}


def test_base_and_production_scale_horizontally() -> None:
    base = rendered("kubernetes/base")
    assert find(base, "Deployment", "pdroute")["spec"]["replicas"] >= 2
    assert find(base, "HorizontalPodAutoscaler", "pdroute")["spec"]["minReplicas"] >= 2
    prod = rendered("kubernetes/overlays/production")
    hpa = find(prod, "HorizontalPodAutoscaler", "pdroute")
    # The autoscaler owns the replica count in production.
    assert "replicas" not in find(prod, "Deployment", "pdroute")["spec"]
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "pdroute"}
    assert {o["metadata"].get("namespace") for o in prod if o["kind"] != "Namespace"} == {"pdroute"}


@pytest.mark.parametrize("kustomization", ["kubernetes/reprofile", "kubernetes/overlays/production"])
def test_reprofile_job_uses_two_gpus_and_may_only_patch_the_params(kustomization: str) -> None:
    objects = rendered(kustomization)
    job = find(objects, "Job", "pdroute-reprofile")
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    # The restricted Pod Security level of the production namespace.
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    configmap = env["PDROUTE_PUBLISH_CONFIGMAP"]
    assert configmap == "pdroute-params"  # the name the base's configMapGenerator produces

    account = spec["serviceAccountName"]
    binding = find(objects, "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": job["metadata"]["namespace"]}
    ]
    role = find(objects, "Role", binding["roleRef"]["name"])
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [configmap],
            "verbs": ["get", "patch"],
        }
    ]
    if kustomization.endswith("production"):
        # The service account of the router itself gets no API rights at all.
        assert [o for o in objects if o["kind"] == "RoleBinding"] == [binding]
        assert find(objects, "ConfigMap", configmap)


@pytest.mark.parametrize("kustomization", [*OVERLAYS, "kubernetes/reprofile"])
def test_every_image_is_set_by_kustomize(kustomization: str) -> None:
    for obj in rendered(kustomization):
        if obj["kind"] in ("Deployment", "Job"):
            for container in pod_spec(obj)["containers"]:
                # The bare placeholders (pdroute, pdroute-profiler) are replaced by `images:`.
                name, _, tag = container["image"].rpartition(":")
                assert "/" in name and tag, f"{obj['metadata']['name']}: image {container['image']}"


def test_base_params_are_the_embedded_default() -> None:
    # kustomize cannot read files outside its folder, so the base keeps a copy of the
    # embedded default; regenerate both together (scripts/make-default-params.sh).
    embedded = Path(__file__).resolve().parents[2] / "solver" / "data" / "params" / "default.json"
    assert (KUBERNETES / "base" / "params.json").read_bytes() == embedded.read_bytes()
