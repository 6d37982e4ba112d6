"""Label and field selectors as the API server parses them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Requirement = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"\s*(!?)\s*({_KEY})\s*(?:(notin|in)\s*\(([^)]*)\)|(==|!=|=)\s*([-A-Za-z0-9_.]*))?\s*$")


class SelectorError(ValueError):
    """A selector the server cannot parse: 400 BadRequest."""


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t for t in (term.strip() for term in terms) if t]


def parse_label_selector(selector: str) -> Requirement:
    """`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, joined by commas (AND)."""
    requirements: list[Requirement] = []
    for term in _split_terms(selector):
        match = _SET_RE.fullmatch(term)
        if not match:
            raise SelectorError(f"unable to parse requirement: {term!r}")
        negated, key, set_op, values, op, value = match.groups()
        if negated and (set_op or op):
            raise SelectorError(f"unable to parse requirement: {term!r}")
        requirements.append(_requirement(key, set_op or op or ("!" if negated else ""), values, value))
    return lambda labels: all(requirement(labels) for requirement in requirements)


def _requirement(key: str, op: str, values: str | None, value: str | None) -> Requirement:
    allowed = {v.strip() for v in (values or "").split(",") if v.strip()}

    def requirement(labels: Mapping[str, str]) -> bool:
        if op == "in":
            return labels.get(key) in allowed
        if op == "notin":
            return labels.get(key) not in allowed
        if op in ("=", "=="):
            return labels.get(key) == value
        if op == "!=":
            return labels.get(key) != value
        if op == "!":
            return key not in labels
        return key in labels

    return requirement


FieldGetter = Callable[[Mapping[str, Any]], str]


def _at(*path: str) -> FieldGetter:
    def get(obj: Mapping[str, Any]) -> str:
        node: Any = obj
        for step in path:
            node = node.get(step) if isinstance(node, Mapping) else None
        return "" if node is None else str(node).lower() if isinstance(node, bool) else str(node)

    return get


def _first(*getters: FieldGetter) -> FieldGetter:
    return lambda obj: next((value for value in (get(obj) for get in getters) if value), "")


# generic.ObjectMetaFieldsSet: every resource can be selected by name and namespace.
_META: dict[str, FieldGetter] = {"metadata.name": _at("metadata", "name"),
                                 "metadata.namespace": _at("metadata", "namespace")}

# pkg/registry/core/event/strategy.go ToSelectableFields (core/v1 Event): `source` falls back to the
# reporting controller for events written through events.k8s.io.
_CORE_EVENT: dict[str, FieldGetter] = {
    **{f"involvedObject.{name}": _at("involvedObject", name)
       for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": _at("reason"),
    "reportingComponent": _at("reportingComponent"),
    "source": _first(_at("source", "component"), _at("reportingComponent")),
    "type": _at("type"),
}

# pkg/apis/events/v1/conversion.go AddFieldLabelConversionsForEvent: events.k8s.io/v1 accepts its own spellings
# (regarding.*, reportingController), mapped onto the core fields; the core spellings are refused there.
_EVENTS_V1: dict[str, FieldGetter] = {
    **{f"regarding.{name}": _at("regarding", name)
       for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": _at("reason"),
    "reportingController": _at("reportingController"),
    "source": _first(_at("deprecatedSource", "component"), _at("reportingController")),
    "type": _at("type"),
}


def _pod_ip(obj: Mapping[str, Any]) -> str:
    """The internal pod's first PodIP: status.podIP when set (Convert_v1_PodStatus_To_core_PodStatus), else
    status.podIPs[0]."""
    status = obj.get("status") or {}
    ips = status.get("podIPs") or []
    return str(status.get("podIP") or (ips[0].get("ip") if ips and isinstance(ips[0], Mapping) else "") or "")


# pkg/registry/core/pod/strategy.go ToSelectableFields, for the labels pkg/apis/core/v1/conversion.go accepts for a
# Pod: `spec.host` is the old spelling of spec.nodeName; `status.podIPs` is accepted but not a selectable field, so it
# reads as empty (`status.podIPs=` selects every pod, any other value none).
_POD: dict[str, FieldGetter] = {
    "spec.nodeName": _at("spec", "nodeName"),
    "spec.host": _at("spec", "nodeName"),
    "spec.restartPolicy": _at("spec", "restartPolicy"),
    "spec.schedulerName": _at("spec", "schedulerName"),
    "spec.serviceAccountName": _at("spec", "serviceAccountName"),
    "spec.hostNetwork": lambda obj: "true" if (obj.get("spec") or {}).get("hostNetwork") is True else "false",
    "status.phase": _at("status", "phase"),
    "status.podIP": _pod_ip,
    "status.podIPs": lambda _: "",
    "status.nominatedNodeName": _at("status", "nominatedNodeName"),
}

# Other built-in kinds' SelectableFields the tests may use (pkg/registry/core/{secret,namespace}/strategy.go).
_BUILTIN_EXTRA: dict[tuple[str, str], dict[str, FieldGetter]] = {
    ("", "pods"): _POD,
    ("", "events"): _CORE_EVENT,
    ("events.k8s.io", "events"): _EVENTS_V1,
    ("", "secrets"): {"type": _at("type")},
    ("", "namespaces"): {"status.phase": _at("status", "phase")},
}


def selectable_fields(group: str, plural: str, custom_fields: tuple[str, ...] = ()) -> dict[str, FieldGetter]:
    """The field labels a resource can be selected by, with how to read each from a stored object. A custom
    resource adds its CRD's `selectableFields` (JSONPaths such as `.spec.color`, selected as `spec.color`)."""
    fields = dict(_META)
    fields.update(_BUILTIN_EXTRA.get((group, plural), {}))
    for json_path in custom_fields:
        fields[json_path.lstrip(".")] = _at(*json_path.lstrip(".").split("."))
    return fields


def parse_field_selector(selector: str, fields: Mapping[str, FieldGetter] | None = None,
                         ) -> Callable[[Mapping[str, Any]], bool]:
    """`involvedObject.name=x,type!=Normal`: terms joined by commas (AND), each `=`, `==` or `!=` on a field the
    resource supports; any other field is the server's 400 `field label not supported: <field>`."""
    known = _META if fields is None else fields
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    for term in _split_terms(selector):
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)", term)
        if not match:
            raise SelectorError(f"invalid selector: {term!r}; can't understand {term!r}")
        field, op, value = match.groups()
        if field not in known:
            raise SelectorError(f"field label not supported: {field}")
        read = known[field]

        def check(obj: Mapping[str, Any], r: FieldGetter = read, v: str = value, o: str = op) -> bool:
            return r(obj) != v if o == "!=" else r(obj) == v

        checks.append(check)
    return lambda obj: all(check(obj) for check in checks)
