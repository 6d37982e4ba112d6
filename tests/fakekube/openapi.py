"""`/openapi/v2` and `/openapi/v3`: the served kinds' schemas, published the way kube-apiserver publishes them.

kubectl 1.33 reads OpenAPI v3 (k8s.io/client-go openapi): `GET /openapi/v3` lists one document per group version
(`{"paths": {"apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1?hash=..."}}}`), then it fetches
the one it needs as JSON. `kubectl explain` finds a kind by its schema's `x-kubernetes-group-version-kind`;
`kubectl apply --validate=strict` (k8s.io/cli-runtime pkg/resource/query_param_verifier_v3.go) looks for the
kind's PATCH operation and its `fieldValidation` query parameter, and when the server declares it, sends
`fieldValidation=Strict` and lets the server refuse unknown fields.

- Built-in kinds: their upstream schemas, from the kubernetes-validate package's copy of the Kubernetes 1.33
  OpenAPI definitions (converted back from JSON Schema: `type: [T, "null"]` is `T`, refs point at
  `#/definitions/` or `#/components/schemas/`, a v3 ref with a description is wrapped in `allOf` as kube-openapi
  does, int-or-string and quantity take their OpenAPI forms).
- Custom kinds: apiextensions-apiserver pkg/controller/openapi/builder/builder.go. The definition is named from
  the reversed group (`io.queuescale.v1alpha1.QueueScaler`, `...QueueScalerList`), carries the CRD version's
  schema with `metadata` a reference to ObjectMeta, `apiVersion`/`kind` strings and
  `x-kubernetes-group-version-kind`; the routes are the builder's (list, create, deletecollection, get, replace,
  delete, patch, and status/scale when declared). In v2 a schema that preserves unknown fields at its root is
  published as a bare `type: object`, and value validations (oneOf, anyOf, allOf, not, nullable) are dropped
  (openapiv2.ToStructuralOpenAPIV2).
/openapi/v2 is served as JSON only: client-go asks for protobuf, which the fake does not speak (406).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate

from tests.fakekube.resources import Obj, ResourceType

KUBERNETES_VERSION = "v1.33.0"
_DEFINITIONS = (Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"{KUBERNETES_VERSION}-local"
                / "_definitions.json")
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_OBJECT_META_DOC = ("Standard object's metadata. More info: "
                    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")
_API_VERSION_DOC = ("APIVersion defines the versioned schema of this representation of an object. Servers should "
                    "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
                    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
                    "api-conventions.md#resources")
_KIND_DOC = ("Kind is a string value representing the REST resource this object represents. Servers may infer this "
             "from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
             "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")
# Definitions every group version's document carries (request and answer bodies of the generic operations).
_COMMON = [_META + name for name in ("ObjectMeta", "ListMeta", "Status", "DeleteOptions", "Patch", "WatchEvent")]


@functools.cache
def _upstream() -> dict[str, Obj]:
    definitions: dict[str, Obj] = json.loads(_DEFINITIONS.read_text())["$defs"]
    return definitions


@functools.cache
def _by_kind() -> dict[tuple[str, str, str], str]:
    found: dict[tuple[str, str, str], str] = {}
    for name, definition in _upstream().items():
        for gvk in definition.get("x-kubernetes-group-version-kind") or []:
            found.setdefault((gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")), name)
    return found


def _ref(name: str, v3: bool) -> str:
    return f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"


def _convert(node: Any, v3: bool, *, top_kind: bool = False) -> Any:
    """One upstream JSON Schema node back in the OpenAPI form the server publishes."""
    if isinstance(node, list):
        return [_convert(item, v3) for item in node]
    if not isinstance(node, dict):
        return node
    out: Obj = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            out[key] = types[0] if len(types) == 1 else types
        elif key == "$ref":
            out[key] = _ref(str(value).rsplit("/", 1)[-1], v3)
        elif key == "enum" and top_kind:
            continue  # the JSON Schema copy pins apiVersion/kind; the published schema does not
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _convert(child, v3, top_kind=name in ("apiVersion", "kind")
                                       and "x-kubernetes-group-version-kind" in node)
                        for name, child in value.items()}
        else:
            out[key] = _convert(value, v3)
    if "oneOf" in out and all(isinstance(o, dict) and set(o) == {"type"} for o in out["oneOf"]):
        out["oneOf"] = [o for o in out["oneOf"] if o["type"] != "null"]
    if v3 and "$ref" in out and len(out) > 1:
        out = {"allOf": [{"$ref": out.pop("$ref")}], **out}
    return out


def _builtin_definition(name: str, v3: bool) -> Obj:
    if name == "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
        doc = "IntOrString is a type that can hold an int32 or a string."
        return ({"description": doc, "oneOf": [{"type": "integer"}, {"type": "string"}]} if v3
                else {"description": doc, "type": "string", "format": "int-or-string"})
    if name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
        doc = "Quantity is a fixed-point representation of a number."
        return ({"description": doc, "oneOf": [{"type": "string"}, {"type": "number"}]} if v3
                else {"description": doc, "type": "string"})
    converted: Obj = _convert(_upstream()[name], v3)
    return converted


def _references(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rsplit("/", 1)[-1]
            else:
                yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


def _closure(roots: Iterable[str], v3: bool, own: dict[str, Obj]) -> dict[str, Obj]:
    """The given definitions, the named built-in ones, and every built-in definition they reference."""
    result = dict(own)
    pending = [*roots, *_references(list(own.values()))]
    while pending:
        name = pending.pop()
        if name in result or name not in _upstream():
            continue
        result[name] = _builtin_definition(name, v3)
        pending.extend(_references(result[name]))
    return result


def definition_name(group: str, version: str, kind: str) -> str:
    """The definition name the API server gives a custom kind: its group reversed (`io.queuescale.v1alpha1.X`)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _strip_v2(node: Any) -> Any:
    """openapiv2.ToStructuralOpenAPIV2 for kubectl's v2 validation: no value validations it cannot read."""
    if isinstance(node, list):
        return [_strip_v2(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strip_v2(v) for k, v in node.items()
           if k not in ("oneOf", "anyOf", "allOf", "not", "nullable", "x-kubernetes-validations")}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    return out


def custom_definitions(rt: ResourceType, v3: bool) -> dict[str, Obj]:
    """The kind's and its list's definitions, as apiextensions' builder publishes them."""
    name = definition_name(rt.group, rt.version, rt.kind)
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    schema = copy.deepcopy(rt.schema) if rt.schema else None
    if schema is None or (not v3 and schema.get("x-kubernetes-preserve-unknown-fields")):
        kind_schema: Obj = {"type": "object"}
    else:
        kind_schema = schema if v3 else _strip_v2(schema)
        properties = kind_schema.setdefault("properties", {})
        properties["metadata"] = {"$ref": _ref(_META + "ObjectMeta", v3), "description": _OBJECT_META_DOC}
        properties["apiVersion"] = {"type": "string", "description": _API_VERSION_DOC}
        properties["kind"] = {"type": "string", "description": _KIND_DOC}
    kind_schema["x-kubernetes-group-version-kind"] = [gvk]
    list_kind = f"{rt.kind}List"
    list_schema: Obj = {
        "description": f"{list_kind} is a list of {rt.kind}", "type": "object", "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": _API_VERSION_DOC},
            "items": {"type": "array", "items": {"$ref": _ref(name, v3)},
                      "description": f"List of {rt.plural}. More info: "
                                     "https://git.k8s.io/community/contributors/devel/api-conventions.md"},
            "kind": {"type": "string", "description": _KIND_DOC},
            "metadata": {"$ref": _ref(_META + "ListMeta", v3),
                         "description": "Standard list metadata. More info: "
                                        "https://git.k8s.io/community/contributors/devel/sig-architecture/"
                                        "api-conventions.md#types-kinds"},
        },
        "x-kubernetes-group-version-kind": [{**gvk, "kind": list_kind}],
    }
    return {name: kind_schema, f"{name}List": list_schema}


def _kind_definition(rt: ResourceType, v3: bool) -> tuple[str, str, dict[str, Obj]]:
    """(kind definition, list definition, definitions to add) for a served type."""
    if rt.custom:
        name = definition_name(rt.group, rt.version, rt.kind)
        return name, f"{name}List", custom_definitions(rt, v3)
    kind = _by_kind().get((rt.group, rt.version, rt.kind), "")
    listed = _by_kind().get((rt.group, rt.version, f"{rt.kind}List"), "")
    return kind, listed, {}


# ------------------------------------------------------------------------------------------------------------------
# Operations (k8s.io/apiserver pkg/endpoints/installer.go; the CRD builder mirrors it)

_WRITE = [("dryRun", "string"), ("fieldManager", "string"), ("fieldValidation", "string")]
_PARAMETERS: dict[str, list[tuple[str, str]]] = {
    "list": [("allowWatchBookmarks", "boolean"), ("continue", "string"), ("fieldSelector", "string"),
             ("labelSelector", "string"), ("limit", "integer"), ("resourceVersion", "string"),
             ("resourceVersionMatch", "string"), ("sendInitialEvents", "boolean"), ("timeoutSeconds", "integer"),
             ("watch", "boolean")],
    "post": _WRITE, "put": _WRITE, "patch": [*_WRITE, ("force", "boolean")],
    "delete": [("dryRun", "string"), ("gracePeriodSeconds", "integer"), ("orphanDependents", "boolean"),
               ("propagationPolicy", "string")],
    "get": [],
}
_FIELD_VALIDATION_DOC = ("fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) "
                         "containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict")


def _operation(rt: ResourceType, action: str, operation_id: str, body: str | None, answer: str, v3: bool,
               gvk: Obj) -> Obj:
    parameters: list[Obj] = [{"name": "pretty", "in": "query", "description": "If 'true', then the output is "
                              "pretty printed.", **({"schema": {"type": "string"}} if v3 else {"type": "string"})}]
    key = "list" if action in ("list", "deletecollection") else action
    for name, type_ in _PARAMETERS[key]:
        parameter: Obj = {"name": name, "in": "query", "description": _FIELD_VALIDATION_DOC
                          if name == "fieldValidation" else name}
        if v3:
            parameter["schema"] = {"type": type_}
        else:
            parameter["type"] = type_
        parameters.append(parameter)
    responses: Obj = {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}}
    if v3:
        responses["200"]["content"] = {"application/json": {"schema": {"$ref": _ref(answer, True)}}}
    else:
        responses["200"]["schema"] = {"$ref": _ref(answer, False)}
    operation: Obj = {"operationId": operation_id, "parameters": parameters, "responses": responses,
                      "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
    if body is not None:
        if action == "patch":
            media = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
            if not rt.custom:
                media.insert(2, "application/strategic-merge-patch+json")
        else:
            media = ["application/json", "application/yaml"] if rt.custom else ["*/*"]
        if v3:
            operation["requestBody"] = {"content": {m: {"schema": {"$ref": _ref(body, True)}} for m in media},
                                        "required": action != "delete"}
        else:
            operation["consumes"] = media
            parameters.append({"name": "body", "in": "body", "required": action != "delete",
                               "schema": {"$ref": _ref(body, False)}})
    return operation


def _paths(rt: ResourceType, kind_def: str, list_def: str, v3: bool) -> dict[str, Obj]:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    scope = "Namespaced" if rt.namespaced else ""
    root = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    status, delete_options, patch = _META + "Status", _META + "DeleteOptions", _META + "Patch"

    def path_parameters(path: str) -> list[Obj]:
        found = []
        for name in ("name", "namespace"):
            if f"{{{name}}}" in path:
                parameter: Obj = {"name": name, "in": "path", "required": True,
                                  "description": f"name of the {rt.kind}" if name == "name"
                                  else "object name and auth scope, such as for teams and projects"}
                parameter.update({"schema": {"type": "string"}} if v3 else {"type": "string"})
                found.append(parameter)
        return found

    def op(action: str, verb: str, body: str | None, answer: str, sub: str = "") -> Obj:
        operation_id = f"{verb}{scope}{rt.kind}{sub.title()}"
        return _operation(rt, action, operation_id, body, answer, v3, gvk)

    paths: dict[str, Obj] = {}
    if rt.namespaced:
        paths[f"{prefix}/{rt.plural}"] = {"get": op("list", "list", None, list_def) | {
            "operationId": f"list{rt.kind}ForAllNamespaces"}}
    paths[root] = {"get": op("list", "list", None, list_def), "post": op("post", "create", kind_def, kind_def),
                   "delete": op("deletecollection", "deletecollection", delete_options, status)}
    paths[f"{root}/{{name}}"] = {"get": op("get", "read", None, kind_def), "put": op("put", "replace", kind_def, kind_def),
                                 "patch": op("patch", "patch", patch, kind_def),
                                 "delete": op("delete", "delete", delete_options, status)}
    if rt.status_subresource:
        paths[f"{root}/{{name}}/status"] = {"get": op("get", "read", None, kind_def, "status"),
                                            "put": op("put", "replace", kind_def, kind_def, "status"),
                                            "patch": op("patch", "patch", patch, kind_def, "status")}
    if rt.scale_subresource:
        scale = "io.k8s.api.autoscaling.v1.Scale"
        paths[f"{root}/{{name}}/scale"] = {"get": op("get", "read", None, scale, "scale"),
                                           "put": op("put", "replace", scale, scale, "scale"),
                                           "patch": op("patch", "patch", patch, scale, "scale")}
    for path, item in paths.items():
        item["parameters"] = path_parameters(path)
    return paths


def _document_parts(types: Iterable[ResourceType], v3: bool) -> tuple[dict[str, Obj], dict[str, Obj]]:
    paths: dict[str, Obj] = {}
    own: dict[str, Obj] = {}
    roots = list(_COMMON)
    for rt in types:
        kind_def, list_def, definitions = _kind_definition(rt, v3)
        if not kind_def:
            continue
        own.update(definitions)
        roots += [kind_def, list_def]
        if rt.scale_subresource:
            roots.append("io.k8s.api.autoscaling.v1.Scale")
        paths.update(_paths(rt, kind_def, list_def, v3))
    return paths, _closure(roots, v3, own)


def _group_version_path(rt: ResourceType) -> str:
    return f"apis/{rt.group}/{rt.version}" if rt.group else f"api/{rt.version}"


def v3_documents(types: Iterable[ResourceType]) -> dict[str, Obj]:
    """One OpenAPI v3 document per served group version, keyed by its path under /openapi/v3/."""
    by_group_version: dict[str, list[ResourceType]] = {}
    for rt in types:
        by_group_version.setdefault(_group_version_path(rt), []).append(rt)
    documents = {}
    for path, members in sorted(by_group_version.items()):
        paths, schemas = _document_parts(sorted(members, key=lambda r: r.plural), True)
        documents[path] = {
            "openapi": "3.0.0", "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION}, "paths": paths,
            "components": {"schemas": dict(sorted(schemas.items())), "securitySchemes": {"BearerToken": {
                "type": "apiKey", "description": "Bearer Token authentication", "name": "authorization",
                "in": "header"}}}}
    return documents


def v3_index(documents: dict[str, Obj]) -> Obj:
    """`GET /openapi/v3`: where each group version's document is, with a hash of its content."""
    return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={document_hash(document)}"}
                      for path, document in documents.items()}}


def document_hash(document: Obj) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


def v2_document(types: Iterable[ResourceType]) -> Obj:
    """`GET /openapi/v2`: every served kind in one Swagger 2.0 document."""
    paths, definitions = _document_parts(sorted(types, key=lambda r: (r.group, r.version, r.plural)), False)
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION}, "paths": paths,
            "definitions": dict(sorted(definitions.items())),
            "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey",
                                                    "name": "authorization", "in": "header"}},
            "security": [{"BearerToken": []}]}


def unknown_builtin_fields(rt: ResourceType, obj: Obj) -> list[str]:
    """Paths of fields a built-in kind's schema does not declare: what the server's strict decoding refuses
    with `fieldValidation=Strict` (kubectl's default --validate=strict)."""
    name = _by_kind().get((rt.group, rt.version, rt.kind))
    if name is None:
        return []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return _unknown(body, _upstream()[name], "")


def _unknown(value: Any, schema: Obj, path: str) -> list[str]:
    while "$ref" in schema:
        schema = _upstream().get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, child in value.items():
            at = f"{path}.{key}" if path else key
            if isinstance(properties, dict) and key in properties:
                found += _unknown(child, properties[key], at)
            elif isinstance(additional, dict):
                found += _unknown(child, additional, at)
            elif isinstance(properties, dict) or additional is False:
                found.append(at)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += _unknown(item, schema["items"], f"{path}[{index}]")
    return found
