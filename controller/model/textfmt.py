"""How every command prints durations and counts of things: one style, so `0.9s` never sits beside `999ms`.

Durations read as a person writes them in a rule: seconds with up to three significant figures below a minute
(`0.25s`, `9s`, `12.5s`), whole units above (`1m30s`, `2h5m`, `7d`), the largest two units at most, as
`kubectl get` ages do (`2d3h`, never `2d3h4m5s`). Counts of things agree with their noun: `1 rule`, `2 rules`.
"""

from __future__ import annotations

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def duration(seconds: float) -> str:
    """A duration as printed by every command: 0.25 -> "0.25s", 90 -> "1m30s", 13000 -> "3h37m"."""
    if seconds < 0:
        return "-" + duration(-seconds)
    if round(seconds, 1) < 60:
        if seconds == 0:
            return "0s"
        return f"{float(f'{seconds:.3g}'):g}s"
    whole = round(seconds)
    parts: list[str] = []
    for unit, size in _UNITS:
        amount, whole = divmod(whole, size)
        if amount or parts:
            parts.append(f"{amount}{unit}" if amount else "")
        if len(parts) == 2:
            break
    return "".join(parts)


def plural(count: float, noun: str, nouns: str | None = None) -> str:
    """`count noun`, the noun agreeing: plural(1, "rule") -> "1 rule", plural(3, "poll") -> "3 polls"."""
    shown = f"{count:,}" if isinstance(count, int) else f"{count:,g}"
    return f"{shown} {noun if count == 1 else (nouns or noun + 's')}"


def offset(seconds: float) -> str:
    """A time since the start of a run, right-aligned for a column of log lines: `+  12.5s`, `+ 1m30s`."""
    return "+" + duration(round(seconds, 1)).rjust(6)
