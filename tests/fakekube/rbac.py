"""RBAC as the kube-apiserver evaluates it, for requests made with a ServiceAccount token.

A kubeconfig from `FakeKube.write_kubeconfig(..., service_account=(ns, name))` carries the token
`serviceaccount:<ns>:<name>`; its requests are allowed only by the Roles and ClusterRoles bound to that account,
so tests can prove the operator's RBAC manifest is both sufficient and tight. The default token is an admin.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.fakekube.resources import Obj, ResourceType
from tests.fakekube.store import ApiError, Store

SA_TOKEN_PREFIX = "serviceaccount:"

ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                                     namespaced=False)
SERVICE_ACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",))
TYPES = (ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, SERVICE_ACCOUNTS)


@dataclass(frozen=True)
class Request:
    """The attributes RBAC decides on."""

    verb: str
    group: str
    resource: str  # "deployments" or "deployments/scale"
    namespace: str  # "" for cluster-scoped requests and all-namespace lists
    name: str  # "" for collections


def service_account_of(token: str) -> tuple[str, str] | None:
    if not token.startswith(SA_TOKEN_PREFIX):
        return None
    namespace, _, name = token[len(SA_TOKEN_PREFIX):].partition(":")
    return namespace, name


def _binds(binding: Obj, namespace: str, name: str) -> bool:
    return any(s.get("kind") == "ServiceAccount" and s.get("name") == name and s.get("namespace") == namespace
               for s in binding.get("subjects") or [])


def _matches(values: object, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def _rule_allows(rule: Obj, request: Request) -> bool:
    resources = rule.get("resources") or []
    _, _, subresource = request.resource.partition("/")
    resource_ok = _matches(resources, request.resource) or (bool(subresource) and f"*/{subresource}" in resources)
    names = rule.get("resourceNames") or []
    return (_matches(rule.get("apiGroups"), request.group) and resource_ok
            and _matches(rule.get("verbs"), request.verb) and (not names or request.name in names))


def _rules(store: Store, kind: ResourceType, namespace: str, name: str) -> list[Obj]:
    found = store.objects[kind.key].get((namespace, name))
    return list((found or {}).get("rules") or [])


def allowed(store: Store, account: tuple[str, str], request: Request) -> bool:
    sa_namespace, sa_name = account
    with store.lock:
        for binding in store.objects[CLUSTER_ROLE_BINDINGS.key].values():
            bound = _binds(binding, sa_namespace, sa_name) and binding["roleRef"]["kind"] == "ClusterRole"
            rules = _rules(store, CLUSTER_ROLES, "", binding["roleRef"]["name"]) if bound else []
            if any(_rule_allows(r, request) for r in rules):
                return True
        if not request.namespace:
            return False
        for (namespace, _), binding in store.objects[ROLE_BINDINGS.key].items():
            if namespace != request.namespace or not _binds(binding, sa_namespace, sa_name):
                continue
            ref = binding["roleRef"]
            rules = (_rules(store, ROLES, namespace, ref["name"]) if ref["kind"] == "Role"
                     else _rules(store, CLUSTER_ROLES, "", ref["name"]))
            if any(_rule_allows(r, request) for r in rules):
                return True
    return False


def forbidden(account: tuple[str, str], request: Request, rt: ResourceType) -> ApiError:
    user = f"system:serviceaccount:{account[0]}:{account[1]}"
    subject = f'{rt.qualified} "{request.name}"' if request.name else rt.qualified
    group = f'in API group "{request.group}"'
    where = f' in the namespace "{request.namespace}"' if request.namespace else " at the cluster scope"
    return ApiError(403, "Forbidden",
                    f'{subject} is forbidden: User "{user}" cannot {request.verb} resource "{request.resource}" '
                    f"{group}{where}",
                    {"name": request.name, "group": rt.group, "kind": rt.plural} if request.name
                    else {"group": rt.group, "kind": rt.plural})
