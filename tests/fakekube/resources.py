"""The kinds the fake API server serves, described the way discovery describes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class ResourceType:
    """One resource (a group, version and plural) and the rules the real registry applies to it."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()  # `kubectl get all` lists the kinds in category "all"
    status_subresource: bool = False
    scale_subresource: bool = False
    # Whether the registry sets metadata.generation (1 on create, +1 on each spec change).
    generation: bool = False
    # Custom resources accept merge and JSON patch only: strategic merge patch is 415 for them.
    custom: bool = False
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
    printer_columns: tuple[Obj, ...] = ()
    schema: Obj | None = field(default=None, compare=False)
    # A CRD version's selectableFields (JSONPaths): field labels beyond metadata.name/namespace.
    selectable_fields: tuple[str, ...] = ()
    # The CRD (its metadata.uid) a custom kind is served for: a kind lives exactly as long as its CRD.
    crd_uid: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`deployments.apps`, `secrets`: how the real server names a resource in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: objects of one group and plural are shared by every version that serves them."""
        return (self.group, self.plural)


NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",),
                          status_subresource=True)
SECRETS = ResourceType("", "v1", "secrets", "Secret")
SERVICES = ResourceType("", "v1", "services", "Service", short_names=("svc",), categories=("all",), status_subresource=True)
CORE_EVENTS = ResourceType("", "v1", "events", "Event", short_names=("ev",))
EVENTS_V1 = ResourceType("events.k8s.io", "v1", "events", "Event", short_names=("ev",))
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", short_names=("deploy",), categories=("all",),
                           status_subresource=True, scale_subresource=True, generation=True)
STATEFULSETS = ResourceType("apps", "v1", "statefulsets", "StatefulSet", short_names=("sts",), categories=("all",),
                            status_subresource=True, scale_subresource=True, generation=True)
REPLICASETS = ResourceType("apps", "v1", "replicasets", "ReplicaSet", short_names=("rs",), categories=("all",),
                           status_subresource=True, scale_subresource=True, generation=True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
# Stored only (no autoscaling is done): the operator watches them to refuse a target an HPA also scales.
HPAS = ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", short_names=("hpa",),
                    categories=("all",),
                    status_subresource=True)
CRDS = ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                    namespaced=False, short_names=("crd", "crds"), status_subresource=True, generation=True)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", short_names=("cm",))
PODS = ResourceType("", "v1", "pods", "Pod", short_names=("po",), categories=("all",), status_subresource=True)

# No custom kind is served until its CustomResourceDefinition is created, as in a real cluster.
BUILTIN: tuple[ResourceType, ...] = (
    NAMESPACES, SECRETS, CONFIGMAPS, PODS, SERVICES, CORE_EVENTS, EVENTS_V1, DEPLOYMENTS, STATEFULSETS, REPLICASETS, LEASES,
    HPAS, CRDS,
)


def from_crd(crd: Obj) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    types = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        types.append(ResourceType(
            group=str(spec.get("group", "")),
            version=str(version.get("name", "")),
            plural=str(names.get("plural", "")),
            kind=str(names.get("kind", "")),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            status_subresource="status" in subresources,
            scale_subresource="scale" in subresources,
            generation=True,
            custom=True,
            printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            selectable_fields=tuple(str(f.get("jsonPath", "")) for f in version.get("selectableFields") or ()),
            crd_uid=str((crd.get("metadata") or {}).get("uid", "")),
        ))
    return types
