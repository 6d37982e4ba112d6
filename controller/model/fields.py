"""Field validation for rule documents: durations, typed getters that collect every error with its field path."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One invalid field: where it is and what is wrong, in words a user can act on."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(Exception):
    """A rule that cannot be used, with every field error found."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: object) -> float | None:
    """Seconds for `30`, `2.5`, `"30"`, `"30s"`, `"5m"`, `"1h30m"`, `"250ms"`; None when it is not a duration >= 0."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) and value >= 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    if not text or _DURATION_PART.sub("", text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def format_duration(seconds: float) -> str:
    """The short form a user would write: 90 -> "1m30s", 0.5 -> "500ms". For values written into a rule and for
    echoing a field's own value back; everything else printed goes through controller.model.textfmt.duration."""
    if seconds < 1 and seconds != 0:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"


def _show(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return str(value)


class Fields:
    """Reads typed fields of one object, recording an error (with its path) for each bad one.

    An accessor always returns a usable value (the default or a placeholder) so parsing goes on and finds every
    error; the caller raises once at the end. `finish()` reports fields nobody read: usually a typo.
    """

    def __init__(self, raw: object, path: str, errors: list[FieldError]) -> None:
        self.path = path
        self.errors = errors
        self.read: set[str] = set()
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            self.error("", f"must be an object, got {_show(raw)}")
            raw = {}
        self.raw: Mapping[str, object] = raw

    def at(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, message: str) -> None:
        self.errors.append(FieldError(self.at(name) if name else self.path, message))

    def has(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def _get(self, name: str) -> object:
        self.read.add(name)
        return self.raw.get(name)

    def missing(self, name: str) -> None:
        self.error(name, "is required")

    def string(
        self,
        name: str,
        default: str | None = None,
        *,
        required: bool = False,
        pattern: str | None = None,
        pattern_help: str = "",
        max_length: int | None = None,
    ) -> str:
        value = self._get(name)
        if value is None:
            if required:
                self.missing(name)
            return default if default is not None else ""
        if not isinstance(value, str):
            self.error(name, f"must be a string, got {_show(value)}")
            return default or ""
        if required and not value:
            self.error(name, "must not be empty")
        elif max_length is not None and len(value) > max_length:
            self.error(name, f"must be at most {max_length} characters, got {len(value)}")
        elif pattern is not None and value and not re.fullmatch(pattern, value):
            self.error(name, f"{pattern_help or 'is not valid'}, got {_show(value)}")
        return value

    def optional_string(self, name: str, **kwargs: object) -> str | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.string(name, **kwargs)  # type: ignore[arg-type]

    def choice(self, name: str, choices: Sequence[str], default: str) -> str:
        value = self._get(name)
        if value is None:
            return default
        if value not in choices:
            self.error(name, f"must be one of {', '.join(choices)}, got {_show(value)}")
            return default
        assert isinstance(value, str)
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(name, f"must be true or false, got {_show(value)}")
            return default
        return value

    def integer(
        self, name: str, default: int | None = None, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        value = self._get(name)
        if value is None:
            if default is None:
                self.missing(name)
                return minimum or 0
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                self.error(name, f"must be an integer, got {_show(value)}")
                return default if default is not None else (minimum or 0)
        if minimum is not None and value < minimum:
            self.error(name, f"must be >= {minimum}, got {value}")
        elif maximum is not None and value > maximum:
            self.error(name, f"must be <= {maximum}, got {value}")
        return value

    def optional_integer(self, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.integer(name, minimum=minimum, maximum=maximum)

    def number(
        self,
        name: str,
        default: float | None = None,
        *,
        minimum: float | None = None,
        exclusive_minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        value = self._get(name)
        fallback = default if default is not None else (minimum or exclusive_minimum or 0.0)
        if value is None:
            if default is None:
                self.missing(name)
            return fallback
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.error(name, f"must be a number, got {_show(value)}")
            return fallback
        number = float(value)
        if minimum is not None and number < minimum:
            self.error(name, f"must be >= {_num(minimum)}, got {_num(number)}")
        elif exclusive_minimum is not None and number <= exclusive_minimum:
            self.error(name, f"must be > {_num(exclusive_minimum)}, got {_num(number)}")
        elif maximum is not None and number > maximum:
            self.error(name, f"must be <= {_num(maximum)}, got {_num(number)}")
        return number

    def optional_number(
        self, name: str, *, minimum: float | None = None, exclusive_minimum: float | None = None
    ) -> float | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.number(name, minimum=minimum, exclusive_minimum=exclusive_minimum)

    def duration(self, name: str, default: float | None = None, *, minimum: float = 0.0) -> float:
        value = self._get(name)
        if value is None:
            if default is None:
                self.missing(name)
                return minimum
            return default
        seconds = parse_duration(value)
        if seconds is None or seconds < minimum:
            bound = ">= 0" if minimum == 0 else f">= {format_duration(minimum)}"
            self.error(name, f'must be a duration {bound}, got {_show(value)} (write 30, "30s", "5m" or "1h30m")')
            return default if default is not None else minimum
        return seconds

    def optional_duration(self, name: str, *, minimum: float = 0.0) -> float | None:
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        return self.duration(name, minimum=minimum)

    def secret_ref(self, name: str) -> SecretKeyRef | None:
        """`{name, key}` of a Secret in the rule's namespace, or None when the field is absent."""
        if self.raw.get(name) is None:
            self.read.add(name)
            return None
        ref = self.child(name)
        secret = ref.string("name", required=True, pattern=_DNS_SUBDOMAIN,
                            pattern_help="must be a Secret name (DNS subdomain)", max_length=253)
        key = ref.string("key", required=True, pattern=r"[-._a-zA-Z0-9]+",
                         pattern_help="must be a Secret key (letters, digits, '-', '_', '.')", max_length=253)
        ref.finish()
        return SecretKeyRef(secret, key)

    def child(self, name: str) -> Fields:
        """The nested object `name` (empty when absent, so its defaults apply)."""
        return Fields(self._get(name), self.at(name), self.errors)

    def items(self, name: str, *, min_items: int = 0, max_items: int | None = None) -> Iterator[tuple[object, str]]:
        """Each element of the list `name` with its path, e.g. `spec.sources[0]`."""
        value = self._get(name)
        if value is None:
            value = []
        if not isinstance(value, list):
            self.error(name, f"must be a list, got {_show(value)}")
            return
        if len(value) < min_items:
            self.error(name, f"must have at least {min_items} item{'s' if min_items > 1 else ''}")
        if max_items is not None and len(value) > max_items:
            self.error(name, f"must have at most {max_items} items, got {len(value)}")
        for index, item in enumerate(value):
            yield item, f"{self.at(name)}[{index}]"

    def finish(self) -> None:
        """Report every field that was given but never read."""
        for name in self.raw:
            if name not in self.read:
                self.error(str(name), "unknown field")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class SecretKeyRef:
    """One key of a Secret in the rule's namespace."""

    name: str
    key: str


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
