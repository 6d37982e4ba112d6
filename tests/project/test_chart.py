"""The Helm chart, through the real helm binary: it lints, renders valid objects, agrees with manifests/ on its
defaults, and its values.schema.json refuses bad values."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from celpy.adapter import json_to_cel

from tests.chart import CHART, NAMESPACE, RELEASE, ROOT, Doc, helm, normalised, render

ALL_ON = CHART / "ci" / "all-on-values.yaml"
KUBERNETES_VERSION = "1.33"

# Kinds kubernetes-validate has no schema for: checked by hand below instead.
CUSTOM_KINDS = {"ServiceMonitor"}


def render_error(values: Doc, tmp_path: Path) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(path))
    assert result.returncode != 0, f"helm rendered values it should refuse: {values}"
    return result.stderr


def by_kind(docs: Sequence[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def the(docs: Sequence[Doc], kind: str) -> Doc:
    (found,) = by_kind(docs, kind)
    return found


def manifests() -> list[Doc]:
    return [doc for path in sorted((ROOT / "manifests").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]






def keyed(docs: Sequence[Doc]) -> dict[tuple[str, str, str], Doc]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


# ----------------------------------------------------------------------------------------------------------------
# helm lint and the defaults


def test_helm_lint_strict_passes_on_defaults_and_with_everything_on() -> None:
    for extra in ([], ["--values", str(ALL_ON)]):
        result = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0 chart(s) failed" in result.stdout


def test_default_chart_renders_the_same_objects_as_manifests() -> None:
    """manifests/ is the chart on its defaults (release `queuescale` in queuescale-system), minus Helm's labels.

    The Namespace of manifests/operator.yaml is the one object the chart does not make: Helm installs into an
    existing namespace (or --create-namespace); docs/operations.md says to label it for the restricted policy.
    """
    chart = keyed([normalised(doc) for doc in render()])
    plain = keyed([doc for doc in manifests() if doc["kind"] != "Namespace"])
    assert sorted(chart) == sorted(plain)
    for key, doc in plain.items():
        assert chart[key] == doc, f"{key} differs between the chart and manifests/"


def test_normalising_keeps_what_matters() -> None:
    """The comparison above can fail: a changed value shows, and only Helm's own labels are dropped."""
    deployment = the(render("--set", "resources.limits.memory=512Mi"), "Deployment")
    plain = the([d for d in manifests() if d["kind"] == "Deployment"], "Deployment")
    assert normalised(deployment) != plain
    labelled = the(render("--set", "podLabels.team=orders"), "Deployment")
    assert normalised(labelled)["spec"]["template"]["metadata"]["labels"]["team"] == "orders"


def test_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    assert chart["apiVersion"] == "v2"
    image = the(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f":{project['version']}")


def test_crd_is_the_one_in_manifests_and_not_a_copy() -> None:
    link = CHART / "files" / "crd.yaml"
    assert link.is_symlink() and link.resolve() == (ROOT / "manifests" / "crd.yaml").resolve()


# ----------------------------------------------------------------------------------------------------------------
# Every rendered object is valid


RENDERINGS = {"defaults": None, "all-on": ALL_ON}


@pytest.mark.parametrize("values", RENDERINGS.values(), ids=RENDERINGS.keys())
def test_rendered_objects_are_valid_kubernetes_objects(values: Path | None) -> None:
    docs = render(values=values)
    checked = 0
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked == len([d for d in docs if d["kind"] not in CUSTOM_KINDS]) >= 8


def test_everything_on_renders_every_optional_object() -> None:
    docs = render(values=ALL_ON)
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == sorted(["CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                            "Role", "RoleBinding", "Deployment", "Service", "ServiceMonitor",
                            "PodDisruptionBudget", "ConfigMap", "ValidatingAdmissionPolicy",
                            "ValidatingAdmissionPolicyBinding", "ClusterRole", "ClusterRoleBinding"])
    pod = the(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "run", "--leader-elect", "--lease-name=queuescale-leader", "--lease-duration=20s", "--renew-deadline=15s",
        "--retry-period=3s", "--namespace=shop", "--namespace=billing", "--selector=shard=a",
        "--status-interval=1m", "--status-rate=20", "--target-refresh=2m", "--max-concurrent-ticks=300",
        "--kube-qps=50", "--kube-burst=80",
        "--log-format=json", "--log-level=debug",
        "--bind-address=0.0.0.0"]
    assert {"name": "HTTPS_PROXY", "value": "http://proxy.example.test:3128"} in container["env"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert "podAntiAffinity" in pod["affinity"]
    assert container["image"] == "ghcr.io/queuescale/queuescale:0.1.0-test"
    assert the(docs, "Role")["rules"][1]["resourceNames"] == ["queuescale-leader"]


def _pod(**changes: Any) -> Doc:
    pod: Doc = {"metadata": {"name": "worker-1", "labels": {"app": "worker"},
                             "annotations": {"team": "shop"},
                             "ownerReferences": [{"kind": "ReplicaSet", "name": "worker-5d4f", "uid": "u1"}]},
                "spec": {"containers": [{"name": "worker", "image": "shop/worker:1"}]}}
    for path, value in changes.items():
        node = pod
        *parents, last = path.split("__")
        for part in parents:
            node = node[part]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return pod


def _admits(policy: Doc, old: Doc, new: Doc) -> bool:
    """The policy's validation, evaluated with CEL (cel-python) as the API server's admission would."""
    env = celpy.Environment()
    activation: dict[str, Any] = {"object": json_to_cel(new), "oldObject": json_to_cel(old)}
    values: dict[str, Any] = {}
    for variable in policy["spec"]["variables"]:
        values[variable["name"]] = env.program(env.compile(variable["expression"])).evaluate(
            {**activation, "variables": json_to_cel(values)})
    activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})
    (validation,) = policy["spec"]["validations"]
    return bool(env.program(env.compile(validation["expression"])).evaluate(activation))


def pods_grant(docs: Sequence[Doc]) -> list[Doc]:
    """The objects of templates/rbac-pods.yaml: the pods ClusterRole and its binding, the admission policy and its."""
    return [d for d in docs if d["metadata"]["name"] == "queuescale-operator-pods"
            or d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_pods_are_granted_only_with_a_policy_that_lets_the_operator_change_only_the_deletion_cost() -> None:
    assert not any("pods" in rule["resources"] for d in by_kind(render(), "ClusterRole") for rule in d["rules"])
    assert pods_grant(render()) == []
    docs = render("--set", "rbac.pods=true")
    assert [d["kind"] for d in pods_grant(docs)] == [
        "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    role, binding_of_role = pods_grant(docs)[:2]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]}]
    assert binding_of_role["roleRef"]["name"] == role["metadata"]["name"]
    assert binding_of_role["subjects"] == [{"kind": "ServiceAccount", "name": "queuescale-operator",
                                            "namespace": "queuescale-system"}]
    policy = the(docs, "ValidatingAdmissionPolicy")
    binding = the(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:queuescale-system:queuescale-operator'")
    cost = "controller.kubernetes.io/pod-deletion-cost"
    old = _pod()
    assert _admits(policy, old, _pod(metadata__annotations={"team": "shop", cost: "3"}))
    assert _admits(policy, _pod(metadata__annotations={cost: "3"}), _pod(metadata__annotations={cost: "0"}))
    assert _admits(policy, _pod(metadata__annotations=None), _pod(metadata__annotations={cost: "1"}))
    refused = {
        "an image": _pod(spec__containers=[{"name": "worker", "image": "evil/worker:1"}]),
        "a label": _pod(metadata__labels={"app": "other"}),
        "another annotation": _pod(metadata__annotations={"team": "evil", cost: "1"}),
        "an annotation dropped": _pod(metadata__annotations={cost: "1"}),
        "an owner dropped": _pod(metadata__ownerReferences=None),
        "a finalizer": _pod(metadata__finalizers=["evil.example/hold"]),
    }
    assert [what for what, new in refused.items() if _admits(policy, old, new)] == []


def test_the_plain_manifest_for_pods_is_the_charts_rbac_pods() -> None:
    plain = [doc for doc in yaml.safe_load_all((ROOT / "manifests" / "optional" / "rbac-pods.yaml").read_text())
             if doc]
    assert keyed(plain) == keyed([normalised(d) for d in pods_grant(render("--set", "rbac.pods=true"))])
    for doc in plain:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_service_monitor_scrapes_the_metrics_service() -> None:
    docs = render(values=ALL_ON)
    monitor, service = the(docs, "ServiceMonitor"), the(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True, "the series' namespace label is the rule's, not the operator's"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"


def test_pod_disruption_budget_selects_only_this_releases_operator_pods() -> None:
    docs = render(values=ALL_ON)
    budget, deployment = the(docs, "PodDisruptionBudget"), the(docs, "Deployment")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert budget["spec"]["minAvailable"] == 1


def test_dashboard_configmap_carries_the_dashboard_and_the_sidecar_label() -> None:
    config_map = the(render(values=ALL_ON), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Autoscaling"}
    shipped = (CHART / "dashboards" / "queuescale.json").read_text()
    assert config_map["data"]["queuescale.json"] == shipped.rstrip("\n")


# ----------------------------------------------------------------------------------------------------------------
# Toggles


def test_rbac_and_service_account_can_be_left_to_someone_else() -> None:
    docs = render("--set", "rbac.create=false", "--set", "serviceAccount.create=false",
                  "--set", "serviceAccount.name=platform-operator")
    assert sorted(d["kind"] for d in docs) == ["CustomResourceDefinition", "Deployment", "Service"]
    assert the(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "platform-operator"


def test_an_existing_service_account_must_be_named() -> None:
    result = helm("template", RELEASE, str(CHART), "--set", "serviceAccount.create=false")
    assert result.returncode != 0
    assert "serviceAccount.name is required" in result.stderr


def test_secrets_grant_can_be_dropped_for_workload_identity() -> None:
    role = the(render("--set", "rbac.readSecrets=false"), "ClusterRole")
    assert not any("secrets" in rule["resources"] for rule in role["rules"])
    default_role = the(render(), "ClusterRole")
    assert [r["verbs"] for r in default_role["rules"] if "secrets" in r["resources"]] == [["get"]]


def test_several_replicas_need_leader_election() -> None:
    result = helm("template", RELEASE, str(CHART), "--set", "leaderElection.enabled=false")
    assert result.returncode != 0
    assert "replicaCount > 1 needs leaderElection.enabled" in result.stderr
    docs = render("--set", "leaderElection.enabled=false", "--set", "replicaCount=1")
    assert the(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"] == ["run"]
    assert not by_kind(docs, "Role")


def test_a_second_release_is_a_shard_with_its_own_lease_and_no_crd() -> None:
    docs = render("--set", "crds.install=false", "--set-string", "watch.selector=shard=b",
                  release="queuescale-shard-b")
    assert not by_kind(docs, "CustomResourceDefinition")
    deployment = the(docs, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["run", "--leader-elect", "--lease-name=queuescale-shard-b-operator", "--selector=shard=b"]
    assert the(docs, "Role")["rules"][1]["resourceNames"] == ["queuescale-shard-b-operator"]
    first = {(d["kind"], d["metadata"]["name"]) for d in render()}
    second = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not first & second, "two releases must not own the same object"
    first_selector = the(render(), "Deployment")["spec"]["selector"]["matchLabels"]
    assert first_selector != deployment["spec"]["selector"]["matchLabels"]


def test_crd_can_be_left_on_uninstall_or_not() -> None:
    crd = the(render(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    loose = the(render("--set", "crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in loose["metadata"]


# ----------------------------------------------------------------------------------------------------------------
# values.schema.json


def values_schema() -> Doc:
    schema: Doc = yaml.safe_load((CHART / "values.schema.json").read_text())
    return schema


def merged(base: Doc, overlay: Doc) -> Doc:
    """Values as Helm merges them: maps key by key, anything else replaced."""
    result = dict(base)
    for key, value in overlay.items():
        both_maps = isinstance(value, dict) and isinstance(base.get(key), dict)
        result[key] = merged(base[key], value) if both_maps else value
    return result


def test_default_and_all_on_values_satisfy_the_schema() -> None:
    validator = jsonschema.Draft7Validator(values_schema())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert list(validator.iter_errors(defaults)) == []
    assert list(validator.iter_errors(merged(defaults, yaml.safe_load(ALL_ON.read_text())))) == []
    assert list(validator.iter_errors({**defaults, "replicaCount": -1})) != []


BAD_VALUES: dict[str, tuple[Doc, str]] = {
    "unknown key": ({"replicas": 2}, "replicas"),
    "replicas as text": ({"replicaCount": "two"}, "replicaCount"),
    "pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    "duration": ({"leaderElection": {"leaseDuration": "fifteen seconds"}}, "leaseDuration"),
    "log level": ({"log": {"level": "verbose"}}, "level"),
    "namespace name": ({"watch": {"namespaces": ["Shop_A"]}}, "namespaces"),
    "typo under crds": ({"crds": {"instal": False}}, "instal"),
    "port": ({"service": {"port": 70000}}, "port"),
}


@pytest.mark.parametrize(("values", "field"), BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_schema_refuses_bad_values(values: Doc, field: str, tmp_path: Path) -> None:
    stderr = render_error(values, tmp_path)
    assert "values don't meet the specifications of the schema" in stderr
    assert field in stderr


def test_every_value_is_documented() -> None:
    """Each value of values.yaml has a comment above it, or sits under a key that has one."""
    undocumented = []
    documented_parents: list[tuple[int, bool]] = []  # (indent, documented)
    previous = ""
    for line in (CHART / "values.yaml").read_text().splitlines():
        match = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if match:
            indent = len(match.group(1))
            while documented_parents and documented_parents[-1][0] >= indent:
                documented_parents.pop()
            documented = previous.lstrip().startswith("#") or any(d for _, d in documented_parents)
            is_leaf = bool(line[match.end():].strip())  # `key: value`; a bare `key:` opens a block of keys
            if is_leaf and not documented:
                undocumented.append(match.group(2))
            documented_parents.append((indent, documented))
        if line.strip():
            previous = line
    assert undocumented == []


def test_clusters_older_than_1_29_are_refused() -> None:
    """The CRD's validation rules are CEL, GA in 1.29: Chart.yaml's kubeVersion stops an install on older ones."""
    result = helm("template", RELEASE, str(CHART), "--kube-version", "1.28.9")
    assert result.returncode != 0
    assert "kubeVersion" in result.stderr or "incompatible" in result.stderr
    render("--kube-version", "1.29.0")


def test_the_packaged_chart_carries_the_crd_itself(tmp_path: Path) -> None:
    """`helm package` resolves files/crd.yaml, so the .tgz installs without a checkout of manifests/."""
    result = helm("package", str(CHART), "--destination", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (package,) = tmp_path.glob("queuescale-*.tgz")
    rendered = helm("template", RELEASE, str(package), "--namespace", NAMESPACE)
    assert rendered.returncode == 0, rendered.stderr
    docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    assert normalised(the(docs, "CustomResourceDefinition")) == the(manifests(), "CustomResourceDefinition")
