"""What `kubectl get` prints from the Table the server sends (tests/fakekube/table.py evaluates it, once).

Client side, as k8s.io/cli-runtime pkg/printers/tableprinter.go printTable does: upper-cased column names,
columns of priority > 0 only with `-o wide`, a null cell printed as nothing, NAMESPACE first for `-A` (from the
row's object), cells separated by a tabwriter with three spaces of padding.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from tests.fakekube import table as server_table
from tests.fakekube.resources import Obj, ResourceType
from tests.fakekube.table import human_duration, jsonpath

__all__ = ["human_duration", "jsonpath", "render", "table"]


def _text(cell: object) -> str:
    if cell is None:
        return ""
    if isinstance(cell, bool):
        return "true" if cell else "false"
    if isinstance(cell, float):
        # Go's %v of a float64: no trailing ".0" for whole numbers.
        return str(int(cell)) if cell.is_integer() and abs(cell) < 1e21 else repr(cell)
    text = str(cell)
    for stop in "\f\n\r":  # kubectl cuts a cell at its first line break
        if stop in text:
            text = text[: text.index(stop)] + "..."
    return text


def render(answer: Obj, *, all_namespaces: bool = False, wide: bool = False) -> str:
    """kubectl's text for a Table answer."""
    definitions = answer.get("columnDefinitions") or []
    shown = [i for i, c in enumerate(definitions) if wide or int(c.get("priority", 0)) == 0]
    rows_in = answer.get("rows") or []
    if not rows_in:
        return ""
    header = (["NAMESPACE"] if all_namespaces else []) + [str(definitions[i]["name"]).upper() for i in shown]
    rows = [header]
    for row in rows_in:
        metadata = (row.get("object") or {}).get("metadata") or {}
        cells = row.get("cells") or []
        rows.append(([str(metadata.get("namespace", ""))] if all_namespaces else [])
                     + [_text(cells[i]) if i < len(cells) else "" for i in shown])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def table(rt: ResourceType, objects: Sequence[Obj], *, all_namespaces: bool = False,
          now: dt.datetime | None = None, wide: bool = False) -> str:
    """The text `kubectl get <resource>` prints for these objects."""
    return render(server_table.to_table(rt, objects, now=now), all_namespaces=all_namespaces, wide=wide)
