"""The fake server's storage: objects, one global resourceVersion counter, and the event history watches replay.

It applies the registry rules of the real kube-apiserver that an operator can observe: resourceVersion on every
write, optimistic concurrency (409), generation bumped on spec changes only, the status and scale subresources,
uid and creationTimestamp, and a bounded event window (older resourceVersions are 410 Gone).
"""

from __future__ import annotations

import copy
import datetime as dt
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.fakekube import apply as ssa
from tests.fakekube import lifecycle, openapi, patches, pods, schema, strategies, validation
from tests.fakekube.resources import (
    BUILTIN,
    CORE_EVENTS,
    CRDS,
    DEPLOYMENTS,
    NAMESPACES,
    PODS,
    Obj,
    ResourceType,
    from_crd,
)

# Writes made through the FakeKube helpers (tests' fixtures) rather than over HTTP.
DEFAULT_MANAGER = "fakekube"
_SYSTEM_METADATA = ("uid", "creationTimestamp", "generation", "resourceVersion", "deletionTimestamp", "selfLink")


class ApiError(Exception):
    """An error answer, carried as the Status object the real server sends."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> Obj:
        body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": self.message, "reason": self.reason}
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found',
                    {"name": name, "group": rt.group, "kind": rt.plural})


def conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    {"name": name, "group": rt.group, "kind": rt.plural})


def invalid(rt: ResourceType, name: str, field: str, message: str) -> ApiError:
    """A 422 for one field, worded like `errors.NewInvalid` (`Kind.group "name" is invalid: field: message`)."""
    reason = "FieldValueRequired" if message.startswith("Required value") else "FieldValueInvalid"
    return invalid_fields(rt, name, [validation.FieldError(reason, field, text=message)])


def invalid_fields(rt: ResourceType, name: str, errors: list[validation.FieldError]) -> ApiError:
    status = validation.invalid_status(rt.kind, rt.group, name, errors)
    return ApiError(422, "Invalid", status["message"], status["details"])


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WatchEvent:
    """One change, as a watch sends it. `previous` lets a filtered watch turn a change into ADDED/DELETED."""

    resource_version: int
    key: tuple[str, str]
    type: str  # ADDED, MODIFIED, DELETED
    object: Obj
    previous: Obj | None


class Store:
    """All objects of the fake cluster. Thread-safe: every method takes the one lock."""

    def __init__(self, *, history_limit: int = 1000) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.revision = 1
        self.history: list[WatchEvent] = []
        self.history_limit = history_limit
        # Events at or before this revision are gone: a watch from an older resourceVersion gets 410.
        self.compacted = 0
        self.objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        # Whether any object ever carried ownerReferences: until one does, a deletion need not look for dependents
        # (keeps deletions cheap at the capacity benchmark's 20,000 objects).
        self.owner_references_seen = False
        # Seconds a deleted namespace stays Terminating before its content goes (0: within the DELETE request).
        self.namespace_termination_delay = 0.0
        self.terminating_namespaces: dict[str, float] = {}  # name -> when (time.monotonic) its content goes
        self.on_write: list[Callable[[ResourceType, Obj, Obj | None], None]] = []
        from tests.fakekube import rbac

        for rt in (*BUILTIN, *rbac.TYPES):
            self.register(rt)
        for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(NAMESPACES, "", {"metadata": {"name": namespace}})

    # ----------------------------------------------------------------------------------------------------------
    # Types

    def register(self, rt: ResourceType) -> None:
        with self.lock:
            self.types[(rt.group, rt.version, rt.plural)] = rt
            self.objects.setdefault(rt.key, {})

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self.lock:
            return self.types.get((group, version, plural))

    def served_kinds(self) -> list[ResourceType]:
        """One served type per storage (group and plural), built-in and custom."""
        with self.lock:
            return list({rt.key: rt for rt in self.types.values()}.values())

    def find_kind(self, kind_or_name: str) -> ResourceType | None:
        """A type by plural, kind or short name, as `kubectl get` resolves it."""
        wanted = kind_or_name.lower()
        with self.lock:
            for rt in self.types.values():
                if wanted in (rt.plural, rt.kind.lower(), *rt.short_names, rt.qualified):
                    return rt
        return None

    # ----------------------------------------------------------------------------------------------------------
    # Reads

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self.objects[rt.key].get((namespace, name))
            if obj is None:
                raise not_found(rt, name)
            return self._present(rt, obj)

    def list(self, rt: ResourceType, namespace: str | None,
             match: Callable[[Obj], bool] = lambda _: True) -> tuple[list[Obj], int]:
        """Objects (sorted by namespace then name, like etcd keys) and the list's resourceVersion."""
        with self.lock:
            items = [self._present(rt, obj) for (ns, _), obj in sorted(self.objects[rt.key].items())
                     if (namespace is None or ns == namespace) and match(obj)]
            return items, self.revision

    def _present(self, rt: ResourceType, obj: Obj) -> Obj:
        shown = copy.deepcopy(obj)
        shown["apiVersion"] = rt.api_version
        shown["kind"] = rt.kind
        return shown

    # ----------------------------------------------------------------------------------------------------------
    # Writes

    def _commit(self, rt: ResourceType, event_type: str, obj: Obj, previous: Obj | None) -> Obj:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        namespace = obj["metadata"].get("namespace", "")
        name = obj["metadata"]["name"]
        if event_type == "DELETED":
            self.objects[rt.key].pop((namespace, name), None)
        else:
            self.objects[rt.key][(namespace, name)] = obj
            self.owner_references_seen = self.owner_references_seen or bool(obj["metadata"].get("ownerReferences"))
        self.history.append(WatchEvent(self.revision, rt.key, event_type, copy.deepcopy(obj),
                                       copy.deepcopy(previous) if previous is not None else None))
        if len(self.history) > self.history_limit:
            dropped = self.history[: len(self.history) - self.history_limit]
            self.history = self.history[len(dropped):]
            self.compacted = dropped[-1].resource_version
        if rt.key == CRDS.key:
            self._crd_changed(obj, event_type)
        self.changed.notify_all()
        for hook in self.on_write:
            hook(rt, obj, previous)
        return self._present(rt, obj)

    def _crd_changed(self, crd: Obj, event_type: str) -> None:
        """A CRD's kind is served from its creation to its deletion, in the versions it currently serves."""
        uid = crd["metadata"].get("uid")
        for key, rt in list(self.types.items()):
            if rt.custom and rt.crd_uid == uid:
                del self.types[key]
        if event_type != "DELETED":
            for rt in from_crd(crd):
                self.register(rt)

    def _establish(self, crd: Obj) -> None:
        """What the apiextensions controllers write once a CRD's names are accepted (kubectl wait
        --for=condition=Established waits for it)."""
        spec = crd.get("spec") or {}
        names = dict(spec.get("names") or {})
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        now = now_rfc3339()
        storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
        status = {"acceptedNames": names, "storedVersions": storage, "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts",
             "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted"}]}
        self.update(CRDS, "", crd["metadata"]["name"], {"metadata": {"name": crd["metadata"]["name"]},
                                                         "status": status}, subresource="status")

    def _check_namespace(self, rt: ResourceType, namespace: str, name: str = "") -> None:
        if rt.namespaced and ("", namespace) not in self.objects[NAMESPACES.key]:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                           {"name": namespace, "kind": "namespaces"})
        if rt.namespaced:
            lifecycle.refuse_in_terminating_namespace(self.objects[NAMESPACES.key][("", namespace)], rt, name)

    def create(self, rt: ResourceType, namespace: str, body: Obj, *, strict: bool = False, dry_run: bool = False,
               manager: str = DEFAULT_MANAGER) -> Obj:
        """POST. With `dry_run` the object is defaulted, validated and answered as it would be, but not stored."""
        with self.lock:
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise bad_request("metadata must be an object")
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = str(meta["generateName"]) + secrets.token_hex(3)[:5]
            name = meta.get("name")
            if not name:
                raise invalid(rt, "", "metadata.name", "Required value: name or generateName is required")
            if rt.namespaced:
                if meta.get("namespace", namespace) != namespace:
                    raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                      "the request")
                meta["namespace"] = namespace
                self._check_namespace(rt, namespace, str(name))
            else:
                meta.pop("namespace", None)
            if (meta.get("namespace", ""), name) in self.objects[rt.key]:
                raise ApiError(409, "AlreadyExists", f'{rt.qualified} "{name}" already exists',
                               {"name": name, "group": rt.group, "kind": rt.plural})
            for key in _SYSTEM_METADATA:
                meta.pop(key, None)
            meta.pop("managedFields", None)  # the server keeps its own record (see apply.py)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            if rt.generation:
                meta["generation"] = 1
            if rt.scale_subresource and rt.group == "apps":
                # apps/v1 defaulting: a workload without replicas has one.
                spec = obj.setdefault("spec", {})
                if isinstance(spec, dict):
                    spec.setdefault("replicas", 1)
            if rt.status_subresource and rt.key != NAMESPACES.key:
                # Status is the controller's: a create never sets it (the real server resets it too).
                obj.pop("status", None)
            if rt.key == NAMESPACES.key:
                obj["status"] = {"phase": "Active"}  # pkg/registry/core/namespace/strategy.go PrepareForCreate
            if rt.key == PODS.key:
                obj["status"] = {"phase": "Pending"}  # pkg/registry/core/pod/strategy.go PrepareForCreate
            obj.pop("apiVersion", None)
            obj.pop("kind", None)
            if rt.key == CORE_EVENTS.key:
                involved = (obj.get("involvedObject") or {}).get("namespace")
                if involved and involved != namespace:
                    raise invalid(rt, name, "involvedObject.namespace",
                                  f'Invalid value: "{involved}": does not match event.namespace')
            strategies.prepare(rt, obj)
            self._admit(rt, obj, strict=strict)
            ssa.record_update(None, obj, shape=shape_of(rt), manager=manager, api_version=rt.api_version,
                              subresource="", status_subresource=rt.status_subresource)
            if dry_run:
                # DryRunnableStorage.Create: an existing name is still 409, nothing is stored, no resourceVersion.
                return self._present(rt, obj)
            created = self._commit(rt, "ADDED", obj, None)
            if rt.key == CRDS.key:
                self._establish(created)
                return self._present(rt, self._current(rt, "", name))
            return created

    def _current(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.objects[rt.key].get((namespace, name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    def _check_identity(self, rt: ResourceType, namespace: str, name: str, body: Obj) -> Obj:
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if meta.get("name", name) != name:
            raise bad_request("the name of the object does not match the name on the URL")
        if rt.namespaced and meta.get("namespace", namespace) != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        return meta

    def update(self, rt: ResourceType, namespace: str, name: str, body: Obj, *, subresource: str = "",
               strict: bool = False, dry_run: bool = False, manager: str = DEFAULT_MANAGER) -> Obj:
        """PUT: the whole object (or only its status, for the status subresource), with optimistic concurrency."""
        with self.lock:
            current = self._current(rt, namespace, name)
            body = copy.deepcopy(body)
            meta = self._check_identity(rt, namespace, name, body)
            sent_version = meta.get("resourceVersion")
            if sent_version not in (None, "") and str(sent_version) != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            return self._write(rt, current, body, subresource, strict=strict, dry_run=dry_run, manager=manager)

    def patch(self, rt: ResourceType, namespace: str, name: str, content_type: str, patch: Any, *,
              subresource: str = "", strict: bool = False, dry_run: bool = False,
              manager: str = DEFAULT_MANAGER) -> Obj:
        with self.lock:
            current = self._current(rt, namespace, name)
            presented = self._present(rt, current)
            if subresource == "scale":
                presented = self.scale_of(current)
            patched = apply_patch(rt, content_type, presented, patch)
            if not isinstance(patched, dict):
                raise bad_request("the patch must produce an object")
            meta = self._check_identity(rt, namespace, name, patched)
            # A patch that names a resourceVersion is a conditional write, like an update.
            if str(meta.get("resourceVersion", "")) != str(presented["metadata"].get("resourceVersion", "")):
                raise conflict(rt, name)
            if subresource == "scale":
                return self._write_scale(rt, current, patched, dry_run=dry_run, manager=manager)
            return self._write(rt, current, patched, subresource, strict=strict, dry_run=dry_run, manager=manager)

    def apply(self, rt: ResourceType, namespace: str, name: str, config: Any, *, manager: str, force: bool = False,
              subresource: str = "", strict: bool = False, dry_run: bool = False) -> tuple[Obj, bool]:
        """Server-side apply (PATCH application/apply-patch+yaml): create the object if absent, else merge the
        configuration in, tracking field ownership (see apply.py). Returns the object and whether it was created."""
        with self.lock:
            if not isinstance(config, dict):
                raise bad_request("the applied configuration must be an object")
            if config.get("kind") != rt.kind or config.get("apiVersion") != rt.api_version:
                # versioncheck.go: the applied object must be exactly this group, version and kind.
                group, _, version = str(config.get("apiVersion") or "").rpartition("/")
                raise bad_request(f"invalid object type: {group}/{version}, Kind={config.get('kind') or ''}")
            if (config.get("metadata") or {}).get("managedFields") is not None:
                raise bad_request("metadata.managedFields must be nil")  # structuredmerge.go Apply
            self._check_identity(rt, namespace, name, {**config, "metadata": config.get("metadata") or {}})
            live = self.objects[rt.key].get((namespace, name))
            if subresource not in ("", "status") or (live is None and subresource):
                raise not_found(rt, name)
            try:
                merged = ssa.apply(live, config, shape=shape_of(rt), manager=manager, api_version=rt.api_version,
                                   force=force, subresource=subresource, status_subresource=rt.status_subresource)
            except ssa.ApplyConflict as error:
                status = error.status()
                raise ApiError(409, "Conflict", status["message"], status["details"]) from error
            if live is None:
                meta = merged.setdefault("metadata", {})
                meta["name"] = name
                managed = meta.pop("managedFields", None)
                created = self.create(rt, namespace, {**merged, "apiVersion": rt.api_version, "kind": rt.kind},
                                      strict=strict, dry_run=True, manager=manager)
                created["metadata"]["managedFields"] = managed
                created.pop("apiVersion", None)
                created.pop("kind", None)
                if dry_run:
                    return self._present(rt, created), True
                stored = self._commit(rt, "ADDED", created, None)
                if rt.key == CRDS.key:  # however it was created, as create() does
                    self._establish(stored)
                    return self._present(rt, self._current(rt, "", name)), True
                return stored, True
            return self._write(rt, live, merged, subresource, strict=strict, dry_run=dry_run, manager=manager,
                               applied=True), False

    def _write(self, rt: ResourceType, current: Obj, body: Obj, subresource: str, *, strict: bool = False,
               dry_run: bool = False, manager: str = DEFAULT_MANAGER, applied: bool = False,
               through: str | None = None) -> Obj:
        """Store `body` over `current` through `subresource`: defaulting and validation first, then
        metadata.generation (so a write that only spells out defaults bumps nothing), then field ownership (by an
        apply already done when `applied`; `through` names the subresource the manager used, e.g. scale)."""
        previous = copy.deepcopy(current)
        name = current["metadata"]["name"]
        if subresource == "status":
            if not rt.status_subresource:
                raise not_found(rt, name)
            # Only status changes through /status, and for the workloads some metadata; spec stays as stored.
            new = copy.deepcopy(current)
            if "status" in body:
                new["status"] = body["status"]
            else:
                new.pop("status", None)
            strategies.prepare_status(rt, new, body)
        elif subresource:
            raise not_found(rt, name)
        else:
            new = body
            new.pop("apiVersion", None)
            new.pop("kind", None)
            meta = new["metadata"]
            for key in _SYSTEM_METADATA:
                meta.pop(key, None)
                if key in current["metadata"]:
                    meta[key] = current["metadata"][key]
            if rt.namespaced:
                meta["namespace"] = current["metadata"]["namespace"]
            if rt.status_subresource:
                # The main resource ignores status: only /status changes it.
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
            strategies.prepare(rt, new)
        self._admit(rt, new, strict=strict, old=current)
        if not subresource:
            meta = new["metadata"]
            annotations_changed = meta.get("annotations") != current["metadata"].get("annotations")
            # Compared after defaulting, as the registries' PrepareForUpdate sees decoded (defaulted) objects. The
            # Deployment registry also bumps generation on annotation changes (they are copied to its
            # ReplicaSets); custom resources and other kinds bump it on spec changes only.
            if rt.generation and (_spec_of(new) != _spec_of(current)
                                  or (rt.key == DEPLOYMENTS.key and annotations_changed)):
                meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
        if applied:
            new["metadata"]["managedFields"] = copy.deepcopy(body["metadata"].get("managedFields"))
            if new["metadata"]["managedFields"] is None:
                del new["metadata"]["managedFields"]
        else:
            ssa.record_update(current, new, shape=shape_of(rt), manager=manager, api_version=rt.api_version,
                              subresource=through if through is not None else subresource,
                              status_subresource=rt.status_subresource)
        ssa.keep_times_of_a_no_op(current, new)
        if new == current:
            # A no-op write does not change resourceVersion and sends no watch event, as in the real server.
            return self._present(rt, current)
        if dry_run:
            # DryRunnableStorage.GuaranteedUpdate: the object as it would be, with the live resourceVersion.
            return self._present(rt, new)
        return self._commit(rt, "MODIFIED", new, previous)

    def _admit(self, rt: ResourceType, obj: Obj, *, strict: bool = False, old: Obj | None = None) -> None:
        """A custom resource with a schema is defaulted and validated like the real server does. On an update,
        CEL rules are ratcheted as since Kubernetes 1.30 (CRDValidationRatcheting, GA in 1.33): a rule is not
        evaluated again on a part of the object the update left unchanged (so a status write does not re-check
        the spec's rules)."""
        if rt.key == PODS.key and "metadata" in obj:
            errors = pods.annotation_errors(obj, old)
            if errors:
                raise invalid_fields(rt, str(obj["metadata"].get("name", "")), errors)
        if rt.schema is None:
            unknown = openapi.unknown_builtin_fields(rt, obj) if strict and not rt.custom else []
            if unknown:
                fields = ", ".join(f'unknown field "{field}"' for field in unknown)
                raise bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict '
                                  f"decoding error: {fields}")
            return
        body = {k: v for k, v in obj.items() if k != "metadata"}
        # apiVersion, kind and metadata are the server's; the rest is pruned to what the schema declares.
        own_schema = {**rt.schema, "properties": {**rt.schema.get("properties", {}), "apiVersion": {}, "kind": {},
                                                  "metadata": {"x-kubernetes-preserve-unknown-fields": True}}}
        unknown = schema.unknown_fields(body, own_schema)
        if unknown and strict:
            fields = ", ".join(f'unknown field "{field}"' for field in unknown)
            raise bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict '
                              f"decoding error: {fields}")
        defaulted = schema.apply_defaults(schema.prune(body, own_schema), rt.schema)
        for key in [k for k in obj if k != "metadata"]:
            del obj[key]
        obj.update(defaulted)
        previous = None if old is None else {k: v for k, v in old.items() if k != "metadata"}
        errors = validation.custom_resource_errors(defaulted, rt.schema, previous)
        if errors:
            raise invalid_fields(rt, str(obj["metadata"].get("name", "")), errors)

    def delete(self, rt: ResourceType, namespace: str, name: str, precondition_version: str | None = None, *,
               propagation: str | None = None, dry_run: bool = False) -> Obj:
        """DELETE, with preconditions: the object, and what the cluster deletes with it (see `lifecycle`); with
        `dry_run` the checks run and everything stays."""
        with self.lock:
            current = self._current(rt, namespace, name)
            if precondition_version and precondition_version != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            if propagation is not None and propagation not in lifecycle.PROPAGATION_POLICIES:
                raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "{name}" is invalid: propagationPolicy: '
                               f'Unsupported value: "{propagation}": supported values: "Foreground", '
                               '"Background", "Orphan", "nil"')
            if dry_run:
                return self._present(rt, current)
            return lifecycle.delete(self, rt, current, propagation)

    def remove(self, rt: ResourceType, obj: Obj) -> Obj:
        """Take one stored object away: one DELETED event, nothing else."""
        with self.lock:
            return self._commit(rt, "DELETED", copy.deepcopy(obj), copy.deepcopy(obj))

    def replace(self, rt: ResourceType, current: Obj, new: Obj) -> Obj:
        """Store a controller's change to an object as is (no admission): one MODIFIED event."""
        with self.lock:
            return self._commit(rt, "MODIFIED", new, copy.deepcopy(current))

    def mark_terminating(self, rt: ResourceType, obj: Obj) -> Obj:
        """An object being deleted: deletionTimestamp set, and a namespace's phase Terminating."""
        with self.lock:
            terminating = copy.deepcopy(obj)
            terminating["metadata"]["deletionTimestamp"] = now_rfc3339()
            if rt.key == NAMESPACES.key:
                terminating.setdefault("status", {})["phase"] = "Terminating"
            return self._commit(rt, "MODIFIED", terminating, copy.deepcopy(obj))

    # ----------------------------------------------------------------------------------------------------------
    # The scale subresource (autoscaling/v1 Scale)

    @staticmethod
    def scale_of(obj: Obj) -> Obj:
        meta = obj["metadata"]
        selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 1))},
            "status": {"replicas": int((obj.get("status") or {}).get("replicas", 0)),
                       "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))},
        }

    def get_scale(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self.lock:
            if not rt.scale_subresource:
                raise not_found(rt, name)
            return self.scale_of(self._current(rt, namespace, name))

    def update_scale(self, rt: ResourceType, namespace: str, name: str, body: Obj, *, dry_run: bool = False,
                     manager: str = DEFAULT_MANAGER) -> Obj:
        with self.lock:
            if not rt.scale_subresource:
                raise not_found(rt, name)
            current = self._current(rt, namespace, name)
            meta = self._check_identity(rt, namespace, name, body)
            sent_version = meta.get("resourceVersion")
            if sent_version not in (None, "") and str(sent_version) != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            # The Scale registry's UID precondition (pkg/registry/apps/deployment/storage/storage.go,
            # scaleUpdatedObjectInfo.UpdatedObject): a Scale naming another uid is a 409.
            sent_uid = meta.get("uid")
            if sent_uid and sent_uid != current["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.plural}/scale.{rt.group} "{name}": '
                               f"Precondition failed: UID in precondition: {sent_uid}, UID in object meta: "
                               f"{current['metadata']['uid']}", {"name": name, "group": rt.group,
                                                                 "kind": f"{rt.plural}/scale"})
            return self._write_scale(rt, current, body, dry_run=dry_run, manager=manager)

    def _write_scale(self, rt: ResourceType, current: Obj, scale: Obj, *, dry_run: bool = False,
                     manager: str = DEFAULT_MANAGER) -> Obj:
        replicas = (scale.get("spec") or {}).get("replicas")
        name = current["metadata"]["name"]
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise ApiError(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value',
                           {"name": name, "group": "autoscaling", "kind": "Scale"})
        if replicas < 0:
            raise ApiError(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                           f"{replicas}: must be greater than or equal to 0",
                           {"name": name, "group": "autoscaling", "kind": "Scale"})
        new = copy.deepcopy(current)
        new.setdefault("spec", {})["replicas"] = replicas
        written = self._write(rt, current, new, "", dry_run=dry_run, manager=manager, through="scale")
        return self.scale_of(written)

    # ----------------------------------------------------------------------------------------------------------
    # Watch history

    def events_after(self, resource_version: int) -> Iterator[WatchEvent]:
        """Events newer than `resource_version`; the caller holds the lock and has checked `compacted`."""
        for event in self.history:
            if event.resource_version > resource_version:
                yield event

    def compact(self) -> int:
        """Forget every event so far, as etcd compaction does: older resourceVersions now give 410."""
        with self.lock:
            self.history.clear()
            self.compacted = self.revision
            return self.compacted


def shape_of(rt: ResourceType) -> ssa.Shape:
    """How apply merges this kind: by its CRD schema, or by the built-in list keys."""
    if rt.custom:
        return ssa.Shape(rt.schema or {})
    return ssa.Shape(None)


def _spec_of(obj: Obj) -> Obj:
    """Everything but metadata and status: what counts as the spec for metadata.generation."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def apply_patch(rt: ResourceType, content_type: str, target: Obj, patch: Any) -> Any:
    media = content_type.split(";")[0].strip().lower()
    try:
        if media == patches.MERGE:
            return patches.merge_patch(target, patch)
        if media == patches.JSON_PATCH:
            return patches.json_patch(target, patch)
        if media == patches.STRATEGIC and not rt.custom:
            return patches.strategic_merge_patch(target, patch)
    except patches.PatchError as error:
        if error.code == 400:
            raise bad_request(str(error)) from error
        raise invalid(rt, str(target.get("metadata", {}).get("name", "")), "patch", str(error)) from error
    accepted = [patches.JSON_PATCH, patches.MERGE, patches.APPLY]
    if not rt.custom:
        accepted.insert(2, patches.STRATEGIC)
    raise ApiError(415, "UnsupportedMediaType",
                   f"the body of the request was in an unknown format - accepted media types include: "
                   f"{', '.join(accepted)}")
