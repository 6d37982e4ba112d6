"""Field validation for rule documents: durations, typed getters that collect every error with its field path.

A getter takes a field's declaration (`controller.model.schema`), whose default and bounds are the CRD's too; the
documents that have no CRD (simulator scenarios, KEDA objects) name a field and give its bounds in the call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from controller.model.schema import (
    SECRET_KEY,
    SECRET_NAME,
    Boolean,
    C,
    Choice,
    Duration,
    Field,
    Integer,
    ListOf,
    Number,
    Object,
    SecretRef,
    Text,
)


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

    def has(self, field: Field | str) -> bool:
        """Whether `field` is given (and not null)."""
        return self.raw.get(field if isinstance(field, str) else field.name) is not None

    def _get(self, name: str) -> object:
        self.read.add(name)
        return self.raw.get(name)

    def missing(self, field: Field | str) -> None:
        self.error(field if isinstance(field, str) else field.name, "is required")

    def one_of(self, first: tuple[str, object], second: tuple[str, object], why: str) -> None:
        """Exactly one of two fields (name, value read): none is "must set A or B", both refuse B saying `why`."""
        (first_name, first_value), (second_name, second_value) = first, second
        if first_value is None and second_value is None:
            self.error("", f"must set {first_name} or {second_name}")
        elif first_value is not None and second_value is not None:
            self.error(second_name, f"cannot be combined with {first_name}: {why}")

    def only_with(self, names: tuple[str, ...], given: bool, what: str) -> None:
        """Each of `names` that is set, while `given` is false, "applies only with `what`"."""
        if not given:
            for name in names:
                if self.has(name):
                    self.error(name, f"applies only with {what}")

    def string(
        self,
        field: Text | str,
        default: str | None = None,
        *,
        required: bool = False,
        pattern: str | None = None,
        pattern_help: str = "",
        max_length: int | None = None,
    ) -> str:
        """The string `field` (its default, or "" when absent); a declared field brings its own bounds."""
        if isinstance(field, str):
            field = Text(field, default=default, required=required, pattern=pattern, pattern_help=pattern_help,
                         max_length=max_length)
        name = field.name
        value = self._get(name)
        if value is None:
            if field.required:
                self.missing(name)
            return field.default if field.default is not None else ""
        if not isinstance(value, str):
            self.error(name, f"must be a string, got {_show(value)}")
            return field.default or ""
        if not value and (field.required or field.min_length):
            self.error(name, "must not be empty")
        elif field.max_length is not None and len(value) > field.max_length:
            self.error(name, f"must be at most {field.max_length} characters, got {len(value)}")
        elif field.min_length is not None and len(value) < field.min_length:
            self.error(name, f"{field.pattern_help or f'must be at least {field.min_length} characters'}, got "
                       f"{_show(value)}")
        elif field.pattern is not None and value and not re.fullmatch(field.pattern, value):
            self.error(name, f"{field.pattern_help or 'is not valid'}, got {_show(value)}")
        return value

    def optional_string(self, field: Text | str, *, pattern: str | None = None, pattern_help: str = "",
                        max_length: int | None = None) -> str | None:
        """The string `field`, or None when absent."""
        if isinstance(field, str):
            field = Text(field, pattern=pattern, pattern_help=pattern_help, max_length=max_length)
        if self.raw.get(field.name) is None:
            self.read.add(field.name)
            return None
        return self.string(field)

    @overload
    def choice(self, field: Choice[C]) -> C: ...

    @overload
    def choice(self, field: str, choices: Sequence[C], default: C) -> C: ...

    def choice(self, field: Choice[C] | str, choices: Sequence[C] = (), default: C | None = None) -> C:
        """One of the declared choices (typed as their `Literal`); the default when absent or wrong."""
        if isinstance(field, str):
            assert default is not None
            field = Choice(field, choices=tuple(choices), default=default)
        fallback = field.default if field.default is not None else field.choices[0]
        value = self.optional_choice(field)
        return fallback if value is None else value

    def optional_choice(self, field: Choice[C]) -> C | None:
        """One of the declared choices, or None when absent or wrong (the error is recorded)."""
        value = self._get(field.name)
        if value is None:
            return None
        for choice in field.choices:
            if value == choice:
                return choice
        if len(field.choices) == 1:
            self.error(field.name, f'must be "{field.choices[0]}", got {_show(value)}')
        else:
            self.error(field.name, f"must be one of {', '.join(field.choices)}, got {_show(value)}")
        return None

    def boolean(self, field: Boolean | str, default: bool = False) -> bool:
        """The boolean `field`; its default when absent or wrong."""
        if isinstance(field, str):
            field = Boolean(field, default=default)
        fallback = bool(field.default)
        value = self._get(field.name)
        if value is None:
            return fallback
        if not isinstance(value, bool):
            self.error(field.name, f"must be true or false, got {_show(value)}")
            return fallback
        return value

    def integer(
        self, field: Integer | str, default: int | None = None, *, minimum: int | None = None,
        maximum: int | None = None
    ) -> int:
        """The integer `field`, required when it has no default; a declared field brings its own bounds."""
        if isinstance(field, str):
            field = Integer(field, default=default, minimum=minimum, maximum=maximum)
        name, default, minimum, maximum = field.name, field.default, field.minimum, field.maximum
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

    def optional_integer(self, field: Integer | str, *, minimum: int | None = None, maximum: int | None = None
                         ) -> int | None:
        """The integer `field`, or None when absent."""
        if isinstance(field, str):
            field = Integer(field, minimum=minimum, maximum=maximum)
        if self.raw.get(field.name) is None:
            self.read.add(field.name)
            return None
        return self.integer(field)

    def number(
        self,
        field: Number | str,
        default: float | None = None,
        *,
        minimum: float | None = None,
        exclusive_minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        """The number `field`, required when it has no default; a declared field brings its own bounds."""
        if isinstance(field, str):
            exclusive = exclusive_minimum is not None
            field = Number(field, default=default, minimum=exclusive_minimum if exclusive else minimum,
                           exclusive_minimum=exclusive, maximum=maximum)
        name, default, minimum, maximum = field.name, field.default, field.minimum, field.maximum
        value = self._get(name)
        fallback = default if default is not None else (minimum or 0.0)
        if value is None:
            if default is None:
                self.missing(name)
            return fallback
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.error(name, f"must be a number, got {_show(value)}")
            return fallback
        number = float(value)
        if minimum is not None and field.exclusive_minimum and number <= minimum:
            self.error(name, f"must be > {_num(minimum)}, got {_num(number)}")
        elif minimum is not None and number < minimum:
            self.error(name, f"must be >= {_num(minimum)}, got {_num(number)}")
        elif maximum is not None and number > maximum:
            self.error(name, f"must be <= {_num(maximum)}, got {_num(number)}")
        return number

    def optional_number(self, field: Number | str, *, minimum: float | None = None,
                        exclusive_minimum: float | None = None) -> float | None:
        """The number `field`, or None when absent."""
        if isinstance(field, str):
            exclusive = exclusive_minimum is not None
            field = Number(field, minimum=exclusive_minimum if exclusive else minimum, exclusive_minimum=exclusive)
        if self.raw.get(field.name) is None:
            self.read.add(field.name)
            return None
        return self.number(field)

    def duration(self, field: Duration | str, default: float | None = None, *, minimum: float = 0.0) -> float:
        """The duration `field` in seconds, required when it has no default; a declared field brings its bounds."""
        if isinstance(field, str):
            field = Duration(field, default=default, minimum=minimum)
        name, default, minimum = field.name, field.default, field.minimum
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
        if field.maximum is not None and seconds > field.maximum:
            self.error(name, f"must be at most {format_duration(field.maximum)}, got {format_duration(seconds)}")
        return seconds

    def optional_duration(self, field: Duration | str, *, minimum: float = 0.0) -> float | None:
        """The duration `field`, or None when absent."""
        if isinstance(field, str):
            field = Duration(field, minimum=minimum)
        if self.raw.get(field.name) is None:
            self.read.add(field.name)
            return None
        return self.duration(field)

    def secret_ref(self, field: SecretRef | str) -> SecretKeyRef | None:
        """`{name, key}` of a Secret in the rule's namespace, or None when the field is absent."""
        name = field if isinstance(field, str) else field.name
        if self.raw.get(name) is None:
            self.read.add(name)
            if not isinstance(field, str) and field.required:
                self.missing(name)
            return None
        ref = self.child(name)
        secret = ref.string(SECRET_NAME)
        key = ref.string(SECRET_KEY)
        ref.finish()
        return SecretKeyRef(secret, key)

    def child(self, field: Object | str) -> Fields:
        """The nested object `field` (empty when absent, so its defaults apply)."""
        name = field if isinstance(field, str) else field.name
        return Fields(self._get(name), self.at(name), self.errors)

    def items(self, field: ListOf | str, *, min_items: int = 0, max_items: int | None = None
              ) -> Iterator[tuple[object, str]]:
        """Each element of the list `field` with its path, e.g. `spec.sources[0]`; a declared list brings its
        bounds."""
        if isinstance(field, str):
            field = ListOf(field, items=Field(""), min_items=min_items, max_items=max_items)
        name, min_items, max_items = field.name, field.min_items, field.max_items
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

    def __str__(self) -> str:
        """How messages name it: `Secret 'queue-auth' key 'connection-string'` (never its value)."""
        return f"Secret '{self.name}' key '{self.key}'"

