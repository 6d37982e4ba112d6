"""Server-side printing: the meta.k8s.io Table a kube-apiserver answers to
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io` (what `kubectl get` asks for).

- Custom resources: apiextensions-apiserver pkg/registry/customresource/tableconvertor/tableconvertor.go. A `Name`
  column, then the CRD version's additionalPrinterColumns (only `Age` on `.metadata.creationTimestamp` when it has
  none: apiextensions-apiserver pkg/apiserver/customresource_handler.go). Each column is a JSONPath on the object
  whose first result is typed by the column: integer -> int, number -> float, boolean -> bool, string -> the
  value as text, date -> a human duration since then; anything missing or of the wrong type is a null cell.
- Built-in kinds: pkg/printers/internalversion/printers.go (AddHandlers and the print* functions), printed with
  `Wide: true`, so columns of priority 1 are sent too and only the client hides them without `-o wide`.
- Kinds without a printer (CRDs, ...): k8s.io/apiserver pkg/registry/rest/table.go DefaultTableConvertor:
  `Name` and `Created At` (RFC 3339).
Each row's `object` is PartialObjectMetadata unless `includeObject=Object` (the object) or `None`
(k8s.io/apiserver pkg/endpoints/handlers/response.go asTable).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from tests.fakekube.resources import Obj, ResourceType

Cell = str | int | float | bool | None

_NAME_DOC = ("Name must be unique within a namespace. Is required when creating resources, although some resources "
             "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
             "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
             "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
_AGE_DOC = ("CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
            "guaranteed to be set in happens-before order across separate operations. Clients may not set this "
            "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null "
            "for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
            "api-conventions.md#metadata")

_STEP = re.compile(
    r"""\.([A-Za-z0-9_$-]+)"""  # .field
    r"""|\[(\d+)\]"""  # [0]
    r"""|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*["']([^"']*)["']\)\]"""  # [?(@.type=="Ready")]
    r"""|\['([^']+)'\]"""  # ['dotted.key']
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Values at a simple JSONPath: `.a.b`, `.list[0]`, `.conditions[?(@.type=="Ready")].status`, `['a.b']`
    (the subset a CRD's printer columns use; missing keys give no value, as with AllowMissingKeys)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    nodes: list[Any] = [obj]
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if not match:
            raise ValueError(f"unsupported JSONPath {path!r} at {text[position:]!r}")
        key, index, filter_key, filter_value, quoted = match.groups()
        following: list[Any] = []
        for node in nodes:
            if key is not None or quoted is not None:
                name = key if key is not None else quoted
                if isinstance(node, dict) and name in node:
                    following.append(node[name])
            elif index is not None:
                if isinstance(node, list) and int(index) < len(node):
                    following.append(node[int(index)])
            elif isinstance(node, list):
                for item in node:
                    found = jsonpath(item, "." + filter_key)
                    if found and str(found[0]) == filter_value:
                        following.append(item)
        nodes = following
        position = match.end()
    return nodes


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery pkg/util/duration HumanDuration: 45s, 3m20s, 15m, 5h10m, 3d4h, 400d, 2y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _since(value: object, now: dt.datetime) -> str:
    """printers.go translateTimestampSince: `<unknown>` for no time."""
    when = _parse_time(value)
    return "<unknown>" if when is None else human_duration((now - when).total_seconds())


def _column(name: str, type_: str = "string", description: str = "", *, priority: int = 0,
            format_: str = "") -> Obj:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


_NAME = _column("Name", format_="name", description=_NAME_DOC)
_AGE = _column("Age", description=_AGE_DOC)


# ------------------------------------------------------------------------------------------------------------------
# Custom resources


def _custom_specs(rt: ResourceType) -> list[Obj]:
    """The CRD version's printer columns, or the `Age` column the server serves when it declares none."""
    return list(rt.printer_columns) or [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                                         "description": _AGE_DOC}]


def _custom_columns(rt: ResourceType) -> list[Obj]:
    return [_NAME] + [_column(str(c["name"]), str(c.get("type", "string")),
                              str(c.get("description") or "Custom resource definition column (in JSONPath "
                                  f"format): {c['jsonPath']}"),
                              priority=int(c.get("priority", 0)), format_=str(c.get("format", "")))
                      for c in _custom_specs(rt)]


def _go_text(value: object) -> str:
    """How client-go's jsonpath prints a value into a `string` column."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def custom_cell(type_: str, values: list[Any], now: dt.datetime) -> Cell:
    """tableconvertor.go cellForJSONValue: the first JSONPath result typed by its column, or null."""
    if not values or values[0] is None:
        return None
    value = values[0]
    if type_ == "string":
        return _go_text(value)
    if type_ == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if type_ == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if type_ == "boolean" and isinstance(value, bool):
        return value
    if type_ == "date" and isinstance(value, str):
        when = _parse_time(value)
        return "<invalid>" if when is None else human_duration((now - when).total_seconds())
    return None


# ------------------------------------------------------------------------------------------------------------------
# Built-in kinds (printers.go)


def _containers(obj: Obj) -> tuple[str, str]:
    containers = ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])
    return (",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers))


def _selector(obj: Obj) -> str:
    selector = (obj.get("spec") or {}).get("selector") or {}
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        operator, key = str(expression.get("operator", "")), str(expression.get("key", ""))
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        terms.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                      "DoesNotExist": f"!{key}"}.get(operator, key))
    return ",".join(terms) if terms else "<none>"


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


_CONTAINER_COLUMNS = [_column("Containers", priority=1, description="Names of each container in the template."),
                      _column("Images", priority=1, description="Images referenced by each container in the "
                              "template.")]


def _deployment(obj: Obj, now: dt.datetime) -> list[Cell]:
    replicas = _int(_spec(obj).get("replicas", 1))
    status = _status(obj)
    return [f"{_int(status.get('readyReplicas'))}/{replicas}", _int(status.get("updatedReplicas")),
            _int(status.get("availableReplicas")), _since(obj["metadata"].get("creationTimestamp"), now),
            *_containers(obj), _selector(obj)]


def _statefulset(obj: Obj, now: dt.datetime) -> list[Cell]:
    replicas = _int(_spec(obj).get("replicas", 1))
    return [f"{_int(_status(obj).get('readyReplicas'))}/{replicas}",
            _since(obj["metadata"].get("creationTimestamp"), now), *_containers(obj)]


def _replicaset(obj: Obj, now: dt.datetime) -> list[Cell]:
    status = _status(obj)
    return [_int(_spec(obj).get("replicas", 1)), _int(status.get("replicas")), _int(status.get("readyReplicas")),
            _since(obj["metadata"].get("creationTimestamp"), now), *_containers(obj), _selector(obj)]


def _event_fields(obj: Obj) -> Obj:
    """An events.k8s.io/v1 Event in core/v1 field names (both are one storage in a real server)."""
    if "regarding" not in obj and "note" not in obj and "deprecatedSource" not in obj:
        return obj
    return {**obj, "involvedObject": obj.get("regarding") or {}, "message": obj.get("note", ""),
            "source": obj.get("deprecatedSource") or {}, "firstTimestamp": obj.get("deprecatedFirstTimestamp"),
            "lastTimestamp": obj.get("deprecatedLastTimestamp"), "count": obj.get("deprecatedCount", 0),
            "reportingComponent": obj.get("reportingController", "")}


def _event(obj: Obj, now: dt.datetime) -> list[Cell]:
    event = _event_fields(obj)
    first = (_since(event.get("firstTimestamp"), now) if _parse_time(event.get("firstTimestamp"))
             else _since(event.get("eventTime"), now))
    last = _since(event.get("lastTimestamp"), now) if _parse_time(event.get("lastTimestamp")) else first
    count = _int(event.get("count"))
    series = event.get("series")
    if isinstance(series, dict):
        last, count = _since(series.get("lastObservedTime"), now), _int(series.get("count"))
    elif count == 0:
        count = 1  # singleton events written through the new API carry no count
    involved = event.get("involvedObject") or {}
    kind, name = str(involved.get("kind", "")).lower(), str(involved.get("name", ""))
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or event.get("reportingInstance") or ""
    shown_source = f"{component}, {host}" if host else str(component)  # formatEventSourceComponentInstance
    return [last, str(event.get("type", "")), str(event.get("reason", "")), f"{kind}/{name}" if name else kind,
            str(involved.get("fieldPath", "")), shown_source, str(event.get("message", "")).strip(), first, count,
            str(obj["metadata"]["name"])]


def _age(obj: Obj, now: dt.datetime) -> str:
    return _since(obj["metadata"].get("creationTimestamp"), now)


def _created_at(obj: Obj, now: dt.datetime) -> list[Cell]:
    del now
    when = _parse_time(obj["metadata"].get("creationTimestamp"))
    return [when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if when else "0001-01-01T00:00:00Z"]


def _role_binding(obj: Obj, now: dt.datetime) -> list[Cell]:
    ref = obj.get("roleRef") or {}
    subjects = obj.get("subjects") or []

    def of(kind: str) -> str:
        return ", ".join(str(s.get("name")) for s in subjects if s.get("kind") == kind)

    accounts = ", ".join(f"{s.get('namespace', '')}/{s.get('name')}" for s in subjects
                         if s.get("kind") == "ServiceAccount")
    return [f"{ref.get('kind', '')}/{ref.get('name', '')}", _age(obj, now), of("User"), of("Group"), accounts]


def _service(obj: Obj, now: dt.datetime) -> list[Cell]:
    spec = _spec(obj)
    ports = ",".join(f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/"
                     f"{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [str(spec.get("type") or "ClusterIP"), str(spec.get("clusterIP") or "<none>"),
            ",".join(spec.get("externalIPs") or []) or "<none>", ports or "<none>", _age(obj, now),
            selector or "<none>"]


def _restartable(init_containers: dict[str, Obj], name: object) -> bool:
    """podutil.IsRestartableInitContainer: an init container that restarts Always (a sidecar)."""
    return (init_containers.get(str(name)) or {}).get("restartPolicy") == "Always"


def _terminated_at(container: Obj) -> dt.datetime | None:
    return _parse_time((((container.get("lastState") or {}).get("terminated")) or {}).get("finishedAt"))


def _pod_reason(state: Obj, prefix: str = "") -> str | None:
    """A container's waiting or terminated reason, or its exit signal or code."""
    waiting, terminated = state.get("waiting"), state.get("terminated")
    if isinstance(waiting, dict) and waiting.get("reason"):
        return prefix + str(waiting["reason"])
    if isinstance(terminated, dict):
        if terminated.get("reason"):
            return prefix + str(terminated["reason"])
        if terminated.get("signal"):
            return f"{prefix}Signal:{terminated['signal']}"
        return f"{prefix}ExitCode:{_int(terminated.get('exitCode'))}"
    return None


def _pod(obj: Obj, now: dt.datetime) -> list[Cell]:
    """printers.go printPod: READY counts running ready containers (sidecars too), STATUS is the most telling
    reason (init progress, a container's waiting/terminated reason, Terminating), RESTARTS adds when the last
    restart was; the wide columns are IP, NODE, NOMINATED NODE and READINESS GATES."""
    spec, status = _spec(obj), _status(obj)
    init_containers = {str(c.get("name")): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(1 for c in init_containers.values()
                                                     if c.get("restartPolicy") == "Always")
    ready = restarts = sidecar_restarts = 0
    last_restart: dt.datetime | None = None
    last_sidecar_restart: dt.datetime | None = None
    reason = str(status.get("reason") or status.get("phase") or "")
    conditions = status.get("conditions") or []
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
        reason = "SchedulingGated"
    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for index, container in enumerate(init_statuses):
        restarts += _int(container.get("restartCount"))
        finished = _terminated_at(container)
        if finished and (last_restart is None or finished > last_restart):
            last_restart = finished
        sidecar = _restartable(init_containers, container.get("name"))
        if sidecar:
            sidecar_restarts += _int(container.get("restartCount"))
            if finished and (last_sidecar_restart is None or finished > last_sidecar_restart):
                last_sidecar_restart = finished
        state = container.get("state") or {}
        terminated = state.get("terminated")
        if isinstance(terminated, dict) and _int(terminated.get("exitCode")) == 0:
            continue
        if sidecar and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        waiting = state.get("waiting")
        if isinstance(terminated, dict) or (isinstance(waiting, dict) and waiting.get("reason")
                                            and waiting.get("reason") != "PodInitializing"):
            reason = _pod_reason(state, "Init:") or reason
        else:
            reason = f"Init:{index}/{len(init_containers)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions)
    if not initializing or initialized:
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += _int(container.get("restartCount"))
            finished = _terminated_at(container)
            if finished and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = container.get("state") or {}
            explained = _pod_reason(state)
            if explained is not None:
                reason = explained
            elif container.get("ready") and isinstance(state.get("running"), dict):
                running = True
                ready += 1
        if reason == "Completed" and running:
            ready_condition = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            reason = "Running" if ready_condition else "NotReady"
    if obj["metadata"].get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif status.get("phase") not in ("Succeeded", "Failed"):
            reason = "Terminating"
    shown_restarts = str(restarts)
    if restarts and last_restart is not None:
        shown_restarts = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    ips = status.get("podIPs") or []  # the internal PodIPs[0]: status.podIP wins (v1 conversion)
    pod_ip = str(status.get("podIP") or (ips[0].get("ip") if ips and isinstance(ips[0], dict) else "") or "")
    gates = spec.get("readinessGates") or []
    shown_gates = "<none>"
    if gates:
        by_type = {c.get("type"): c.get("status") for c in reversed(conditions)}  # the first of a type counts
        passed = sum(1 for gate in gates if by_type.get(gate.get("conditionType")) == "True")
        shown_gates = f"{passed}/{len(gates)}"
    return [f"{ready}/{total}", reason, shown_restarts, _age(obj, now), pod_ip or "<none>",
            str(spec.get("nodeName") or "") or "<none>", str(status.get("nominatedNodeName") or "") or "<none>",
            shown_gates]


_POD_COLUMNS = [
    _column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", description="The aggregate status of the containers in this pod."),
    _column("Restarts", description="The number of times the containers in this pod have been restarted and when "
            "the last container in this pod has restarted."),
    _AGE,
    _column("IP", priority=1, description="podIP address allocated to the pod. Routable at least within the "
            "cluster. Empty if not yet allocated."),
    _column("Node", priority=1, description="NodeName indicates in which node this pod is scheduled. If empty, this "
            "pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the "
            "kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used "
            "to express a desire for the pod to be scheduled on a specific node. "
            "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename"),
    _column("Nominated Node", priority=1, description="nominatedNodeName is set only when this pod preempts other "
            "pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful "
            "termination periods. This field does not guarantee that the pod will be scheduled on this node. "
            "Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may "
            "also decide to give the resources on this node to a higher priority pod that is created after "
            "preemption. As a result, this field may be different than PodSpec.nodeName when the pod is "
            "scheduled."),
    _column("Readiness Gates", priority=1, description="If specified, all readiness gates will be evaluated for pod "
            "readiness. A pod is ready when all its containers are ready AND all conditions specified in the "
            "readiness gates have status equal to \"True\" More info: "
            "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates"),
]

_Printer = tuple[list[Obj], Callable[[Obj, dt.datetime], list[Cell]]]

_CREATED_AT = [_column("Created At", "date", _AGE_DOC)]
_ROLE_BINDING_COLUMNS = [_column("Role", description="Role or ClusterRole the binding grants"), _AGE,
                         _column("Users", priority=1, description="Users in the roleBinding"),
                         _column("Groups", priority=1, description="Groups in the roleBinding"),
                         _column("ServiceAccounts", priority=1, description="ServiceAccounts in the roleBinding")]
_EVENT_COLUMNS = [_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"),
                  _column("Subobject", priority=1), _column("Source", priority=1), _column("Message"),
                  _column("First Seen", priority=1), _column("Count", priority=1),
                  _column("Name", priority=1, format_="name", description=_NAME_DOC)]

BUILTIN_PRINTERS: dict[tuple[str, str], _Printer] = {
    ("apps", "deployments"): (
        [_column("Ready", description="Number of the pod with ready state"), _column("Up-to-date"),
         _column("Available"), _AGE, *_CONTAINER_COLUMNS, _column("Selector", priority=1)], _deployment),
    ("apps", "statefulsets"): ([_column("Ready"), _AGE, *_CONTAINER_COLUMNS], _statefulset),
    ("apps", "replicasets"): ([_column("Desired", "integer"), _column("Current", "integer"),
                               _column("Ready", "integer"), _AGE, *_CONTAINER_COLUMNS,
                               _column("Selector", priority=1)], _replicaset),
    ("", "namespaces"): ([_column("Status", description="The status of the namespace"), _AGE],
                         lambda o, now: [str(_status(o).get("phase", "")), _age(o, now)]),
    ("", "secrets"): ([_column("Type"), _column("Data"), _AGE],
                      lambda o, now: [str(o.get("type", "")), len(o.get("data") or {}), _age(o, now)]),
    ("", "configmaps"): ([_column("Data"), _AGE],
                         lambda o, now: [len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o, now)]),
    ("", "pods"): (_POD_COLUMNS, _pod),
    ("", "serviceaccounts"): ([_column("Secrets"), _AGE],
                              lambda o, now: [len(o.get("secrets") or []), _age(o, now)]),
    ("", "services"): ([_column("Type"), _column("Cluster-IP"), _column("External-IP"), _column("Port(s)"), _AGE,
                        _column("Selector", priority=1)], _service),
    ("", "events"): (_EVENT_COLUMNS, _event),
    ("events.k8s.io", "events"): (_EVENT_COLUMNS, _event),
    ("coordination.k8s.io", "leases"): ([_column("Holder"), _AGE],
                                        lambda o, now: [str(_spec(o).get("holderIdentity") or ""), _age(o, now)]),
    ("rbac.authorization.k8s.io", "roles"): (_CREATED_AT, _created_at),
    ("rbac.authorization.k8s.io", "clusterroles"): (_CREATED_AT, _created_at),
    ("rbac.authorization.k8s.io", "rolebindings"): (_ROLE_BINDING_COLUMNS, _role_binding),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): (_ROLE_BINDING_COLUMNS, _role_binding),
}
_DEFAULT: _Printer = (_CREATED_AT, _created_at)


# ------------------------------------------------------------------------------------------------------------------
# The Table


def columns(rt: ResourceType) -> list[Obj]:
    """The column definitions the server sends for a resource (every priority)."""
    if rt.custom:
        return _custom_columns(rt)
    if rt.key == ("", "events") or rt.key == ("events.k8s.io", "events"):
        return list(_EVENT_COLUMNS)  # the event printer has no leading Name column
    return [_NAME, *BUILTIN_PRINTERS.get(rt.key, _DEFAULT)[0]]


def cells(rt: ResourceType, obj: Obj, now: dt.datetime) -> list[Cell]:
    """One object's row, evaluated as the server does."""
    if rt.custom:
        specs = _custom_specs(rt)
        return [str(obj["metadata"]["name"])] + [custom_cell(str(c.get("type", "string")),
                                                              jsonpath(obj, str(c["jsonPath"])), now) for c in specs]
    if rt.key in (("", "events"), ("events.k8s.io", "events")):
        return _event(obj, now)
    return [str(obj["metadata"]["name"]), *BUILTIN_PRINTERS.get(rt.key, _DEFAULT)[1](obj, now)]


def partial_metadata(obj: Obj, api_version: str = "meta.k8s.io/v1") -> Obj:
    """What `includeObject=Metadata` puts in a row: the object's metadata as PartialObjectMetadata."""
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": obj.get("metadata", {})}


def to_table(rt: ResourceType, objects: Sequence[Obj], *, resource_version: str = "", include_object: str = "Metadata",
             api_version: str = "meta.k8s.io/v1", now: dt.datetime | None = None) -> Obj:
    """The Table the server answers a GET or LIST asking for one."""
    moment = now or dt.datetime.now(dt.UTC)
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(rt, obj, moment)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj, api_version)
        else:
            row["object"] = None
        rows.append(row)
    return {"kind": "Table", "apiVersion": api_version, "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": columns(rt), "rows": rows}


def wanted_table_version(accept: str) -> str | None:
    """`meta.k8s.io/v1` (or v1beta1) when the Accept header asks for a Table before anything else it accepts."""
    for media in accept.split(","):
        params = dict(part.strip().partition("=")[::2] for part in media.split(";")[1:])
        kind = media.split(";")[0].strip()
        if kind not in ("application/json", "*/*", "application/*"):
            continue
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return f"meta.k8s.io/{params['v']}"
        if "as" not in params:
            return None
    return None
