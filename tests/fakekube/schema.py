"""What the API server does with a CRD's structural schema on every write: apply defaults, then validate.

Defaulting follows apiextensions: a default fills an absent property, defaults apply inside defaulted objects
(hence `default: {}` on parents), and array items are defaulted one by one. Validation uses `jsonschema`
(OpenAPI v3.0 is draft 4 with boolean exclusiveMinimum); it ignores `x-kubernetes-*`, so CEL rules are not run.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable
from typing import Any

import jsonschema


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
