"""`kubectl get`-style tables from a CRD's additionalPrinterColumns (simple JSONPath only)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

from tests.fakekube.resources import Obj, ResourceType

_STEP = re.compile(
    r"""\.([A-Za-z0-9_$-]+)"""  # .field
    r"""|\[(\d+)\]"""  # [0]
    r"""|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*["']([^"']*)["']\)\]"""  # [?(@.type=="Ready")]
    r"""|\['([^']+)'\]"""  # ['dotted.key']
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Values at a simple JSONPath: `.a.b`, `.list[0]`, `.conditions[?(@.type=="Ready")].status`, `['a.b']`."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    nodes: list[Any] = [obj]
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if not match:
            raise ValueError(f"unsupported JSONPath {path!r} at {text[position:]!r}")
        key, index, filter_key, filter_value, quoted = match.groups()
        following: list[Any] = []
        for node in nodes:
            if key is not None or quoted is not None:
                name = key if key is not None else quoted
                if isinstance(node, dict) and name in node:
                    following.append(node[name])
            elif index is not None:
                if isinstance(node, list) and int(index) < len(node):
                    following.append(node[int(index)])
            elif isinstance(node, list):
                for item in node:
                    found = jsonpath(item, "." + filter_key)
                    if found and str(found[0]) == filter_value:
                        following.append(item)
        nodes = following
        position = match.end()
    return nodes


def human_duration(seconds: float) -> str:
    """kubectl's short age: 45s, 3m20s, 15m, 5h10m, 3d4h, 400d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    return f"{hours // (24 * 365)}y"


def _cell(value: list[Any], column: Obj, now: dt.datetime) -> str:
    if not value or value[0] is None:
        return "<none>"
    first = value[0]
    if column.get("type") == "date" and isinstance(first, str):
        when = dt.datetime.fromisoformat(first.replace("Z", "+00:00"))
        return human_duration((now - when).total_seconds())
    if isinstance(first, bool):
        return "true" if first else "false"
    if isinstance(first, dict | list):
        import json

        return json.dumps(first, separators=(",", ":"))
    return str(first)


def table(rt: ResourceType, objects: Sequence[Obj], *, all_namespaces: bool = False,
          now: dt.datetime | None = None, wide: bool = False) -> str:
    """The text `kubectl get <resource>` prints for these objects, from the type's printer columns."""
    now = now or dt.datetime.now(dt.UTC)
    columns = [c for c in rt.printer_columns if wide or int(c.get("priority", 0)) == 0]
    if not columns:
        columns = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    header = (["NAMESPACE"] if all_namespaces else []) + ["NAME"] + [str(c["name"]).upper() for c in columns]
    rows = [header]
    for obj in objects:
        meta = obj.get("metadata", {})
        row = ([str(meta.get("namespace", ""))] if all_namespaces else []) + [str(meta.get("name", ""))]
        row += [_cell(jsonpath(obj, str(c["jsonPath"])), c, now) for c in columns]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"
