"""The three patch formats the API server accepts for JSON bodies."""

from __future__ import annotations

import copy
from typing import Any

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


class PatchError(Exception):
    """The patch cannot be applied; the server answers 422 (or 400 for a malformed body)."""

    def __init__(self, message: str, *, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else (lists included) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Lists that strategic merge patch merges by a key instead of replacing (the simple cases of the real
# patchMergeKey tags): containers by name, conditions by type, env by name, ports by containerPort.
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "conditions": "type", "env": "name",
               "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name"}


def strategic_merge_patch(target: Any, patch: Any, field_name: str = "") -> Any:
    """Strategic merge patch for simple cases: a merge patch whose known lists merge by their key.

    Supported directives: `$patch: replace` and `$patch: delete` on objects and list items, and
    `$setElementOrder/<list>` (what kubectl sends with a list it changes, `kubectl set image` among them: the
    merged list's items in the order it names, then any the server had that it does not name, in their order;
    upstream interleaves those by their old positions). Unknown `$`-directives are rejected like the real server
    does.
    """
    if isinstance(patch, list) and isinstance(target, list) and field_name in _MERGE_KEYS:
        return _merge_list(target, patch, _MERGE_KEYS[field_name])
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive is not None:
        raise PatchError(f"unknown patch type: {directive}", code=400)
    result = dict(target) if isinstance(target, dict) else {}
    orders: dict[str, Any] = {}
    for key, value in patch.items():
        if key.startswith(ORDER_DIRECTIVE) and key[len(ORDER_DIRECTIVE):] in _MERGE_KEYS:
            orders[key[len(ORDER_DIRECTIVE):]] = value
            continue
        if key.startswith("$"):
            raise PatchError(f"unknown strategic merge patch directive {key}", code=400)
        if value is None:
            result.pop(key, None)
        else:
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _in_order(result[field], order, _MERGE_KEYS[field])
    return result


ORDER_DIRECTIVE = "$setElementOrder/"


def _in_order(items: list[Any], order: Any, key: str) -> list[Any]:
    if not isinstance(order, list):
        raise PatchError(f"invalid type for {ORDER_DIRECTIVE}: expected a list, got {type(order).__name__}", code=400)
    wanted = [entry.get(key) for entry in order if isinstance(entry, dict)]
    named = [next(item for item in items if isinstance(item, dict) and item.get(key) == value)
             for value in wanted if any(isinstance(item, dict) and item.get(key) == value for item in items)]
    return named + [item for item in items if not (isinstance(item, dict) and item.get(key) in wanted)]


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        index = next((i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", code=400)
    document = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"invalid JSON patch operation: {operation}", code=400)
        op, path = operation["op"], str(operation["path"])
        if op == "add":
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            document, _ = _remove(document, path)
        elif op == "replace":
            document, _ = _remove(document, path)
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "move":
            document, value = _remove(document, str(operation.get("from", "")))
            document = _add(document, path, value)
        elif op == "copy":
            document = _add(document, path, copy.deepcopy(_get(document, str(operation.get("from", "")))))
        elif op == "test":
            if _get(document, path) != operation.get("value"):
                raise PatchError(f"testing value {path} failed")
        else:
            raise PatchError(f"Unexpected kind: {op}", code=400)
    return document


def _split(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with /: {path!r}", code=400)
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str], path: str) -> Any:
    node = document
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return node


def _get(document: Any, path: str) -> Any:
    parts = _split(path)
    if not parts:
        return document
    parent = _parent(document, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(f"doc is missing path: {path!r}")


def _add(document: Any, path: str, value: Any) -> Any:
    parts = _split(path)
    if not parts:
        return value
    parent = _parent(document, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f"add operation does not apply: doc is missing path: {path!r}")
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: {path!r}")
    return document


def _remove(document: Any, path: str) -> tuple[Any, Any]:
    parts = _split(path)
    if not parts:
        return None, document
    parent = _parent(document, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return document, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return document, parent.pop(int(last))
    raise PatchError(f"remove operation does not apply: doc is missing path: {path!r}")
