"""The rabbitmq source's fields: a queue read through the management API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller.model.fields import Fields, SecretKeyRef
from controller.model.sources.base import SourceSpec

TYPE = "rabbitmq"


@dataclass(frozen=True, kw_only=True)
class RabbitMqSource(SourceSpec):
    """One RabbitMQ queue, read through the management API."""

    queue: str
    management_url: str
    vhost: str = "/"
    username: str = "guest"
    password_secret_ref: SecretKeyRef | None = None
    count: Literal["ready", "readyAndUnacked"] = "ready"

    @property
    def queue_label(self) -> str:
        return self.queue if self.vhost == "/" else f"{self.vhost}/{self.queue}"


def parse(f: Fields, weight: float) -> RabbitMqSource:
    queue = f.string("queue", required=True, max_length=255)
    url = f.string("managementURL", required=True, pattern=r"https?://[^\s/?#@]+(/[^\s?#]*)?", max_length=2048,
                   pattern_help="must be an http(s) URL with no credentials or query, e.g. http://rabbitmq:15672")
    vhost = f.string("vhost", "/", max_length=255)
    username = f.string("username", "guest", pattern=r"[^\s]+", pattern_help="must have no white space",
                        max_length=128)
    password = f.secret_ref("passwordSecretRef")
    count = f.choice("count", ("ready", "readyAndUnacked"), "ready")
    if not vhost and f.has("vhost"):
        f.error("vhost", "must not be empty (the default vhost is \"/\")")
    return RabbitMqSource(type=TYPE, weight=weight, queue=queue, management_url=url.rstrip("/"), vhost=vhost or "/",
                          username=username, password_secret_ref=password, count=count)  # type: ignore[arg-type]
