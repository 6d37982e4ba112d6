"""Aggregated discovery (apidiscovery.k8s.io/v2, GA in 1.30): what `GET /api` and `GET /apis` answer to a client
that asks for `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`, as kubectl 1.33 does
(k8s.io/client-go discovery/discovery_client.go GroupsAndMaybeResources; served by k8s.io/apiserver
pkg/endpoints/discovery/aggregated). Every group, version and resource in one answer, instead of one request per
group version; client-go uses it when the answer's Content-Type says so, and falls back to the legacy documents
otherwise. Like the legacy documents, it lists a custom kind only while its CRD exists.
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.fakekube.resources import Obj, ResourceType

CONTENT_TYPES = {
    "v2": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    "v2beta1": "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
}


def wanted_version(accept: str) -> str | None:
    """`v2` or `v2beta1` when the Accept header asks for aggregated discovery before anything else it accepts."""
    for media in accept.split(","):
        params = dict(part.strip().partition("=")[::2] for part in media.split(";")[1:])
        if params.get("as") == "APIGroupDiscoveryList" and params.get("g") == "apidiscovery.k8s.io":
            if params.get("v") in CONTENT_TYPES:
                return params["v"]
            continue
        if media.strip():
            return None
    return None


def _resource(rt: ResourceType) -> Obj:
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    resource: Obj = {"resource": rt.plural, "responseKind": kind,
                     "scope": "Namespaced" if rt.namespaced else "Cluster", "singularResource": rt.kind.lower(),
                     "verbs": list(rt.verbs)}
    if rt.short_names:
        resource["shortNames"] = list(rt.short_names)
    if rt.categories:
        resource["categories"] = list(rt.categories)
    subresources = []
    if rt.scale_subresource:
        subresources.append({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1",
                                                                      "kind": "Scale"},
                             "verbs": ["get", "patch", "update"]})
    if rt.status_subresource:
        subresources.append({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]})
    if subresources:
        resource["subresources"] = subresources
    return resource


def group_discovery_list(types: Iterable[ResourceType], *, legacy: bool, version: str = "v2") -> Obj:
    """The APIGroupDiscoveryList for `/api` (legacy: the core group) or `/apis` (every named group)."""
    groups: dict[str, dict[str, list[ResourceType]]] = {}
    for rt in types:
        if (rt.group == "") == legacy:
            groups.setdefault(rt.group, {}).setdefault(rt.version, []).append(rt)
    items = []
    for name, versions in sorted(groups.items()):
        metadata: Obj = {"creationTimestamp": None}
        if name:
            metadata["name"] = name
        items.append({"metadata": metadata, "versions": [
            {"version": v, "resources": [_resource(rt) for rt in sorted(members, key=lambda r: r.plural)],
             "freshness": "Current"}
            for v, members in sorted(versions.items(), key=lambda item: _version_priority(item[0]))]})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{version}", "metadata": {},
            "items": items}


def _version_priority(version: str) -> tuple[int, str]:
    """The preferred version first: GA before beta before alpha (the real order is kube-aware; enough here)."""
    return (2 if "alpha" in version else 1 if "beta" in version else 0, version)
