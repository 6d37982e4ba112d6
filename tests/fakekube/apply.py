"""Server-side apply and `metadata.managedFields`, simplified from structured-merge-diff as the API server runs it.

What it follows upstream (Kubernetes 1.33):
- every write records which manager set which fields (k8s.io/apimachinery `pkg/util/managedfields/internal/`:
  `managedfieldsupdater.go`, `stripmeta.go`, `managedfields.go` for the entry order); an Update takes the fields it
  changed from their previous owners without conflict; a no-op write changes no entry (and so no time);
- an apply (PATCH `application/apply-patch+yaml`, `fieldManager` required) creates the object when absent, merges
  the applied configuration into the live object, conflicts (409, `Apply failed with N conflict(s): ...`, from
  `internal/conflict.go`) when it changes a field another manager owns, takes those fields with `force=true`, and
  removes the fields the manager applied before but no longer applies, unless another manager owns them
  (the server-side apply documentation, "Merge strategy" and "Conflicts");
- lists merge by the schema's `x-kubernetes-list-type` (`map` with `x-kubernetes-list-map-keys`, `set`), atomic
  otherwise; for built-in kinds the list keys of their Go types (containers by name, ports by containerPort and
  protocol, ...).

Simplified: field sets are flat sets of paths (no versioned sets, no conversion between API versions), list items
keep the live order with new items appended, and `managedFields` sent by a client is ignored (the server keeps its
own record) instead of being validated and adopted.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]  # fieldsV1 keys: "f:spec", 'k:{"name":"main"}', 'v:"x"'

# The metadata the server owns: never part of a field set (stripmeta.go).
_STRIPPED_METADATA = ("name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation",
                      "managedFields", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds")

# Associative lists of built-in kinds (their Go types' listType=map / patchMergeKey): field name -> keys.
_BUILTIN_LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",), "env": ("name",),
    "volumes": ("name",), "volumeMounts": ("mountPath",), "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",), "conditions": ("type",), "ownerReferences": ("uid",),
    "ports": ("containerPort", "protocol"), "hostAliases": ("ip",), "topologySpreadConstraints":
        ("topologyKey", "whenUnsatisfiable"), "resourceClaims": ("name",),
}
_BUILTIN_SETS = ("finalizers",)
# Defaults a key field takes when left out (ports are keyed by containerPort and protocol, protocol TCP).
_KEY_DEFAULTS = {"protocol": "TCP"}


@dataclass
class Manager:
    """One managedFields entry: who, how (Apply or Update), through which subresource, and the fields it owns."""

    manager: str
    operation: str
    api_version: str
    subresource: str = ""
    time: str = ""
    fields: set[Path] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str, str, str]:
        # BuildManagerIdentifier: an applier is one manager whatever apiVersion it applied with.
        return (self.manager, self.operation, self.api_version if self.operation == "Update" else "",
                self.subresource)

    def described(self) -> str:
        """printManager: `"name"`, with `with subresource "x"` and, for an Update, `using <apiVersion>`."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text

    def entry(self) -> Obj:
        result: Obj = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version,
                       "time": self.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(self.fields)}
        if self.subresource:
            result["subresource"] = self.subresource
        return result


class ApplyConflict(Exception):
    """Fields another manager owns would change: the 409 the server answers."""

    def __init__(self, conflicts: list[tuple[Manager, Path]]) -> None:
        self.conflicts = conflicts
        super().__init__(self.message())

    def message(self) -> str:
        if len(self.conflicts) == 1:
            owner, path = self.conflicts[0]
            return f"Apply failed with 1 conflict: conflict with {owner.described()}: {path_string(path)}"
        lines: list[str] = []
        for described in sorted({owner.described() for owner, _ in self.conflicts}):
            lines.append(f"conflicts with {described}:")
            lines += [f"- {path_string(p)}" for owner, p in self.conflicts if owner.described() == described]
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    def status(self) -> Obj:
        causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {owner.described()}",
                   "field": path_string(path)} for owner, path in self.conflicts]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message(),
                "reason": "Conflict", "details": {"causes": causes}, "code": 409}


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------------------------
# Paths and field sets

def path_string(path: Path) -> str:
    """fieldpath.Path.String(): `.spec.replicas`, `.spec.containers[name="main"].image`, `.finalizers[="x"]`."""
    text = ""
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            text += "." + rest
        elif kind == "k":
            keys = json.loads(rest)
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
        elif kind == "v":
            text += f"[={rest}]"
        else:
            text += f"[{rest}]"
    return text


def to_fields_v1(fields: set[Path]) -> Obj:
    """The fieldsV1 trie: a node that is itself owned and has children carries `".": {}`."""
    root: Obj = {}
    for path in sorted(fields):
        node = root
        for element in path:
            node = node.setdefault(element, {})
    for path in fields:
        node = root
        for element in path:
            node = node[element]
        if node:
            node["."] = {}
    return root


def from_fields_v1(trie: Obj, prefix: Path = ()) -> set[Path]:
    found: set[Path] = set()
    for element, child in trie.items():
        if element == ".":
            found.add(prefix)
            continue
        path = (*prefix, element)
        if not child:
            found.add(path)
        else:
            found |= from_fields_v1(child, path)
    return found


@dataclass(frozen=True)
class Shape:
    """How a node merges: its schema (custom resources) or, with none, the built-in list keys by field name."""

    schema: Obj | None

    def child(self, name: str) -> Shape:
        if self.schema is None:
            return self
        properties = self.schema.get("properties") or {}
        if name in properties:
            return Shape(properties[name])
        additional = self.schema.get("additionalProperties")
        if isinstance(additional, dict):
            return Shape(additional)
        return Shape({"x-kubernetes-preserve-unknown-fields": True})

    def items(self) -> Shape:
        if self.schema is None:
            return self
        items = self.schema.get("items")
        return Shape(items if isinstance(items, dict) else {})

    def list_kind(self, name: str) -> tuple[str, tuple[str, ...]]:
        if self.schema is None:
            if name in _BUILTIN_LIST_KEYS:
                return "map", _BUILTIN_LIST_KEYS[name]
            return ("set", ()) if name in _BUILTIN_SETS else ("atomic", ())
        kind = str(self.schema.get("x-kubernetes-list-type", "atomic"))
        return kind, tuple(self.schema.get("x-kubernetes-list-map-keys") or ())

    def atomic_map(self) -> bool:
        return self.schema is not None and self.schema.get("x-kubernetes-map-type") == "atomic"


def _item_key(item: Any, keys: tuple[str, ...]) -> str:
    chosen = {k: item.get(k, _KEY_DEFAULTS.get(k)) for k in keys if isinstance(item, dict)}
    return "k:" + json.dumps({k: v for k, v in sorted(chosen.items()) if v is not None}, separators=(",", ":"))


def _children(value: Any, shape: Shape, name: str) -> Iterator[tuple[str, Any, Shape, bool]]:
    """(path element, child value, child shape, whether the child node is itself a member) of a granular node."""
    if isinstance(value, dict) and value and not shape.atomic_map():
        for key, child in value.items():
            yield f"f:{key}", child, shape.child(key), False
    elif isinstance(value, list):
        kind, keys = shape.list_kind(name)
        if kind == "map" and keys:
            for item in value:
                yield _item_key(item, keys), item, shape.items(), True
        elif kind == "set":
            for item in value:
                yield "v:" + json.dumps(item, separators=(",", ":"), sort_keys=True), item, shape.items(), False


def _granular(value: Any, shape: Shape, name: str) -> bool:
    if isinstance(value, dict):
        return bool(value) and not shape.atomic_map()
    if isinstance(value, list):
        return shape.list_kind(name)[0] in ("map", "set") and bool(value)
    return False


def field_set(value: Any, shape: Shape, prefix: Path = (), name: str = "") -> set[Path]:
    """Every field path `value` sets: leaves, atomic values, and associative list items themselves."""
    found: set[Path] = set()
    for element, child, child_shape, member in _children(value, shape, name):
        path = (*prefix, element)
        child_name = element[2:] if element.startswith("f:") else name
        if member:
            found.add(path)
        if _granular(child, child_shape, child_name):
            found |= field_set(child, child_shape, path, child_name)
        elif not member or not isinstance(child, dict):
            found.add(path)
        else:
            found |= field_set(child, child_shape, path, child_name)
    return found


def object_fields(obj: Obj, shape: Shape, subresource: str, status_subresource: bool) -> set[Path]:
    """The fields of an object a manager can own through `subresource` ("" for the main resource)."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _STRIPPED_METADATA}
    if subresource == "status":
        body = {"status": body["status"]} if "status" in body else {}
        meta = {}
    elif status_subresource:
        body.pop("status", None)
    if meta:
        body["metadata"] = meta
    return field_set(body, shape)


def value_at(value: Any, path: Path, shape: Shape, name: str = "") -> Any:
    """The value at a path, or `_MISSING`."""
    for element in path:
        found = _MISSING
        for child_element, child, child_shape, _ in _children(value, shape, name):
            if child_element == element:
                found, shape = child, child_shape
                break
        if found is _MISSING:
            return _MISSING
        name = element[2:] if element.startswith("f:") else name
        value = found
    return value


_MISSING: Any = object()


def _drop(value: Any, path: Path, shape: Shape, name: str = "") -> None:
    """Remove the node at `path` from `value` (in place)."""
    if not path:
        return
    element, rest = path[0], path[1:]
    if isinstance(value, dict) and element.startswith("f:"):
        key = element[2:]
        if key not in value:
            return
        if rest:
            _drop(value[key], rest, shape.child(key), key)
        else:
            del value[key]
    elif isinstance(value, list):
        kind, keys = shape.list_kind(name)
        for index, item in enumerate(value):
            element_of = (_item_key(item, keys) if kind == "map" else
                          "v:" + json.dumps(item, separators=(",", ":"), sort_keys=True))
            if element_of == element:
                if rest:
                    _drop(item, rest, shape.items(), name)
                else:
                    del value[index]
                return


# --------------------------------------------------------------------------------------------------------------
# Merging an applied configuration

def merge(live: Any, applied: Any, shape: Shape, name: str = "") -> Any:
    """The applied configuration merged into the live value: maps by key, associative lists by item key, sets by
    value; atomic values are replaced."""
    if isinstance(applied, dict) and isinstance(live, dict) and not shape.atomic_map():
        result = dict(live)
        for key, value in applied.items():
            result[key] = merge(live.get(key, _MISSING), value, shape.child(key), key) if key in live else \
                copy.deepcopy(value)
        return result
    if isinstance(applied, list) and isinstance(live, list):
        kind, keys = shape.list_kind(name)
        if kind == "map" and keys:
            result_list = [copy.deepcopy(item) for item in live]
            index = {_item_key(item, keys): i for i, item in enumerate(result_list)}
            for item in applied:
                at = index.get(_item_key(item, keys))
                if at is None:
                    result_list.append(copy.deepcopy(item))
                else:
                    result_list[at] = merge(result_list[at], item, shape.items(), name)
            return result_list
        if kind == "set":
            return [copy.deepcopy(v) for v in live] + [copy.deepcopy(v) for v in applied if v not in live]
    return copy.deepcopy(applied)


def read_managers(obj: Obj | None) -> list[Manager]:
    entries = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    return [Manager(str(e.get("manager", "")), str(e.get("operation", "Update")), str(e.get("apiVersion", "")),
                    str(e.get("subresource", "")), str(e.get("time", "")), from_fields_v1(e.get("fieldsV1") or {}))
            for e in entries if isinstance(e, dict)]


def write_managers(obj: Obj, managers: list[Manager]) -> None:
    kept = sorted((m for m in managers if m.fields), key=lambda m: (m.operation, m.time, m.manager, m.api_version,
                                                                     m.subresource))
    meta = obj.setdefault("metadata", {})
    if kept:
        meta["managedFields"] = [m.entry() for m in kept]
    else:
        meta.pop("managedFields", None)


def _within(path: Path, fields: set[Path]) -> bool:
    """Whether `fields` holds `path` or anything under it."""
    return any(owned[:len(path)] == path for owned in fields)


def _changed(before: Any, after: Any, path: Path, shape: Shape) -> bool:
    """Whether a write changed the field at `path`. An associative list item present before and after is not
    itself changed (only its fields are), as structured-merge-diff's comparison reports it."""
    was, now = value_at(before, path, shape), value_at(after, path, shape)
    if path and path[-1].startswith("k:") and was is not _MISSING and now is not _MISSING:
        return False
    return bool(was != now)


def apply(live: Obj | None, config: Obj, *, shape: Shape, manager: str, api_version: str, force: bool,
          subresource: str, status_subresource: bool) -> Obj:
    """The object after `manager` applies `config` to `live` (None: it does not exist yet), with its
    managedFields. Raises ApplyConflict when the apply would change fields other managers own."""
    config = copy.deepcopy(config)
    config_meta = {k: v for k, v in (config.get("metadata") or {}).items() if k not in _STRIPPED_METADATA}
    applied_fields = object_fields({**config, "metadata": config_meta}, shape, subresource, status_subresource)
    base = copy.deepcopy(live) if live is not None else {"metadata": {}}
    managers = read_managers(live)
    own = next((m for m in managers if m.key == (manager, "Apply", "", subresource)), None)
    others = [m for m in managers if m is not own]
    config_body = {k: v for k, v in config.items() if k not in ("apiVersion", "kind", "metadata")}
    if subresource == "status":
        config_body = {"status": config_body["status"]} if "status" in config_body else {}
        config_meta = {}
    elif status_subresource:
        config_body.pop("status", None)
    # name and namespace are the server's to own, but they name the object an apply creates.
    identity = {k: v for k, v in (config.get("metadata") or {}).items() if k in ("name", "namespace")}
    merged: Obj = merge(base, {**config_body, "metadata": {**identity, **config_meta}}, shape)
    # Fields this manager applied before and no longer applies go, unless someone else owns them.
    if own is not None:
        for path in sorted(own.fields - applied_fields, key=len, reverse=True):
            if not any(_within(path, other.fields) for other in others):
                _drop(merged, path, shape)
    changed = {path for path in applied_fields if _changed(base, merged, path, shape)}
    conflicts = sorted(((other, path) for other in others for path in changed & other.fields),
                       key=lambda pair: (pair[0].described(), path_string(pair[1])))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for other, path in conflicts:
        other.fields.discard(path)
    unchanged = live is not None and merged == live and own is not None and own.fields == applied_fields
    if unchanged and live is not None:
        return copy.deepcopy(live)
    if own is None:
        own = Manager(manager, "Apply", api_version, subresource)
    own.fields = applied_fields
    own.api_version = api_version
    own.time = now_rfc3339()
    write_managers(merged, [*others, own])
    return merged


def keep_times_of_a_no_op(old: Obj, new: Obj) -> None:
    """fieldmanager/equality.go IgnoreManagedFieldsTimestampsTransformer: where a write leaves the object as it
    was but for the times of its managedFields entries (the same entries, in the same order), the old times are
    kept, so that a time is never the only change stored. A re-apply of the same manifest whose merge drops a
    default (an atomic list's item written without it, defaulted again on the way in) is then a no-op, whether
    or not the wall clock's second moved meanwhile."""
    old_entries = old.get("metadata", {}).get("managedFields")
    new_entries = new.get("metadata", {}).get("managedFields")
    if not old_entries or not new_entries or len(old_entries) != len(new_entries):
        return
    if [{**entry, "time": None} for entry in new_entries] != [{**entry, "time": None} for entry in old_entries]:
        return
    # The entries differ in their times only, so with the old ones the object is the old one, or changed elsewhere.
    if {**new, "metadata": {**new["metadata"], "managedFields": old_entries}} == old:
        new["metadata"]["managedFields"] = copy.deepcopy(old_entries)


def record_update(old: Obj | None, new: Obj, *, shape: Shape, manager: str, api_version: str, subresource: str,
                  status_subresource: bool) -> None:
    """Give `manager` (an Update) the fields this write changed, taking them from their owners; forget removed
    fields. `new` gets its managedFields (the old record when nothing changed)."""
    managers = read_managers(old)
    old_fields = object_fields(old, shape, subresource, status_subresource) if old is not None else set()
    new_fields = object_fields(new, shape, subresource, status_subresource)
    removed = old_fields - new_fields
    changed = {path for path in new_fields if path not in old_fields or _changed(old, new, path, shape)}
    if not changed and not removed:
        write_managers(new, managers)
        return
    for entry in managers:
        entry.fields -= changed | removed
    mine = next((m for m in managers if m.key == (manager, "Update", api_version, subresource)), None)
    if mine is None:
        mine = Manager(manager, "Update", api_version, subresource)
        managers.append(mine)
    mine.fields |= changed
    if changed:
        mine.time = now_rfc3339()
    write_managers(new, managers)
