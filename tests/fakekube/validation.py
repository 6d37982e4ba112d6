"""Validation of custom resources worded as the real API server words it: field errors and the 422 `Invalid` Status.

Transcribed (not copied) from upstream, Kubernetes 1.33:
- field errors and their text: k8s.io/apimachinery `pkg/util/validation/field/errors.go` (`Error.ErrorBody`, `Invalid`,
  `Required`, `NotSupported`, `TooLong`, `TooMany`, `Duplicate`), joined by `ErrorList.ToAggregate` and wrapped by
  `pkg/api/errors/errors.go` `NewInvalid` (`<Kind>.<group> "<name>" is invalid: ...`, `[a, b]` for several);
- the schema checks and their messages: k8s.io/kube-openapi `pkg/validation/errors/schema.go` and
  `pkg/validation/validate/{type,validator,object_validator,slice_validator,schema_props}.go`, mapped to field
  errors by k8s.io/apiextensions-apiserver `pkg/apiserver/validation/validation.go` (`kubeOpenAPIResultToFieldErrors`);
- CEL rules: apiextensions-apiserver `pkg/apiserver/schema/cel/validation.go` (`fieldErrorForReason`,
  `ruleMessageOrDefault`: the value shown is the schema type, "object" for an object);
- the order (schema, list-type invariants, then CEL unless a blocking error came first) and the blocking note:
  apiextensions-apiserver `pkg/registry/customresource/strategy.go` (`Validate`, `hasBlockingErr`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, CELUnsupportedError

# field.ErrorType: the cause `reason` and the words ErrorBody starts with.
REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
NOT_SUPPORTED = "FieldValueNotSupported"
FORBIDDEN = "FieldValueForbidden"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
DUPLICATE = "FieldValueDuplicate"
TYPE_INVALID = "FieldValueTypeInvalid"
_WORDS = {REQUIRED: "Required value", INVALID: "Invalid value", NOT_SUPPORTED: "Unsupported value",
          FORBIDDEN: "Forbidden", TOO_LONG: "Too long", TOO_MANY: "Too many", DUPLICATE: "Duplicate value",
          TYPE_INVALID: "Invalid value"}
_OMIT = object()  # TooMany with an unknown count: the value is left out of the text


@dataclass(frozen=True)
class FieldError:
    """One `field.Error`: its type, the field path ("<nil>" for none), the bad value and the detail."""

    type: str
    field: str
    value: Any = None
    detail: str = ""
    text: str = ""  # the whole body, for errors the fake words itself

    def body(self) -> str:
        """`ErrorBody()`: the text without the field."""
        if self.text:
            return self.text
        words = _WORDS[self.type]
        if self.type in (REQUIRED, FORBIDDEN, TOO_LONG) or self.value is _OMIT:
            text = words
        else:
            text = f"{words}: {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict[str, str]:
        return {"reason": self.type, "message": self.body(), "field": self.field}


def go_value(value: Any) -> str:
    """A bad value as `ErrorBody` prints it: numbers and booleans plain, strings quoted (%q), nil as "null",
    anything else Go's %#v of the decoded JSON."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (dict, list)):
        return _go_sharp_v(value)
    return str(value)  # already in Go's words (a []string printed with %#v)


def go_float(number: float) -> str:
    """Go's %v of a float64: the shortest form, exponent only from 1e21 (or below 1e-4)."""
    if math.isfinite(number) and number == int(number) and abs(number) < 1e21:
        return str(int(number))
    return repr(number)  # Python's shortest repr agrees with Go's (1e-05, 1.5e+22)


def _go_sharp_v(value: Any) -> str:
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(str(k))}:{_go_sharp_v(v)}" for k, v in sorted(value.items()))
        return f"map[string]interface {{}}{{{inner}}}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_sharp_v(v) for v in value) + "}"
    if value is None:
        return "interface {}(nil)"
    return go_value(value)


def invalid_status(kind: str, group: str, name: str, errors: list[FieldError]) -> dict[str, Any]:
    """The 422 Status body `errors.NewInvalid(GroupKind, name, errs)` builds (message, details with causes)."""
    qualified = f"{kind}.{group}" if group else kind
    unique: list[str] = []
    for error in errors:  # ToAggregate drops repeated messages
        if str(error) not in unique:
            unique.append(str(error))
    aggregated = unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
    message = f'{qualified} "{name}" is invalid: {aggregated}' if unique else f'{qualified} "{name}" is invalid'
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "Invalid",
            "details": {"name": name, "group": group, "kind": kind, "causes": [e.cause() for e in errors]},
            "code": 422}


# --------------------------------------------------------------------------------------------------------------
# The OpenAPI v3 schema checks (kube-openapi), each with the field error apiextensions turns it into

def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(declared: str, actual: str, value: Any) -> bool:
    if declared == actual:
        return True
    if declared == "number" and actual == "integer":
        return True
    # A float that is a whole number is an integer to kube-openapi (swag.IsFloat64AJSONInteger).
    return declared == "integer" and actual == "number" and float(value).is_integer()


def schema_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[FieldError]:
    """Every schema violation of `value`, as field errors, in kube-openapi's order for one node."""
    where = path or "."
    found: list[FieldError] = []
    if value is None:
        if schema.get("nullable"):
            return []
        declared = schema.get("type")
        if declared:
            return [FieldError(TYPE_INVALID, path or "<nil>", "null",
                               f'{where} in body must be of type {declared}: "null"')]
        return []
    # SchemaValidator runs, in this order, the validators that apply to the value's kind: type, schema props
    # (anyOf), string, number, slice, common (enum, whatever the type), object.
    actual = _json_type(value)
    declared = schema.get("type")
    if declared and not _type_ok(str(declared), actual, value):
        found.append(FieldError(TYPE_INVALID, path or "<nil>", actual,
                                f'{where} in body must be of type {declared}: "{actual}"'))
        return found + _enum_errors(value, schema, path)
    found += _any_of(value, schema, path)
    if isinstance(value, str):
        found += _string_errors(value, schema, path)
    elif actual in ("integer", "number"):
        found += _number_errors(value, schema, path)
    elif isinstance(value, list):
        found += _array_errors(value, schema, path)
    found += _enum_errors(value, schema, path)
    if isinstance(value, dict):
        found += _object_errors(value, schema, path)
    return found


def _enum_errors(value: Any, schema: dict[str, Any], path: str) -> list[FieldError]:
    if "enum" not in schema or value in schema["enum"]:
        return []
    allowed = [v if isinstance(v, str) else json.dumps(v) for v in schema["enum"]]
    return [FieldError(NOT_SUPPORTED, path, value, "supported values: " + ", ".join(json.dumps(v) for v in allowed))]


def _any_of(value: Any, schema: dict[str, Any], path: str) -> list[FieldError]:
    options = schema.get("anyOf")
    if not options:
        return []
    best: list[FieldError] | None = None
    for option in options:
        failures = schema_errors(value, option, path)
        if not failures:
            return []
        if best is None:
            best = failures
    # Not a *Validation error upstream: apiextensions reports it on the nil path with an empty value.
    return [FieldError(INVALID, "<nil>", "", f"{json.dumps(path)} must validate at least one schema (anyOf)"),
            *(best or [])]


def _string_errors(value: str, schema: dict[str, Any], path: str) -> list[FieldError]:
    # The string validator stops at its first failure (maxLength, then minLength, then pattern).
    if "maxLength" in schema and len(value) > int(schema["maxLength"]):
        return [FieldError(TOO_LONG, path, "", f"may not be more than {int(schema['maxLength'])} bytes")]
    if "minLength" in schema and len(value) < int(schema["minLength"]):
        return [FieldError(INVALID, path, value,
                           f"{path} in body should be at least {int(schema['minLength'])} chars long")]
    pattern = schema.get("pattern")
    if pattern is not None and re.search(_go_regex(str(pattern)), value) is None:
        return [FieldError(INVALID, path, value, f"{path} in body should match '{pattern}'")]
    return []


def _go_regex(pattern: str) -> str:
    # RE2 and Python agree on the patterns a CRD uses; \z is RE2's end of text.
    return pattern.replace(r"\z", r"\Z")


def _bound(limit: Any, value: Any) -> str:
    # MinimumNativeType: an integer value is compared (and printed) as int64, anything else as float64.
    return str(int(limit)) if isinstance(value, int) else go_float(float(limit))


def _number_errors(value: float, schema: dict[str, Any], path: str) -> list[FieldError]:
    found: list[FieldError] = []
    factor = schema.get("multipleOf")
    if factor is not None and (value / factor) != int(value / factor):
        found.append(FieldError(INVALID, path, value, f"{path} in body should be a multiple of {go_float(factor)}"))
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            found.append(FieldError(INVALID, path, value, f"{path} in body should be greater than {_bound(low, value)}"))
        elif value < low:
            found.append(FieldError(INVALID, path, value,
                                    f"{path} in body should be greater than or equal to {_bound(low, value)}"))
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            found.append(FieldError(INVALID, path, value, f"{path} in body should be less than {_bound(high, value)}"))
        elif value > high:
            found.append(FieldError(INVALID, path, value,
                                    f"{path} in body should be less than or equal to {_bound(high, value)}"))
    return found


def _array_errors(value: list[Any], schema: dict[str, Any], path: str) -> list[FieldError]:
    found: list[FieldError] = []
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            found += schema_errors(item, items, f"{path}[{index}]")
    if "minItems" in schema and len(value) < int(schema["minItems"]):
        found.append(FieldError(INVALID, path, len(value),
                                f"{path} in body should have at least {int(schema['minItems'])} items"))
    if "maxItems" in schema and len(value) > int(schema["maxItems"]):
        found.append(FieldError(TOO_MANY, path, len(value), f"must have at most {int(schema['maxItems'])} items"))
    if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) < len(value):
        found.append(FieldError(INVALID, path, "", f"{path} in body shouldn't contain duplicates"))
    return found


def _object_errors(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[FieldError]:
    found: list[FieldError] = []
    where = path or "."
    if "minProperties" in schema and len(value) < int(schema["minProperties"]):
        found.append(FieldError(INVALID, path or "<nil>", len(value),
                                f"{where} in body should have at least {int(schema['minProperties'])} properties"))
    if "maxProperties" in schema and len(value) > int(schema["maxProperties"]):
        found.append(FieldError(TOO_MANY, path or "<nil>", len(value),
                                f"must have at most {int(schema['maxProperties'])} items"))
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for name in sorted(value):
        at = f"{path}.{name}" if path else name
        if name in properties:
            found += schema_errors(value[name], properties[name], at)
        elif isinstance(additional, dict):
            found += schema_errors(value[name], additional, at)
    for name in schema.get("required") or []:
        if name not in value:
            found.append(FieldError(REQUIRED, f"{path}.{name}" if path else name))
    return found


# --------------------------------------------------------------------------------------------------------------
# x-kubernetes-list-type invariants (apiextensions-apiserver pkg/apiserver/schema/listtype/validation.go)

def list_type_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[FieldError]:
    """Duplicate items of `set` lists and duplicate keys of `map` lists."""
    found: list[FieldError] = []
    if isinstance(value, list):
        kind = schema.get("x-kubernetes-list-type")
        seen: list[Any] = []
        for index, item in enumerate(value):
            if kind == "set":
                if item in seen:
                    found.append(FieldError(DUPLICATE, f"{path}[{index}]", item))
                seen.append(item)
            elif kind == "map" and isinstance(item, dict):
                key = {k: item.get(k) for k in schema.get("x-kubernetes-list-map-keys") or [] if k in item}
                if key in seen:
                    found.append(FieldError(DUPLICATE, f"{path}[{index}]", key))
                seen.append(key)
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                found += list_type_errors(item, items, f"{path}[{index}]")
    elif isinstance(value, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name in value:
                found += list_type_errors(value[name], child, f"{path}.{name}" if path else name)
    return found


# --------------------------------------------------------------------------------------------------------------
# CEL rules (x-kubernetes-validations)

_ABSENT = object()
_CEL = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _program(rule: str) -> Any:
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _CEL.program(_CEL.compile(rule))
    return _PROGRAMS[rule]


def _rule_error(path: str, type_name: str, rule: dict[str, Any], detail: str) -> FieldError:
    # fieldErrorForReason: the reason picks the error type; Invalid and Duplicate show the schema's type.
    reason = rule.get("reason")
    if reason == FORBIDDEN:
        return FieldError(FORBIDDEN, path, None, detail)
    if reason == REQUIRED:
        return FieldError(REQUIRED, path, None, detail)
    if reason == DUPLICATE:
        return FieldError(DUPLICATE, path, type_name)
    return FieldError(INVALID, path, type_name, detail)


def cel_errors(value: Any, schema: dict[str, Any], path: str = "", *, old: Any = _ABSENT) -> list[FieldError]:
    """A field error for every rule that does not hold, with `self` bound to the value at the rule's node.
    `old` (an update): a node equal to its old value is not checked again (CRD validation ratcheting, GA in 1.33)."""
    if old is not _ABSENT and old is not None and value == old:
        return []
    found: list[FieldError] = []
    type_name = str(schema.get("type", ""))
    at = path or "<nil>"
    for rule in schema.get("x-kubernetes-validations") or []:
        text = str(rule["rule"]).strip()
        where = at
        if rule.get("fieldPath"):
            where = (path + str(rule["fieldPath"])) if path else str(rule["fieldPath"]).lstrip(".")
        activation = {"self": json_to_cel(value)}
        try:
            result = _program(text).evaluate(activation)
            if isinstance(result, CELEvalError):
                raise result
        except (CELEvalError, CELParseError, CELUnsupportedError, TypeError, ValueError) as error:
            found.append(FieldError(INVALID, at, type_name, f"{error} evaluating rule: {rule.get('message') or text}"))
            continue
        if bool(result):
            continue
        detail = f"failed rule: {text}" if not rule.get("message") else str(rule["message"]).strip()
        if rule.get("messageExpression"):
            try:
                shown = _program(str(rule["messageExpression"])).evaluate(activation)
                if isinstance(shown, str) and shown.strip():
                    detail = str(shown)
            except (CELEvalError, CELParseError, CELUnsupportedError, TypeError, ValueError):
                pass  # upstream logs it and falls back to the message
        found.append(_rule_error(where, type_name, rule, detail))
    if isinstance(value, dict):
        previous = old if isinstance(old, dict) else {}
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for name in value:
            child = properties.get(name) or (additional if isinstance(additional, dict) else None)
            if child is not None:
                found += cel_errors(value[name], child, f"{path}.{name}" if path else name,
                                    old=previous.get(name, _ABSENT))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += cel_errors(item, schema["items"], f"{path}[{index}]")
    return found


def blocks_cel(errors: list[FieldError]) -> bool:
    """hasBlockingErr: type, required, enum, maxLength and maxItems failures stop the CEL rules from running."""
    return any(e.type in (NOT_SUPPORTED, REQUIRED, TOO_LONG, TOO_MANY, TYPE_INVALID) for e in errors)


BLOCKED_NOTE = FieldError(INVALID, "<nil>", None, "some validation rules were not checked because the object was "
                          "invalid; correct the existing errors to complete validation")


def custom_resource_errors(obj: dict[str, Any], schema: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """customResourceStrategy.Validate(Update): schema, list-type invariants, then the CEL rules unless blocked."""
    found = schema_errors(obj, schema) + list_type_errors(obj, schema)
    if blocks_cel(found):
        return [*found, BLOCKED_NOTE]
    return found + (cel_errors(obj, schema) if old is None else cel_errors(obj, schema, old=old))
