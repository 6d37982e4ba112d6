"""What every queue kind's fields share: the type and the weight; and what a kind brings: its fields and parser."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller.model.fields import Fields
from controller.model.schema import HOST, Integer, KindFields, Number, SecretRef, Text


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """One queue. Queue kinds subclass this with their own fields."""

    type: str
    weight: float = 1.0

    @property
    def queue_label(self) -> str:
        """A short name for the queue, for printer columns, metrics labels and messages."""
        return self.type

    def for_policy(self, *, learns_throughput: bool) -> SourceSpec:  # noqa: ARG002 (kinds that care override it)
        """This source as the rule's policy needs it read: a kind whose defaults depend on the policy settles
        them here (the rule's parser calls it once the policy is known; see `Policy.learns_throughput`)."""
        return self


SOURCE_WEIGHT = Number("weight", default=SourceSpec.weight, minimum=0, exclusive_minimum=True,
                       doc="the source's count is multiplied by this before `aggregation`")


@dataclass(frozen=True)
class SourceKind:
    """One queue kind of the model: its declared fields and the parser that reads them."""

    declared: KindFields
    parse: Callable[[Fields, float], SourceSpec]

    @property
    def type(self) -> str:
        return self.declared.kind


# Fields of more than one kind: the CRD has one schema for each (a source's fields share one schema whatever its
# type), so the kinds use these, changing at most their default.
SERVER_HOST = Text("host", max_length=253, pattern=HOST, pattern_help="must be a host name or IP address",
                   note="a host name or IP address", doc="the server; not with `urlSecretRef` / `dsnSecretRef`")
SERVER_PORT = Integer("port", minimum=1, maximum=65535, doc="the server's port")
USERNAME = Text("username", max_length=128, pattern=r"[^\s]+", pattern_help="must have no white space",
                note="no white space", doc="the user (a Redis ACL user; RabbitMQ's); not a secret")
PASSWORD = SecretRef("passwordSecretRef", doc="a Secret key holding the password")
