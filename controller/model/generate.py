"""The CRD's schema and the reference tables, written from the fields' declarations (`controller.model.schema`).

Pure functions of text: each takes a file's current text and returns it with the part between its markers
regenerated, so the prose around (comments of crd.yaml, the paragraphs of docs/reference.md) stays as written.
`tools/generate_schema.py` writes the files; tests/model/test_generate.py checks they are current.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import yaml

from controller.model import schema
from controller.model.fields import format_duration
from controller.model.rule import SPEC

CRD_BEGIN = "# BEGIN generated from controller/model by tools/generate_schema.py: edit the declarations, not this"
CRD_END = "# END generated"
TABLE_BEGIN = re.compile(r"<!-- BEGIN generated: the fields of (\S+?) \(tools/generate_schema\.py\) -->\n")
TABLE_END = "<!-- END generated -->"


class DeclarationError(ValueError):
    """Declarations the generator cannot write: two kinds disagree on a shared field, a field has no words."""


# ----------------------------------------------------------------------------------------------------------------
# Fields shared by queue kinds


@dataclass(frozen=True)
class KindShare:
    """One field of `spec.sources[]` and the kinds that use it, each with its own default (None: none)."""

    field: schema.Field
    defaults: tuple[tuple[str, object], ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind, _ in self.defaults)


_WORDS = {"default", "doc", "note", "description", "required"}
"""What queue kinds may declare differently for one field: its default and its words."""


def _without_words(field: schema.Field) -> tuple[object, ...]:
    return type(field), tuple((f.name, getattr(field, f.name)) for f in fields(field) if f.name not in _WORDS)


def shared_fields(source: schema.OneOfKinds) -> list[KindShare]:
    """The kinds' fields, one per name in the order they first appear; raises when kinds disagree on one."""
    by_name: dict[str, list[tuple[str, schema.Field]]] = {}
    for declared in source.kinds:
        for field in declared.fields:
            by_name.setdefault(field.name, []).append((declared.kind, field))
    shares = []
    for name, uses in by_name.items():
        first = uses[0][1]
        for kind, field in uses[1:]:
            if _without_words(field) != _without_words(first):
                raise DeclarationError(f"spec.sources[].{name}: {kind} declares it unlike {uses[0][0]}; a source's "
                                       "fields share one schema whatever its type")
        shares.append(KindShare(first, tuple((kind, getattr(field, "default", None)) for kind, field in uses)))
    return shares


# ----------------------------------------------------------------------------------------------------------------
# The CRD's openAPIV3Schema


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _rule(rule: schema.Rule) -> dict[str, str]:
    out = {"rule": rule.rule, "message": rule.message}
    if rule.field_path is not None:
        out["fieldPath"] = rule.field_path
    if rule.reason is not None:
        out["reason"] = rule.reason
    return out


def _properties(fields: tuple[schema.Field, ...] | list[schema.Field]) -> dict[str, Any]:
    return {field.name: openapi(field) for field in fields}


def openapi(field: schema.Field, *, schema_default: bool = True, description: str | None = None) -> dict[str, Any]:
    """The OpenAPI v3 schema of one declared field, as a CRD holds it.

    `schema_default=False` leaves the default out (a queue kind's own field); `description` replaces the field's.
    """
    out: dict[str, Any] = {}
    default = getattr(field, "default", None) if schema_default else None
    described = field.description if description is None else description
    if isinstance(field, schema.Duration):
        out["x-kubernetes-int-or-string"] = True
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif isinstance(field, schema.Text | schema.Choice):
        out["type"] = "string"
    elif isinstance(field, schema.Integer):
        out["type"] = "integer"
        if field.int32:
            out["format"] = "int32"
    elif isinstance(field, schema.Number):
        out["type"] = "number"
    elif isinstance(field, schema.Boolean):
        out["type"] = "boolean"
    elif isinstance(field, schema.SecretRef | schema.Object | schema.OneOfKinds):
        out["type"] = "object"
    elif isinstance(field, schema.ListOf):
        out["type"] = "array"
    else:
        raise DeclarationError(f"{field.name}: no schema for a {type(field).__name__}")
    if isinstance(field, schema.SecretRef):
        described = described or schema.SECRET_REF_DESCRIPTION
    if described:
        out["description"] = _Prose(described)

    if isinstance(field, schema.Text):
        if default is not None:
            out["default"] = default
        if field.min_length is not None:
            out["minLength"] = field.min_length
        if field.max_length is not None:
            out["maxLength"] = field.max_length
        if field.pattern is not None:
            out["pattern"] = f"^{field.pattern}$"
    elif isinstance(field, schema.Integer | schema.Number):
        if default is not None:
            out["default"] = _number(default)
        if field.minimum is not None:
            out["minimum"] = _number(field.minimum)
            if isinstance(field, schema.Number) and field.exclusive_minimum:
                out["exclusiveMinimum"] = True
        if field.maximum is not None:
            out["maximum"] = _number(field.maximum)
    elif isinstance(field, schema.Duration):
        if default is not None:
            out["default"] = format_duration(default)
        # The CRD bounds a number of seconds only (a string's bound is the operator's: a CEL rule reading an
        # int-or-string costs too much, see tests/project/test_crd_cel_cost.py); a bound below a second becomes
        # "more than the whole seconds below it".
        whole = int(field.minimum)
        out["minimum"] = whole
        if whole != field.minimum:
            out["exclusiveMinimum"] = True
        if field.maximum is not None:
            out["maximum"] = _number(field.maximum)
        out["maxLength"] = schema.DURATION_MAX_LENGTH
        out["pattern"] = f"^{schema.DURATION_PATTERN}$"
    elif isinstance(field, schema.Boolean):
        if default is not None:
            out["default"] = default
    elif isinstance(field, schema.Choice):
        out["enum"] = list(field.choices)
        if default is not None:
            out["default"] = default
    elif isinstance(field, schema.SecretRef):
        out["required"] = [schema.SECRET_NAME.name, schema.SECRET_KEY.name]
        out["properties"] = _properties((schema.SECRET_NAME, schema.SECRET_KEY))
    elif isinstance(field, schema.Object):
        required = [f.name for f in field.fields if f.required]
        if required:
            out["required"] = required
        if field.defaulted:
            out["default"] = {}
        if field.rules:
            out["x-kubernetes-validations"] = [_rule(r) for r in field.rules]
        out["properties"] = _properties(field.fields)
    elif isinstance(field, schema.OneOfKinds):
        out["required"] = [f.name for f in field.common if f.required]
        out["x-kubernetes-validations"] = [_rule(r) for kind in field.kinds for r in kind.rules]
        properties = _properties(field.common)
        for share in shared_fields(field):
            properties[share.field.name] = openapi(share.field, schema_default=False,
                                                   description=_kind_description(share))
        out["properties"] = properties
    elif isinstance(field, schema.ListOf):
        if field.min_items:
            out["minItems"] = field.min_items
        if field.max_items is not None:
            out["maxItems"] = field.max_items
        if field.map_keys:
            out["x-kubernetes-list-type"] = "map"
            out["x-kubernetes-list-map-keys"] = list(field.map_keys)
        else:
            out["x-kubernetes-list-type"] = "atomic"
        out["items"] = openapi(field.items)
    return out


def _kind_description(share: KindShare) -> str:
    """A shared field whose kinds default it differently says so ("6379 for redis-list, 5432 for sql-table")."""
    defaults = [default for _, default in share.defaults]
    if share.field.description or len(defaults) < 2 or None in defaults or len(set(defaults)) < 2:
        return share.field.description
    return ", ".join(f"{_shown(default)} for {kind}" for kind, default in share.defaults) + " when unset."


def spec_schema() -> dict[str, Any]:
    """The CRD's schema of `spec`, from the declarations."""
    return openapi(SPEC)


class _Dumper(yaml.SafeDumper):
    """Block style, but short lists (`required`, `enum`, `anyOf`) on one line as a person writes them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        del indentless  # list items indented under their key, as the rest of manifests/ has them
        super().increase_indent(flow, False)

    def process_scalar(self) -> None:
        # Only descriptions fold; a CEL rule, its message or a pattern stays on one line, as one reads it.
        if getattr(self.event, "style", None) == ">":
            super().process_scalar()
            return
        width, self.best_width = self.best_width, 100_000
        try:
            super().process_scalar()
        finally:
            self.best_width = width


def _represent_list(dumper: yaml.SafeDumper, items: list[Any]) -> yaml.Node:
    short = all(not isinstance(i, dict | list) or (isinstance(i, dict) and len(i) == 1) for i in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=short)


class _Prose(str):
    """A description: folded (`>-`) when long, rather than running on as one quoted line."""


def _represent_prose(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = ">" if len(text) > 60 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(_Prose, _represent_prose)


def crd_text(current: str) -> str:
    """`current` (manifests/crd.yaml) with its generated `spec:` schema rewritten from the declarations."""
    begin, end = current.find(CRD_BEGIN), current.find(CRD_END)
    if begin < 0 or end < begin:
        raise DeclarationError(f"the CRD has no generated part: mark it with '{CRD_BEGIN}' and '{CRD_END}'")
    indent = current[current.rfind("\n", 0, begin) + 1:begin]
    body = yaml.dump({"spec": spec_schema()}, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    block = "".join(f"{indent}{line}\n" if line else "\n" for line in body.splitlines())
    return current[:begin] + CRD_BEGIN + "\n" + block + indent + current[end:]


# ----------------------------------------------------------------------------------------------------------------
# The reference tables


@dataclass(frozen=True)
class Row:
    """One field as the reference shows it, at its path (`spec.sources[].port`)."""

    path: str
    field: schema.Field
    share: KindShare | None = None


def rows(field: schema.Field, path: str) -> Iterator[Row]:
    """Every field under `field` (not itself), depth first, in declaration order."""
    if isinstance(field, schema.Object):
        children: list[Row] = [Row(f"{path}.{f.name}", f) for f in field.fields]
    elif isinstance(field, schema.SecretRef):
        children = [Row(f"{path}.{f.name}", f) for f in (schema.SECRET_NAME, schema.SECRET_KEY)]
    elif isinstance(field, schema.OneOfKinds):
        children = [Row(f"{path}.{f.name}", f) for f in field.common]
        children += [Row(f"{path}.{s.field.name}", s.field, s) for s in shared_fields(field)]
    elif isinstance(field, schema.ListOf):
        yield from rows(field.items, path + "[]")
        return
    else:
        return
    for row in children:
        yield row
        yield from rows(row.field, row.path)


def field_at(path: str, spec: schema.Object | None = None) -> schema.Field:
    """The declared field at `path` (`spec`, `spec.policy`, `spec.sources[]`) of `spec` (the QueueScaler's)."""
    spec = spec or SPEC
    if path == "spec":
        return spec
    for row in rows(spec, "spec"):
        if row.path == path:
            return row.field
        if row.path + "[]" == path and isinstance(row.field, schema.ListOf):
            return row.field.items
    raise DeclarationError(f"no field {path}")


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(_number(value))
    return str(value)


def _type_word(field: schema.Field) -> str:
    if isinstance(field, schema.Duration):
        return "duration"
    if isinstance(field, schema.Text | schema.Choice):
        return "string"
    if isinstance(field, schema.Integer):
        return "integer"
    if isinstance(field, schema.Number):
        return "number"
    if isinstance(field, schema.Boolean):
        return "boolean"
    if isinstance(field, schema.ListOf):
        return "list"
    return "object"


def _default_cell(row: Row) -> str:
    def one(field: schema.Field, value: object) -> str:
        shown = (format_duration(value) if isinstance(field, schema.Duration) and isinstance(value, float)
                 else _shown(value))
        return f"`{shown}`"

    if row.share is not None:
        given = [(kind, default) for kind, default in row.share.defaults if default is not None]
        if len(row.share.kinds) == 1:
            return one(row.field, given[0][1]) if given else ""
        return ", ".join(f"{one(row.field, default)} ({kind})" for kind, default in given)
    if isinstance(row.field, schema.Object):
        return "`{}`" if row.field.defaulted else ""
    default = getattr(row.field, "default", None)
    return "" if default is None else one(row.field, default)


def _range(low: str | None, high: str | None, unit: str = "") -> str:
    suffix = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"{low} to {high}{suffix}"
    if low is not None:
        return f"≥ {low}{suffix}"
    return f"≤ {high}{suffix}"


def _bounds_cell(row: Row) -> str:
    field, parts = row.field, []
    if row.share is not None:
        parts.append(", ".join(row.share.kinds))
    if field.required:
        parts.append("required")
    if isinstance(field, schema.Integer | schema.Number) and (field.minimum is not None or field.maximum is not None):
        low = None if field.minimum is None else _shown(_number(field.minimum))
        high = None if field.maximum is None else _shown(_number(field.maximum))
        if isinstance(field, schema.Number) and field.exclusive_minimum and high is None:
            parts.append(f"> {low}")
        else:
            parts.append(_range(low, high))
    elif isinstance(field, schema.Duration):
        parts.append(_range(format_duration(field.minimum) if field.minimum else "0",
                            None if field.maximum is None else format_duration(field.maximum)))
    elif isinstance(field, schema.Text) and (field.min_length or field.max_length is not None):
        low = str(field.min_length) if field.min_length else None
        high = None if field.max_length is None else str(field.max_length)
        parts.append(_range(low, high, "characters"))
    elif isinstance(field, schema.Choice):
        parts.append(", ".join(f"`{choice}`" for choice in field.choices))
    elif isinstance(field, schema.ListOf):
        if field.min_items or field.max_items is not None:
            parts.append(_range(str(field.min_items) if field.min_items else None,
                                None if field.max_items is None else str(field.max_items), "items"))
        if isinstance(field.items, schema.Choice):
            parts.append("of " + ", ".join(f"`{choice}`" for choice in field.items.choices))
        if field.map_keys:
            parts.append("unique " + ", ".join(f"`{key}`" for key in field.map_keys))
    if field.note:
        parts.append(field.note)
    return "; ".join(parts)


def table(root: str, spec: schema.Object | None = None) -> str:
    """The Markdown table of the fields under `root` of `spec` (the QueueScaler's), but those under a field that
    has a table of its own."""
    own_tables = {"spec.sources", "spec.policy", "spec.fallback", "spec.schedules"} - {root.removesuffix("[]")}
    lines = ["| field | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for row in rows(field_at(root, spec), root):
        if any(row.path.startswith(f"{other}.") or row.path.startswith(f"{other}[].") for other in own_tables):
            continue
        if not row.field.doc:
            raise DeclarationError(f"{row.path} has no doc: the reference needs a meaning for every field")
        cells = (f"`{row.path}`", _type_word(row.field), _default_cell(row), _bounds_cell(row), row.field.doc)
        lines.append("|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|")
    return "\n".join(lines) + "\n"


def reference_text(current: str) -> str:
    """`current` (docs/reference.md) with each generated table rewritten from the declarations."""
    out, position = [], 0
    for begin in TABLE_BEGIN.finditer(current):
        end = current.find(TABLE_END, begin.end())
        if end < 0:
            raise DeclarationError(f"a generated table of {begin.group(1)} has no '{TABLE_END}'")
        out += [current[position:begin.end()], table(begin.group(1))]
        position = end
    if not out:
        raise DeclarationError("docs/reference.md has no generated table")
    return "".join(out) + current[position:]
