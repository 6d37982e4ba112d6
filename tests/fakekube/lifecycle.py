"""What happens around a deletion in a real cluster, done at once inside the DELETE request.

- Namespace (pkg/controller/namespace/deletion/namespaced_resources_deleter.go): the namespace turns
  `Terminating` (deletionTimestamp set, phase Terminating; one MODIFIED event) and the DELETE is answered with it;
  then every object in it is deleted, then the namespace itself. By default the emptying is finished before the
  answer; with `namespace_termination_delay` it happens that many seconds later (the namespace controller's
  pace), and meanwhile a create in the namespace is refused with the NamespaceLifecycle admission plugin's 403
  (plugin/pkg/admission/namespace/lifecycle/admission.go).
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
import threading
import time
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
    if namespace["metadata"].get("deletionTimestamp"):
        return store.get(NAMESPACES, "", namespace["metadata"]["name"])  # already going: nothing more to do
    name = namespace["metadata"]["name"]
    terminating = store.mark_terminating(NAMESPACES, namespace)
    if store.namespace_termination_delay > 0:
        store.terminating_namespaces[name] = time.monotonic() + store.namespace_termination_delay
        return terminating
    finish_namespace(store, name)
    return terminating


def finish_namespace(store: Store, name: str) -> None:
    """What the namespace controller does to a Terminating namespace: delete its content, then it."""
    store.terminating_namespaces.pop(name, None)
    if ("", name) not in store.objects[NAMESPACES.key]:
        return
    for rt in store.served_kinds():
        if not rt.namespaced:
            continue
        for (object_namespace, _), obj in sorted(store.objects[rt.key].items()):
            if object_namespace == name:
                store.remove(rt, obj)
    store.remove(NAMESPACES, store.objects[NAMESPACES.key][("", name)])


def refuse_in_terminating_namespace(namespace: Obj, rt: ResourceType, name: str) -> None:
    """The NamespaceLifecycle admission plugin: no new content in a namespace that is being deleted."""
    if (namespace.get("status") or {}).get("phase") != "Terminating":
        return
    from tests.fakekube.store import ApiError

    ns = namespace["metadata"]["name"]
    raise ApiError(403, "Forbidden", f'{rt.qualified} "{name}" is forbidden: unable to create new content in '
                   f"namespace {ns} because it is being terminated",
                   {"name": name, "group": rt.group, "kind": rt.plural, "causes": [
                       {"reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated",
                        "field": "metadata.namespace"}]})


class NamespaceController:
    """Empties namespaces whose termination delay is over (a thread, stopped with the server)."""

    def __init__(self, store: Store, stopping: threading.Event) -> None:
        self.store = store
        self.stopping = stopping
        self.thread = threading.Thread(target=self._run, name="fakekube-namespace-controller", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self) -> None:
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def _run(self) -> None:
        with self.store.lock:
            while not self.stopping.is_set():
                now = time.monotonic()
                for name, due in list(self.store.terminating_namespaces.items()):
                    if due <= now:
                        finish_namespace(self.store, name)
                self.store.changed.wait(0.05)


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
