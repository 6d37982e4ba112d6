"""What the API server does with a CRD's structural schema on every write: apply defaults, then validate.

Defaulting follows apiextensions: a default fills an absent property, defaults apply inside defaulted objects
(hence `default: {}` on parents), and array items are defaulted one by one. Validation uses `jsonschema`
(OpenAPI v3.0 is draft 4 with boolean exclusiveMinimum), and the `x-kubernetes-validations` CEL rules run on
cel-python (standard CEL; the Kubernetes CEL libraries beyond it, such as `isURL` or `quantity`, are missing).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable
from typing import Any

import celpy
import jsonschema
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, CELUnsupportedError


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """`value` with the schema's defaults filled in (a new object; the input is not changed)."""
    if isinstance(value, dict):
        result = dict(value)
        properties = schema.get("properties") or {}
        for name, child in properties.items():
            if name not in result and "default" in child:
                result[name] = copy.deepcopy(child["default"])
            if name in result:
                result[name] = apply_defaults(result[name], child)
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(item, schema["items"]) for item in value]
    return value


def field_path(parts: Iterable[str | int]) -> str:
    """`spec.sources[0].queueName` from jsonschema's path parts."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def validation_errors(value: Any, schema: dict[str, Any]) -> list[tuple[str, str]]:
    """(field path, message) for every schema violation, as the server's 422 causes list them."""
    validator = jsonschema.Draft4Validator(schema)
    found = []
    for error in validator.iter_errors(value):
        path = field_path(deque(error.absolute_path))
        found.append((path, error.message))
    return sorted(found)


_ABSENT = object()


def cel_errors(value: Any, schema: dict[str, Any], path: str = "", *, old: Any = _ABSENT) -> list[tuple[str, str]]:
    """(field path, message) for every `x-kubernetes-validations` rule that does not hold, evaluated with `self`
    bound to the value at the rule's node, as the API server does after defaulting. `old` (an update): a node
    equal to its old value is not checked again (validation ratcheting)."""
    if old is not _ABSENT and old is not None and value == old:
        return []
    found: list[tuple[str, str]] = []
    for rule in schema.get("x-kubernetes-validations") or []:
        try:
            result = _program(rule["rule"]).evaluate({"self": json_to_cel(value)})
            if isinstance(result, CELEvalError):
                raise result
            holds = bool(result)
            message = str(rule.get("message") or f"failed rule: {rule['rule']}")
        except (CELEvalError, CELParseError, CELUnsupportedError, TypeError, ValueError) as error:
            holds, message = False, f"rule {rule['rule']!r} could not be evaluated: {error}"
        if not holds:
            found.append((path + str(rule.get("fieldPath", "")), message))
    if isinstance(value, dict):
        previous = old if isinstance(old, dict) else {}
        for name, child in (schema.get("properties") or {}).items():
            if name in value:
                found += cel_errors(value[name], child, f"{path}.{name}" if path else name,
                                    old=previous.get(name, _ABSENT))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += cel_errors(item, schema["items"], f"{path}[{index}]")
    return found


_CEL = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _program(rule: str) -> Any:
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _CEL.program(_CEL.compile(rule))
    return _PROGRAMS[rule]


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Paths of fields the schema does not declare (the server prunes them, or refuses them when Strict)."""
    found: list[str] = []
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for name, child in value.items():
            at = f"{path}.{name}" if path else name
            if properties is not None and name in properties:
                found += unknown_fields(child, properties[name], at)
            elif isinstance(additional, dict):
                found += unknown_fields(child, additional, at)
            elif properties is not None or additional is False:
                found.append(at)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += unknown_fields(item, schema["items"], f"{path}[{index}]")
    return found


def prune(value: Any, schema: dict[str, Any]) -> Any:
    """`value` without the fields the schema does not declare, as the API server stores a custom resource."""
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is None and not isinstance(additional, dict):
            return value
        kept = {}
        for name, child in value.items():
            if properties is not None and name in properties:
                kept[name] = prune(child, properties[name])
            elif isinstance(additional, dict):
                kept[name] = prune(child, additional)
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value
