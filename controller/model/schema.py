"""Each field of a rule, declared once: its type, default, bounds, pattern, choices, CEL rules and words.

The parsers read a field through its declaration (`Fields.integer(MIN_REPLICAS)` takes the default and the bounds
from it), and `controller.model.generate` writes the CRD's schema and the tables of docs/reference.md from the same
declarations, so a default or a bound is written in one place. A declaration is data only: no I/O, no parsing.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Generic, TypeVar

C = TypeVar("C", bound=str)

DURATION_PATTERN = r"([0-9]+(\.[0-9]+)?|([0-9]+(\.[0-9]+)?(ms|h|m|s))+)"
"""A duration as the CRD can check it: a number of seconds, or units summed (`1h30m`, `250ms`)."""

DURATION_MAX_LENGTH = 32


@dataclass(frozen=True)
class Rule:
    """One CEL rule of the CRD (`x-kubernetes-validations`): the API server refuses an object where it is false."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Field:
    """What every field has: a name, whether it is required, and its words for `kubectl explain` and the docs."""

    name: str
    _: KW_ONLY
    required: bool = False
    description: str = ""
    """The CRD's description (what `kubectl explain` shows); empty for most fields."""
    doc: str = ""
    """The reference table's meaning column (Markdown)."""
    note: str = ""
    """The reference table's bounds column: what the numbers cannot say ("one of four ways to authenticate")."""


@dataclass(frozen=True, kw_only=True)
class Text(Field):
    """A string. `pattern` is matched whole; `pattern_help` says what it means, for errors and for the docs."""

    default: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    pattern_help: str = ""


@dataclass(frozen=True, kw_only=True)
class Integer(Field):
    default: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    int32: bool = False


@dataclass(frozen=True, kw_only=True)
class Number(Field):
    default: float | None = None
    minimum: float | None = None
    exclusive_minimum: bool = False
    maximum: float | None = None


@dataclass(frozen=True, kw_only=True)
class Duration(Field):
    """Seconds, written as a number or a string such as "1h30m". The CRD checks a bound for numbers only."""

    default: float | None = None
    minimum: float = 0.0
    maximum: float | None = None


@dataclass(frozen=True, kw_only=True)
class Boolean(Field):
    default: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Choice(Field, Generic[C]):
    """One of a few strings; the parser returns it as the `Literal` type of its choices."""

    choices: tuple[C, ...]
    default: C | None = None


@dataclass(frozen=True, kw_only=True)
class SecretRef(Field):
    """`{name, key}` of a Secret in the rule's namespace."""


@dataclass(frozen=True, kw_only=True)
class Object(Field):
    fields: tuple[Field, ...] = ()
    rules: tuple[Rule, ...] = ()
    defaulted: bool = False
    """Whether the CRD defaults it to `{}`, so the defaults of its fields apply when it is absent."""


@dataclass(frozen=True, kw_only=True)
class ListOf(Field):
    items: Field
    min_items: int = 0
    max_items: int | None = None
    map_keys: tuple[str, ...] = ()
    """Keys that tell items apart (`x-kubernetes-list-type: map`); none: the list is replaced whole (atomic)."""


DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = rf"{DNS_LABEL}(\.{DNS_LABEL})*"
HOST = r"([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"

SECRET_NAME = Text("name", required=True, max_length=253, pattern=DNS_SUBDOMAIN,
                   pattern_help="must be a Secret name (DNS subdomain)", note="a DNS subdomain",
                   doc="the Secret, in the rule's namespace")
SECRET_KEY = Text("key", required=True, min_length=1, max_length=253, pattern=r"[-._a-zA-Z0-9]+",
                  pattern_help="must be a Secret key (letters, digits, '-', '_', '.')", note="of `-._a-zA-Z0-9`",
                  doc="the key in the Secret's data")
SECRET_REF_DESCRIPTION = "One key of a Secret in the rule's namespace."


@dataclass(frozen=True)
class KindFields:
    """The fields and CEL rules of one queue kind. Its fields may repeat another kind's (`host`, `port`): the CRD
    has one schema for every source, so such fields must agree but for their defaults and words."""

    kind: str
    fields: tuple[Field, ...]
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OneOfKinds(Field):
    """An object whose fields are `common` plus those of the kind its `type` names (a source of `spec.sources`).

    A kind's own fields get no schema default: it would be written into the sources of every other kind too; each
    kind's parser applies its own.
    """

    common: tuple[Field, ...]
    kinds: tuple[KindFields, ...]
