"""Label and field selectors as the API server parses them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Requirement = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"\s*(!?)\s*({_KEY})\s*(?:(notin|in)\s*\(([^)]*)\)|(==|!=|=)\s*([-A-Za-z0-9_.]*))?\s*$")


class SelectorError(ValueError):
    """A selector the server cannot parse: 400 BadRequest."""


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t for t in (term.strip() for term in terms) if t]


def parse_label_selector(selector: str) -> Requirement:
    """`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, joined by commas (AND)."""
    requirements: list[Requirement] = []
    for term in _split_terms(selector):
        match = _SET_RE.fullmatch(term)
        if not match:
            raise SelectorError(f"unable to parse requirement: {term!r}")
        negated, key, set_op, values, op, value = match.groups()
        if negated and (set_op or op):
            raise SelectorError(f"unable to parse requirement: {term!r}")
        requirements.append(_requirement(key, set_op or op or ("!" if negated else ""), values, value))
    return lambda labels: all(requirement(labels) for requirement in requirements)


def _requirement(key: str, op: str, values: str | None, value: str | None) -> Requirement:
    allowed = {v.strip() for v in (values or "").split(",") if v.strip()}

    def requirement(labels: Mapping[str, str]) -> bool:
        if op == "in":
            return labels.get(key) in allowed
        if op == "notin":
            return labels.get(key) not in allowed
        if op in ("=", "=="):
            return labels.get(key) == value
        if op == "!=":
            return labels.get(key) != value
        if op == "!":
            return key not in labels
        return key in labels

    return requirement


FIELD_PATHS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}


def parse_field_selector(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    """`metadata.name=x`, `metadata.namespace!=y`: the two fields every resource supports."""
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    for term in _split_terms(selector):
        match = re.fullmatch(r"([A-Za-z.]+)\s*(==|!=|=)\s*(.*)", term)
        if not match:
            raise SelectorError(f"invalid selector: {term!r}; can't understand {term!r}")
        field, op, value = match.groups()
        if field not in FIELD_PATHS:
            raise SelectorError(f'field label not supported: {field}')
        section, name = FIELD_PATHS[field]

        def check(obj: Mapping[str, Any], s: str = section, n: str = name, v: str = value, o: str = op) -> bool:
            actual = str((obj.get(s) or {}).get(n, ""))
            return actual != v if o == "!=" else actual == v

        checks.append(check)
    return lambda obj: all(check(obj) for check in checks)
