"""The real kubectl 1.33 as a referee: install the operator exactly as docs/operations.md says, create rules and
Secrets as examples/ does, then do what a cluster user does (`get`, `describe`, `wait`, `diff`, `apply
--dry-run=server`, `apply --server-side`, `scale`, `delete`, `explain`) against the fake API server and the
operator in a subprocess with the ServiceAccount the manifests create (so the shipped RBAC is enforced). Each case
asserts what a real cluster prints or does.

kubectl comes from scripts/bootstrap (`.tools/kubectl/kubectl`); the cases run in file order on one installation
(the module's fixture), the rule's deletion last.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient, QueueServiceClient

from tests.azurite import Azurite
from tests.fakekube import FakeKube
from tests.fakekube.tls import issue
from tests.operator_harness import RULES_API, Operator, wait_for

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".tools" / "kubectl" / "kubectl"
OPERATIONS = ROOT / "docs" / "operations.md"
EXAMPLE_RULE = ROOT / "examples" / "orders-worker.yaml"
EXAMPLE_SECRET = ROOT / "examples" / "orders-worker-secret.yaml"
NS, RULE = "shop", "orders-worker"
MESSAGES = 100  # with the example's targetPerReplica 20: 5 replicas

pytestmark = pytest.mark.skipif(
    not KUBECTL.exists(), reason=f"kubectl is not installed at {KUBECTL}: run scripts/bootstrap, which installs it")


def sh_block(after_heading: str, document: Path = OPERATIONS) -> str:
    """The first ```sh block after a heading of the document: the commands a reader copies."""
    text = document.read_text()
    heading = re.search(rf"^#+ {re.escape(after_heading)}$", text, re.MULTILINE)
    assert heading, f"{document.name} has no heading {after_heading!r}"
    block = re.search(r"^```sh\n(.*?)^```$", text[heading.end():], re.MULTILINE | re.DOTALL)
    assert block, f"{document.name}: no sh block after {after_heading!r}"
    return block.group(1)


def doc_line(after_heading: str, starting: str) -> str:
    """One command of a block, without its trailing comment: the test runs what the reader runs."""
    (line,) = [line for line in sh_block(after_heading).splitlines() if line.startswith(starting)]
    return line.split("#", 1)[0].strip()


def example(path: Path, **replace: str) -> str:
    """An example manifest with some values replaced (each must occur exactly once, so an edit cannot go stale)."""
    text = path.read_text()
    for old, new in replace.items():
        assert text.count(old) == 1, f"{path.name}: {old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    return text


@dataclass
class User:
    """A cluster user at a shell in the project folder, with kubectl on PATH and the admin kubeconfig."""

    env: dict[str, str]

    def shell(self, command: str, *, stdin: str | None = None, check: bool = True,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A command line as a reader of the docs types it; `check`: fail the test on a non-zero exit."""
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=ROOT, env=self.env, input=stdin,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            pytest.fail(f"`{command}` exited {result.returncode}:\n{result.stdout}{result.stderr}")
        return result

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.shell(shlex.join(["kubectl", *args]), stdin=stdin, check=check, timeout=timeout)


@dataclass
class Cluster(User):
    """The fake API server with the operator installed from the docs and running, and the example rule applied."""

    fake: FakeKube
    install: subprocess.CompletedProcess[str]
    operator: PodOperator
    queue: QueueClient
    rule_manifest: str

    def rule(self) -> dict[str, Any]:
        return self.fake.get(RULES_API, "QueueScaler", RULE, NS)

    def replicas(self) -> int:
        return int(self.fake.get("apps/v1", "Deployment", RULE, NS)["spec"]["replicas"])


def worker_deployment(replicas: int = 0) -> str:
    return yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": RULE, "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": RULE}},
                 "template": {"metadata": {"labels": {"app": RULE}},
                              "spec": {"containers": [{"name": "worker", "image": "worker:1"}]}}},
    })


class PodOperator(Operator):
    """`queuescale run` where the cluster would start the Deployment's pod: its args, its env, its token."""

    def __init__(self, kubeconfig: Path, log: Path, env: dict[str, str], *args: str) -> None:
        super().__init__(kubeconfig, log, *args)
        self.env = env

    def start(self) -> PodOperator:
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                        env=self.env)
        wait_for("the operator to be ready", lambda: self.get("/readyz", self.health_port) == 200, timeout=30)
        return self


def start_operator_as_its_deployment(fake: FakeKube, folder: Path) -> PodOperator:
    deployment = fake.get("apps/v1", "Deployment", "queuescale-operator", "queuescale-system")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["queuescale"] and container["args"][0] == "run", container
    namespace = deployment["metadata"]["namespace"]
    kubeconfig = fake.write_kubeconfig(folder / "operator.kubeconfig", namespace,
                                       service_account=(namespace, pod["serviceAccountName"]))
    pod_name = f"{deployment['metadata']['name']}-7d9f8b6c4-kubectl"
    downward = {"metadata.name": pod_name, "metadata.namespace": namespace}
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    for variable in container.get("env") or []:
        field = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        env[variable["name"]] = downward[field] if field else str(variable["value"])
    env["PYTHONPATH"] = str(ROOT)
    # Loopback ports instead of the pod's 8080/8081; status counts every second so the columns fill at once.
    return PodOperator(kubeconfig, folder / "operator.log", env, *container["args"][1:],
                       "--status-interval", "1s").start()


@pytest.fixture(scope="module")
def cluster(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("kubectl")
    fake = FakeKube(bookmark_interval=0.2).start()
    operator: PodOperator | None = None
    queue = QueueServiceClient.from_connection_string(azurite.connection_string).get_queue_client("orders")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env.update(KUBECONFIG=str(fake.write_kubeconfig(folder / "admin.kubeconfig")), HOME=str(folder),
                   KUBECACHEDIR=str(folder / "cache"), PATH=f"{KUBECTL.parent}{os.pathsep}{env['PATH']}")
        user = User(env)
        install = user.shell(sh_block("With plain manifests"), check=False, timeout=120)
        if install.returncode != 0:
            pytest.fail(f"the install commands of docs/operations.md failed:\n{install.stdout}{install.stderr}")
        with contextlib.suppress(ResourceNotFoundError):  # left over by an interrupted run
            queue.delete_queue()
        queue.create_queue()
        for index in range(MESSAGES):
            queue.send_message(f"order {index}")
        user.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        user.kubectl("apply", "-f", "-", stdin=worker_deployment())
        user.kubectl("apply", "-f", "-", stdin=example(EXAMPLE_SECRET, **{
            "UseDevelopmentStorage=true": azurite.connection_string}))
        # The example polls every 10 s; 1 s keeps the module short.
        rule_manifest = example(EXAMPLE_RULE, **{"pollingInterval: 10s": "pollingInterval: 1s"})
        user.kubectl("apply", "-f", "-", stdin=rule_manifest)
        operator = start_operator_as_its_deployment(fake, folder)
        yield Cluster(env, fake, install, operator, queue, rule_manifest)
    finally:
        if operator is not None:
            operator.stop(signal.SIGTERM)
        fake.stop()
        with contextlib.suppress(ResourceNotFoundError):
            queue.delete_queue()
        queue.close()


def table(text: str) -> list[dict[str, str]]:
    """kubectl's column output as rows keyed by header; cells are cut at the headers' columns, so an empty cell
    stays empty instead of shifting the others."""
    header, *lines = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    return [{name: line[start:end].strip() for name, start, end in zip(names, starts, [*starts[1:], None],
                                                                        strict=True)} for line in lines]


# ----------------------------------------------------------------------------------------------------------------
# Install


def test_the_install_commands_of_the_docs_run_verbatim_and_say_what_kubectl_says(cluster: Cluster) -> None:
    applied = []
    for name in ("operator.yaml", "rbac.yaml"):
        for doc in yaml.safe_load_all((ROOT / "manifests" / name).read_text()):
            group = doc["apiVersion"].rpartition("/")[0]
            applied.append(f"{doc['kind'].lower()}{'.' + group if group else ''}/{doc['metadata']['name']} created")
    crd = "customresourcedefinition.apiextensions.k8s.io/queuescalers.queuescale.io"
    assert cluster.install.stdout.splitlines() == [f"{crd} serverside-applied", f"{crd} condition met", *applied]
    assert cluster.install.stderr == ""


# ----------------------------------------------------------------------------------------------------------------
# Reading rules


def test_kubectl_get_qs_fills_every_printer_column_as_the_api_server_does(cluster: Cluster) -> None:
    # The API server, not kubectl, turns the CRD's additionalPrinterColumns into a Table (apiextensions-apiserver
    # pkg/registry/customresource/tableconvertor/tableconvertor.go); kubectl only prints it.
    command = doc_line("Check it works", "kubectl get qs -A")
    expected = {"NAMESPACE": NS, "NAME": RULE, "TARGET": RULE, "MIN": "0", "MAX": "50", "QUEUE": str(MESSAGES),
                "DESIRED": "5", "CURRENT": "5", "READY": "5", "ACTIVE": "True", "FALLBACK": "False", "PAUSED": "False"}

    deadline = time.monotonic() + 20  # the first poll, the scale, the pods ready, a status write (every 1 s)
    while True:
        (found,) = table(cluster.shell(command).stdout)
        assert list(found) == [*expected, "AGE"]
        shown = {k: v for k, v in found.items() if k != "AGE"}
        if shown == expected or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert shown == expected
    assert re.fullmatch(r"\d+s", found["AGE"]), found


def test_kubectl_describe_qs_shows_the_conditions_and_the_operators_events(cluster: Cluster) -> None:
    # kubectl describe finds a custom resource's events with the field selector involvedObject.name, .namespace,
    # .kind and .uid (k8s.io/kubectl/pkg/describe/describe.go, GenericDescriberFor -> searchEvents).
    wait_for("a ScaledUp event", lambda: [e for e in cluster.fake.events(NS) if e["reason"] == "ScaledUp"])
    (scaled,) = [e for e in cluster.fake.events(NS) if e["reason"] == "ScaledUp"]
    described = cluster.shell(doc_line("Check it works", "kubectl describe qs")).stdout
    assert re.search(r"^Name:\s+orders-worker$", described, re.MULTILINE), described
    assert re.search(r"^Kind:\s+QueueScaler$", described, re.MULTILINE), described
    assert re.search(r"^\s+Type:\s+Ready$", described, re.MULTILINE), described
    events = table(textwrap.dedent(described.split("\nEvents:\n", 1)[1]))
    assert [list(events[0]), events[0]["Type"]] == [["Type", "Reason", "Age", "From", "Message"], "----"]
    assert [(e["Type"], e["Reason"], e["From"], e["Message"]) for e in events[1:]] == [
        ("Normal", "ScaledUp", "queuescale", scaled["message"])], described


def test_kubectl_wait_for_condition_ready_returns_when_the_operator_says_ready(cluster: Cluster) -> None:
    # kubectl wait watches the object until the condition's status matches (k8s.io/kubectl/pkg/cmd/wait/
    # condition.go, ConditionalWait.checkCondition).
    ready = cluster.kubectl("wait", "--for=condition=Ready", f"qs/{RULE}", "-n", NS, "--timeout=30s")
    assert ready.stdout == f"queuescaler.queuescale.io/{RULE} condition met\n"
    broken = another_rule(cluster.rule_manifest, "broken").replace("name: orders-queue", "name: no-such-secret")
    cluster.kubectl("apply", "-f", "-", stdin=broken)
    try:
        not_ready = cluster.kubectl("wait", "--for=condition=Ready=False", "qs/broken", "-n", NS, "--timeout=30s")
        assert not_ready.stdout == "queuescaler.queuescale.io/broken condition met\n"
        timed_out = cluster.kubectl("wait", "--for=condition=Ready", "qs/broken", "-n", NS, "--timeout=1s",
                                    check=False)
        assert timed_out.returncode == 1
        assert timed_out.stderr == "error: timed out waiting for the condition on queuescalers/broken\n"
    finally:
        cluster.kubectl("delete", "qs", "broken", "-n", NS)


# ----------------------------------------------------------------------------------------------------------------
# Changing rules


def test_kubectl_wait_sees_a_cold_start_too_slow_for_the_objective(cluster: Cluster) -> None:
    # A rate-mode rule whose poll (1 s) + start-up (30 s) + service time (1 s) exceed its 20 s objective: the
    # operator writes ColdStart=False, and kubectl reads it as any condition (ConditionalWait, as above).
    rule = another_rule(cluster.rule_manifest, "slow").replace(
        "    targetPerReplica: 20         # messages waiting per replica\n",
        "    targetWaitSeconds: 20\n    serviceTime: 1s\n    startupTime: 30s\n")
    assert "targetWaitSeconds: 20" in rule
    cluster.kubectl("apply", "-f", "-", stdin=rule)
    try:
        waited = cluster.kubectl("wait", "--for=condition=ColdStart=False", "qs/slow", "-n", NS, "--timeout=30s")
        assert waited.stdout == "queuescaler.queuescale.io/slow condition met\n"
        reason = cluster.kubectl("get", "qs", "slow", "-n", NS, "-o",
                                 'jsonpath={.status.conditions[?(@.type=="ColdStart")].reason}')
        assert reason.stdout == "ColdStartTooSlow"
        # Rate mode: what drains and waits showed of the stated serviceTime (nothing yet).
        speed = cluster.kubectl("get", "qs", "slow", "-n", NS, "-o",
                                'jsonpath={.status.conditions[?(@.type=="ServiceTime")].reason}')
        assert speed.stdout == "AsStated"
        # The example rule states no wait objective: it gets no such condition.
        none = cluster.kubectl("get", "qs", RULE, "-n", NS, "-o",
                               'jsonpath={.status.conditions[?(@.type=="ColdStart")].reason}')
        assert none.stdout == ""
    finally:
        cluster.kubectl("delete", "qs", "slow", "-n", NS)


# A policy choice the API server defaults and checks from the CRD's enum: (field, its default, an unknown value,
# the values the server lists, one to set). onScaleIn defaults to kill, the worst case; recurringBursts to ready.
POLICY_CHOICES = [
    ("onScaleIn", "kill", "finish", '"kill", "drain", "release"', "drain"),
    ("recurringBursts", "ready", "predict", '"ready", "ignore"', "ignore"),
]


@pytest.mark.parametrize(("field", "default", "unknown", "supported", "told"), POLICY_CHOICES)
def test_kubectl_shows_a_policy_choice_defaulted_and_refuses_an_unknown_value(
        cluster: Cluster, field: str, default: str, unknown: str, supported: str, told: str) -> None:
    # The rule says nothing: the API server writes the schema's default into the stored object (structural
    # defaulting), so kubectl reads it back.
    assumed = cluster.kubectl("get", "qs", RULE, "-n", NS, "-o", f"jsonpath={{.spec.policy.{field}}}")
    assert assumed.stdout == default
    name = f"told-{field.lower()}"
    rule = another_rule(cluster.rule_manifest, name).replace(
        "    targetPerReplica: 20         # messages waiting per replica\n",
        f"    targetPerReplica: 20\n    {field}: {unknown}\n")
    assert f"{field}: {unknown}" in rule
    refused = cluster.kubectl("apply", "-f", "-", stdin=rule, check=False)
    assert refused.returncode == 1
    assert f'spec.policy.{field}: Unsupported value: "{unknown}": supported values: {supported}' \
        in refused.stderr, refused.stderr
    try:
        cluster.kubectl("apply", "-f", "-", stdin=rule.replace(f"{field}: {unknown}", f"{field}: {told}"))
        stored = cluster.kubectl("get", "qs", name, "-n", NS, "-o", f"jsonpath={{.spec.policy.{field}}}")
        assert stored.stdout == told
    finally:
        cluster.kubectl("delete", "qs", name, "-n", NS, "--ignore-not-found")


def another_rule(manifest: str, name: str) -> str:
    """The example rule under another name and on a worker of its own, so it never competes with the first."""
    for old, new in ((f"name: {RULE}\n  namespace", f"name: {name}\n  namespace"),
                     (f"    name: {RULE}          #", f"    name: {name}-worker          #")):
        assert manifest.count(old) == 1, old
        manifest = manifest.replace(old, new)
    return manifest


def spec_and_generation(cluster: Cluster, name: str = RULE) -> tuple[Any, Any, Any]:
    rule = cluster.fake.get(RULES_API, "QueueScaler", name, NS)
    metadata = rule["metadata"]
    return rule["spec"], metadata["generation"], (metadata.get("annotations") or {}).copy()


def test_kubectl_diff_and_apply_dry_run_server_change_nothing(cluster: Cluster) -> None:
    # dryRun=All runs admission and validation but never persists (k8s.io/apiserver/pkg/registry/generic/
    # registry/dryrun.go); kubectl diff is a dry-run apply compared with the live object (kubectl/pkg/cmd/diff).
    before = spec_and_generation(cluster)
    bigger = cluster.rule_manifest.replace("maxReplicas: 50", "maxReplicas: 60")
    diff = cluster.kubectl("diff", "-f", "-", stdin=bigger, check=False)
    assert diff.returncode == 1, diff.stderr  # 1: differences found, >1: kubectl or diff failed
    changed = [line for line in diff.stdout.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")]
    # What a real server's dry run changes: the spec, the generation (a spec change), and client-side apply's
    # record of what was applied. Not the resourceVersion: a dry run is never stored (dryrun.go).
    last_applied = re.compile(r"[-+]\s+\{\"apiVersion\":\"" + re.escape(RULES_API) + r"\",\"kind\":\"QueueScaler\"")
    assert [line for line in changed if not last_applied.match(line)] == [
        "-  generation: 1", "+  generation: 2", "-  maxReplicas: 50", "+  maxReplicas: 60"], diff.stdout
    same = cluster.kubectl("diff", "-f", "-", stdin=cluster.rule_manifest, check=False)
    assert (same.returncode, same.stdout) == (0, "")

    dry_run = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=bigger)
    assert dry_run.stdout == f"queuescaler.queuescale.io/{RULE} configured (server dry run)\n"
    another = another_rule(bigger, "dry-run-only")
    dry_create = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=another)
    assert dry_create.stdout == "queuescaler.queuescale.io/dry-run-only created (server dry run)\n"

    assert spec_and_generation(cluster) == before
    missing = cluster.kubectl("get", "qs", "dry-run-only", "-n", NS, check=False)
    assert missing.stderr == 'Error from server (NotFound): queuescalers.queuescale.io "dry-run-only" not found\n'


def test_kubectl_apply_server_side_owns_its_fields_and_an_unchanged_apply_changes_nothing(cluster: Cluster) -> None:
    # Server-side apply records each manager's fields in managedFields, and an apply that changes nothing is a
    # no-op: generation stays (k8s.io/apimachinery/pkg/util/managedfields, apiserver's fieldmanager).
    crd_before = cluster.fake.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "queuescalers.queuescale.io")
    again = cluster.shell(doc_line("With plain manifests", "kubectl apply --server-side"))
    assert again.stdout == "customresourcedefinition.apiextensions.k8s.io/queuescalers.queuescale.io " \
                           "serverside-applied\n"
    crd_after = cluster.fake.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "queuescalers.queuescale.io")
    assert crd_after["metadata"]["generation"] == crd_before["metadata"]["generation"]

    applied = another_rule(cluster.rule_manifest, "applied")
    try:
        first = cluster.kubectl("apply", "--server-side", "-f", "-", stdin=applied)
        assert first.stdout == "queuescaler.queuescale.io/applied serverside-applied\n"
        rule = cluster.fake.get(RULES_API, "QueueScaler", "applied", NS)
        managers = {(m["manager"], m["operation"]) for m in rule["metadata"]["managedFields"]}
        assert ("kubectl", "Apply") in managers, managers
        cluster.kubectl("apply", "--server-side", "-f", "-", stdin=applied)
        assert spec_and_generation(cluster, "applied")[1] == 1
        cluster.kubectl("apply", "--server-side", "-f", "-",
                        stdin=applied.replace("maxReplicas: 50", "maxReplicas: 40"))
        assert spec_and_generation(cluster, "applied")[:2] == ({**rule["spec"], "maxReplicas": 40}, 2)
        # Another manager setting a field kubectl owns to another value is a conflict, not a silent takeover.
        partial = {"apiVersion": RULES_API, "kind": "QueueScaler",
                   "metadata": {"name": "applied", "namespace": NS}, "spec": {"maxReplicas": 30}}
        conflict = cluster.kubectl("apply", "--server-side", "--field-manager=someone-else", "-f", "-",
                                   stdin=yaml.safe_dump(partial), check=False)
        assert conflict.returncode == 1
        assert conflict.stderr.splitlines()[0] == \
            'error: Apply failed with 1 conflict: conflict with "kubectl": .spec.maxReplicas', conflict.stderr
        assert spec_and_generation(cluster, "applied")[1] == 2
    finally:
        cluster.kubectl("delete", "qs", "applied", "-n", NS, "--ignore-not-found")


def test_kubectl_explain_qs_spec_lists_the_crd_fields(cluster: Cluster) -> None:
    # kubectl explain reads the schema the API server publishes at /openapi/v3 (k8s.io/kubectl/pkg/explain/v2).
    crd = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    explained = cluster.kubectl("explain", "qs.spec").stdout
    assert re.search(r"^KIND:\s+QueueScaler$", explained, re.MULTILINE), explained
    assert re.search(r"^VERSION:\s+v1alpha1$", explained, re.MULTILINE), explained
    assert re.search(r"^FIELD:\s+spec <Object>$", explained, re.MULTILINE), explained
    fields = dict(re.findall(r"^  (\w+)\t(<[^>]+>(?: -required-)?)$", explained, re.MULTILINE))
    assert sorted(fields) == sorted(spec["properties"]), explained
    for name in spec["required"]:
        assert fields[name].endswith("-required-"), (name, explained)
    assert fields["maxReplicas"].startswith("<integer>") and fields["sources"].startswith("<[]Object>")


# ----------------------------------------------------------------------------------------------------------------
# The operator and the user, on one target


def test_kubectl_scale_of_the_target_is_noticed_by_the_operator(cluster: Cluster) -> None:
    wait_for("the operator to scale the worker to 5", lambda: cluster.replicas() == 5)
    scaled = cluster.kubectl("scale", "deployment", RULE, "-n", NS, "--replicas=2")
    assert scaled.stdout == f"deployment.apps/{RULE} scaled\n"
    # 100 messages still wait: the operator sees the scale (and the ready pods) and brings the worker back.
    wait_for("the operator to restore 5 replicas", lambda: cluster.replicas() == 5, timeout=5)
    # It remembers the scale as someone else's: counted for the replicas that worked, not as its own step.
    memory = wait_for("the status memory to hold the hand scale", lambda: (
        (m := (cluster.rule().get("status") or {}).get("memory") or {}).get("handScales") and m), timeout=5)
    assert [row[1:] for row in memory["handScales"]] == [[5, 2]]
    assert [row[1:] for row in memory["scaleEvents"]][-1] == [2, 5]
    status = wait_for("status to show 5 current", lambda: (s := cluster.rule().get("status") or {})
                      .get("currentReplicas") == 5 and s)
    assert status["desiredReplicas"] == 5


def test_kubectl_delete_of_the_rule_stops_the_operator_scaling_its_target(cluster: Cluster) -> None:
    before = cluster.replicas()
    deleted = cluster.kubectl("delete", "qs", RULE, "-n", NS)
    assert deleted.stdout == f'queuescaler.queuescale.io "{RULE}" deleted\n'
    for index in range(MESSAGES):  # enough for 10 replicas, were the rule still there
        cluster.queue.send_message(f"late order {index}")
    time.sleep(3)  # three polling intervals of the deleted rule
    assert cluster.replicas() == before
    metrics = cluster.operator.metrics()
    assert f'queuescale_desired_replicas{{namespace="{NS}",rule="{RULE}"}}' not in metrics
    gone = cluster.kubectl("get", "qs", "-n", NS, check=False)
    assert (gone.stdout, gone.stderr) == ("", f"No resources found in {NS} namespace.\n")


def test_the_operator_ran_as_its_service_account_without_a_forbidden_request(cluster: Cluster) -> None:
    denied = [f"{r.method} {r.path}" for r in cluster.fake.requests
              if r.status == 403 and r.user_agent.startswith("queuescale/")]
    assert denied == []
    lease = json.loads(cluster.kubectl("get", "lease", "queuescale-operator", "-n", "queuescale-system",
                                       "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"] == cluster.operator.env["POD_NAME"]


# ----------------------------------------------------------------------------------------------------------------
# TLS, as kubectl sees it (no installation needed)


def test_kubectl_sends_its_token_over_tls_and_refuses_a_server_its_kubeconfig_does_not_trust(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    # client-go sends a bearer token only over TLS and verifies the server against certificate-authority-data
    # (k8s.io/client-go/transport/transport.go, TLSConfigFor); the fake's kubeconfig carries its per-run CA.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update(HOME=str(tmp_path), KUBECACHEDIR=str(tmp_path / "cache"))
    trusted = fake_kube.write_kubeconfig(tmp_path / "kubeconfig")
    listed = subprocess.run([str(KUBECTL), "--kubeconfig", str(trusted), "get", "namespaces", "-o", "name"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert "namespace/default" in listed.stdout.splitlines()

    other = fake_kube.kubeconfig()
    other["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        issue("another-cluster-ca").ca_pem).decode()
    untrusted = tmp_path / "untrusted-kubeconfig"
    untrusted.write_text(yaml.safe_dump(other))
    before = fake_kube.request_total
    refused = subprocess.run([str(KUBECTL), "--kubeconfig", str(untrusted), "get", "namespaces"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == ("Unable to connect to the server: tls: failed to verify certificate: "
                                               "x509: certificate signed by unknown authority")
    assert fake_kube.request_total == before, "no request may reach a server the client does not trust"
