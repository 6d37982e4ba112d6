"""What happens around a deletion in a real cluster, done at once inside the DELETE request.

- Namespace (pkg/controller/namespace/deletion/namespaced_resources_deleter.go): the namespace turns
  `Terminating` (deletionTimestamp set, phase Terminating; one MODIFIED event), every object in it is deleted,
  then the namespace itself. The real server answers the DELETE while the namespace is still Terminating and its
  controller empties it afterwards; here the emptying is finished before the answer, so nothing can be created in
  a half-deleted namespace (the real server refuses that with 403 anyway).
- CustomResourceDefinition (apiextensions-apiserver pkg/controller/finalizer/crd_finalizer.go): every custom
  resource of the kind is deleted (watchers get DELETED events), then the CRD; its kind stops being served, open
  watches on it end, and later requests get 404.
- Garbage collection (pkg/controller/garbagecollector/garbagecollector.go) for objects carrying
  ownerReferences, by the request's propagationPolicy: Background (the default) deletes the owner, then its
  dependents; Foreground deletes the dependents first, then the owner (the real owner stays visible with a
  deletionTimestamp until then; here it is gone in the same request); Orphan removes the owner's reference from
  each dependent and keeps it. A dependent another live owner still holds only loses the dangling reference.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from tests.fakekube.resources import CRDS, NAMESPACES, Obj, ResourceType, from_crd

if TYPE_CHECKING:
    from tests.fakekube.store import Store

PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")


def delete(store: Store, rt: ResourceType, obj: Obj, propagation: str | None) -> Obj:
    """Delete a stored object and what the real cluster deletes with it; the answer is the object as deleted."""
    policy = propagation or "Background"
    if rt.key == NAMESPACES.key:
        return _delete_namespace(store, obj)
    if rt.key == CRDS.key:
        return _delete_crd(store, obj)
    if policy == "Orphan":
        _orphan_dependents(store, obj)
        return store.remove(rt, obj)
    if policy == "Foreground":
        _delete_dependents(store, obj, "Foreground")
        return store.remove(rt, obj)
    removed = store.remove(rt, obj)
    _delete_dependents(store, obj, "Background")
    return removed


def _delete_namespace(store: Store, namespace: Obj) -> Obj:
    name = namespace["metadata"]["name"]
    terminating = store.mark_terminating(NAMESPACES, namespace)
    for rt in store.served_kinds():
        if not rt.namespaced:
            continue
        for (object_namespace, _), obj in sorted(store.objects[rt.key].items()):
            if object_namespace == name:
                store.remove(rt, obj)
    store.remove(NAMESPACES, store.objects[NAMESPACES.key][("", name)])
    return terminating


def _delete_crd(store: Store, crd: Obj) -> Obj:
    for rt in from_crd(crd)[:1]:  # every served version shares one storage
        for obj in [o for _, o in sorted(store.objects.get(rt.key, {}).items())]:
            delete(store, rt, obj, "Background")
    return store.remove(CRDS, crd)


def _dependents(store: Store, owner: Obj) -> list[tuple[ResourceType, Obj]]:
    if not store.owner_references_seen:
        return []
    uid = owner["metadata"].get("uid")
    found: list[tuple[ResourceType, Obj]] = []
    for rt in store.served_kinds():
        for obj in store.objects[rt.key].values():
            if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or []):
                found.append((rt, obj))
    return found


def _owner_exists(store: Store, dependent: Obj, ref: Obj) -> bool:
    group = str(ref.get("apiVersion", "")).rpartition("/")[0]
    for rt in store.served_kinds():
        if rt.group == group and rt.kind == ref.get("kind"):
            namespace = dependent["metadata"].get("namespace", "") if rt.namespaced else ""
            owner = store.objects[rt.key].get((namespace, str(ref.get("name"))))
            return owner is not None and owner["metadata"].get("uid") == ref.get("uid")
    return False


def _without_owner(store: Store, rt: ResourceType, dependent: Obj, uid: str) -> None:
    updated = copy.deepcopy(dependent)
    references = [r for r in updated["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
    if references:
        updated["metadata"]["ownerReferences"] = references
    else:
        updated["metadata"].pop("ownerReferences", None)
    store.replace(rt, dependent, updated)


def _orphan_dependents(store: Store, owner: Obj) -> None:
    for rt, dependent in _dependents(store, owner):
        _without_owner(store, rt, dependent, owner["metadata"]["uid"])


def _delete_dependents(store: Store, owner: Obj, policy: str) -> None:
    uid = owner["metadata"]["uid"]
    for rt, dependent in _dependents(store, owner):
        others = [r for r in dependent["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        if any(_owner_exists(store, dependent, ref) for ref in others):
            _without_owner(store, rt, dependent, uid)
        elif store.objects[rt.key].get((dependent["metadata"].get("namespace", ""),
                                         dependent["metadata"]["name"])) is dependent:
            delete(store, rt, dependent, policy)
