"""The rabbitmq source's fields: a queue read through the management API."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from controller.model.fields import Fields, SecretKeyRef
from controller.model.schema import Choice, KindFields, Rule, Text
from controller.model.sources.base import PASSWORD, USERNAME, SourceKind, SourceSpec

TYPE = "rabbitmq"


Count = Literal["ready", "readyAndUnacked"]


@dataclass(frozen=True, kw_only=True)
class RabbitMqSource(SourceSpec):
    """One RabbitMQ queue, read through the management API."""

    queue: str
    management_url: str
    vhost: str = "/"
    username: str = "guest"
    password_secret_ref: SecretKeyRef | None = None
    count: Count = "ready"

    @property
    def queue_label(self) -> str:
        return self.queue if self.vhost == "/" else f"{self.vhost}/{self.queue}"


QUEUE = Text("queue", required=True, min_length=1, max_length=255, doc="the RabbitMQ queue")
MANAGEMENT_URL = Text(
    "managementURL", required=True, max_length=2048, pattern=r"https?://[^\s/?#@]+(/[^\s?#]*)?",
    pattern_help="must be an http(s) URL with no credentials or query, e.g. http://rabbitmq:15672",
    note="an `http(s)://host[:port][/path]` URL, no credentials", doc="the management API's base URL")
VHOST = Text("vhost", default=RabbitMqSource.vhost, min_length=1, max_length=255,
             description="/ (the default vhost) when unset.", doc="the virtual host")
RABBITMQ_USERNAME = replace(USERNAME, default=RabbitMqSource.username)
COUNT: Choice[Count] = Choice(
    "count", choices=get_args(Count), default=RabbitMqSource.count,
    description="ready (the default) or readyAndUnacked.",
    doc="`ready`: messages waiting; `readyAndUnacked`: plus delivered, unacknowledged ones")

DECLARED = KindFields(TYPE, fields=(QUEUE, MANAGEMENT_URL, VHOST, RABBITMQ_USERNAME, PASSWORD, COUNT), rules=(
    Rule("self.type != 'rabbitmq' || (has(self.queue) && has(self.managementURL))",
         "queue and managementURL are required"),
))


def parse(f: Fields, weight: float) -> RabbitMqSource:
    queue = f.string(QUEUE)
    url = f.string(MANAGEMENT_URL)
    vhost = f.string(VHOST)
    username = f.string(RABBITMQ_USERNAME)
    password = f.secret_ref(PASSWORD)
    count = f.choice(COUNT)
    return RabbitMqSource(type=TYPE, weight=weight, queue=queue, management_url=url.rstrip("/"), vhost=vhost or "/",
                          username=username, password_secret_ref=password, count=count)


KIND = SourceKind(DECLARED, parse)
