"""Telling the ReplicaSet which pods are idle before a scale-in.

A ReplicaSet that removes pods ranks them (pkg/controller/controller_utils.go, `ActivePodsWithRanks`): pods not
yet scheduled, not running or not ready go first, and among ready ones the lower
`controller.kubernetes.io/pod-deletion-cost` goes first. Where a rule names `inFlight`, each of its target's pods
answers how many messages it holds (`GET http://<pod IP>:<port><path>`, a non-negative integer as plain text);
before a scale-in the operator reads every ready pod's count and writes it to the pod's deletion cost, so the pods
removed are the least busy ones, and a killed worker takes the fewest messages with it.

All or nothing: if one ready pod cannot be read (no such port, no answer within a second, not a count), no cost is
written and the scale-in goes ahead as it would have without `inFlight` (a ReplicaSet's own choice). Never a reason
to hold a scale-in: the policy decided it without the counts. A pod's answer is read for a number only, and never
repeated in a message.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from controller.kube.api import MERGE_PATCH, KubeApi
from controller.kube.errors import KubeError
from controller.model.rule import InFlightEndpoint

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# How long a pod may take to answer its count: the scale-in waits for the slowest.
READ_TIMEOUT = 1.0
# The most of a pod's answer that is read: a count is a few digits.
MAX_ANSWER = 32
# Pods read at once.
CONCURRENT_READS = 32
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class PodCount:
    name: str
    in_flight: int
    cost: str | None  # the deletion cost the pod carries now (None: none)
    owner: str | None = None  # its controller, "ReplicaSet name" (None: none)


@dataclass(frozen=True)
class Marking:
    """What telling the ReplicaSet came to: the counts of the ready pods, and how many costs were written; or why
    nothing was written (`problem`)."""

    counts: tuple[PodCount, ...] = ()
    written: int = 0
    problem: str | None = None

    @property
    def least_busy_of_all(self) -> bool:
        """Whether the ReplicaSet removes the least busy of all the ready pods: the costs were written, and the
        pods have one controller between them."""
        return self.problem is None and len({c.owner for c in self.counts}) <= 1

    def words(self, before: int, after: int) -> str:
        """For the scale-in from `before` to `after` replicas: what the ready pods removed hold (the pods not
        ready go first), or why they were not chosen.

        Where the ready pods belong to several ReplicaSets (a Deployment's rollout under way), the Deployment
        controller, not the deletion cost, decides how many pods each loses: it scales its ReplicaSets in
        proportion to their sizes (kubernetes pkg/controller/deployment/sync.go, `scale`), and each removes its
        own least busy. Which pods go is then not the least busy of all, and the words say so."""
        if self.problem is not None:
            return f"pods removed as the ReplicaSet chooses: {self.problem}"
        held = sorted(c.in_flight for c in self.counts)
        removing = max(0, min(len(held), before - after - max(0, before - len(held))))
        written = f"(counts written to {DELETION_COST} of {self.written})"
        owners = Counter(c.owner or "no controller" for c in self.counts)
        if len(owners) > 1:
            sizes = ", ".join(f"{n} of {owner}" for owner, n in sorted(owners.items()))
            return (f"the ready pods belong to {len(owners)} controllers ({sizes}), as in a rollout: the Deployment "
                    f"controller decides how many each loses and each removes its own least busy, so those that go "
                    f"may hold more than the {sum(held[:removing])} of the {sum(held)} messages in flight the "
                    f"{removing} least busy of {len(held)} ready pods hold {written}")
        return f"{least_busy_words(held[:removing], held, 'pods')} {written}"


def least_busy_words(removed: Sequence[int], ready: Sequence[int], things: str) -> str:
    """What the ready `things` removed by their count held, of what all the ready ones held."""
    return (f"the {len(removed)} least busy of {len(ready)} ready {things} go, holding {sum(removed)} of the "
            f"{sum(ready)} messages in flight")


def ready(pod: Mapping[str, Any]) -> bool:
    """Running, Ready, not being deleted, with an IP: the pods a ReplicaSet ranks by their deletion cost."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def controller_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's controller as "Kind name" (its ownerReference with controller: true), None where it has none."""
    for reference in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(reference, Mapping) and reference.get("controller") is True:
            return f"{reference.get('kind', '?')} {reference.get('name', '?')}"
    return None


def port_of(pod: Mapping[str, Any], name: str) -> int | None:
    """The number of the pod's container port named `name`."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == name and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return None


def parse_count(answer: bytes) -> int | None:
    """A pod's answer as a count: digits, with blanks around them; anything else is None."""
    text = answer.strip()
    if not text.isdigit() or len(text) > 10:
        return None
    return min(int(text), INT32_MAX)


async def read_count(client: httpx.AsyncClient, pod: Mapping[str, Any], endpoint: InFlightEndpoint, *,
                     timeout: float = READ_TIMEOUT) -> int | str:
    """The pod's in-flight count, or why it could not be read."""
    name = (pod.get("metadata") or {}).get("name", "?")
    port = port_of(pod, endpoint.port)
    if port is None:
        return f"pod {name} has no container port named {endpoint.port!r}"
    host = str((pod.get("status") or {}).get("podIP"))
    url = f"http://[{host}]:{port}{endpoint.path}" if ":" in host else f"http://{host}:{port}{endpoint.path}"
    try:
        async with client.stream("GET", url) as answer:
            body = b""
            async for chunk in answer.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER:
                    break
            if answer.status_code != 200:
                return f"pod {name} answered HTTP {answer.status_code} on port {endpoint.port!r}"
    except httpx.TimeoutException:
        return f"pod {name} did not answer within {timeout:g}s on port {endpoint.port!r}"
    except httpx.HTTPError as error:
        return f"pod {name} could not be reached on port {endpoint.port!r} ({type(error).__name__})"
    count = parse_count(body) if len(body) <= MAX_ANSWER else None
    if count is None:
        return f"pod {name} answered something that is not a count on port {endpoint.port!r}{endpoint.path}"
    return count


async def read_counts(pods: Sequence[Mapping[str, Any]], endpoint: InFlightEndpoint, *,
                      timeout: float = READ_TIMEOUT) -> list[int | str]:
    """Every pod's count (or why not), at most CONCURRENT_READS at once, never through a proxy."""
    gate = asyncio.Semaphore(CONCURRENT_READS)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False, follow_redirects=False) as client:
        async def one(pod: Mapping[str, Any]) -> int | str:
            async with gate:
                return await read_count(client, pod, endpoint, timeout=timeout)
        return list(await asyncio.gather(*(one(pod) for pod in pods)))


async def mark_pods(api: KubeApi, namespace: str, selector: str, endpoint: InFlightEndpoint, *,
                    request_timeout: float = 10.0) -> Marking:
    """Read the in-flight count of every ready pod `selector` matches in `namespace`, and write each to the pod's
    deletion cost where it differs. Raises nothing: a Marking with a `problem` says what went wrong."""
    base = f"/api/v1/namespaces/{namespace}/pods"
    try:
        listed = await api.call("GET", base, query={"labelSelector": selector}, timeout=request_timeout)
    except KubeError as error:
        return Marking(problem=_api_problem(error, "list", namespace))
    items = listed.get("items") if isinstance(listed, dict) else None
    pods = [p for p in items or [] if isinstance(p, dict) and ready(p)]
    answers = await read_counts(pods, endpoint)
    problems = [a for a in answers if isinstance(a, str)]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Marking(problem=f"{problems[0]}{more}")
    counts = tuple(PodCount(name=str(p["metadata"]["name"]),
                            in_flight=a if isinstance(a, int) else 0,
                            cost=((p["metadata"].get("annotations") or {}).get(DELETION_COST)),
                            owner=controller_of(p))
                   for p, a in zip(pods, answers, strict=True))
    written = 0
    for count in counts:
        if count.cost == str(count.in_flight):
            continue
        body = {"metadata": {"annotations": {DELETION_COST: str(count.in_flight)}}}
        try:
            await api.call("PATCH", f"{base}/{count.name}", body=body, content_type=MERGE_PATCH,
                           timeout=request_timeout, limit="charge")
        except KubeError as error:
            if error.status == 404:
                continue  # gone meanwhile: one pod fewer to choose from
            return Marking(counts=counts, written=written, problem=_api_problem(error, "patch", namespace))
        written += 1
    return Marking(counts=counts, written=written)


def _api_problem(error: KubeError, verb: str, namespace: str) -> str:
    if error.status == 403:
        return (f"the operator may not {verb} pods in {namespace} (install the chart with rbac.pods=true, "
                "which grants get, list and patch on pods)")
    if error.status == 0:
        return f"the API server could not be reached to {verb} pods: {error.message}"
    return f"could not {verb} pods in {namespace}: HTTP {error.status} {error.stated.reason or ''}".rstrip()
