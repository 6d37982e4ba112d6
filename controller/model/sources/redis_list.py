"""The redis-list source's fields: a list key (or a stream's consumer group) on a Redis server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller.model.fields import Fields, SecretKeyRef
from controller.model.sources.base import SourceSpec

TYPE = "redis-list"


_HOST = r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]"


@dataclass(frozen=True, kw_only=True)
class RedisListSource(SourceSpec):
    """One Redis list (or stream and consumer group) and how to reach it: host/port/db, or a URL from a Secret."""

    list_name: str | None = None
    stream_name: str | None = None
    consumer_group: str | None = None
    stream_count: Literal["pending", "pendingAndLag"] = "pending"
    host: str | None = None
    port: int = 6379
    db: int = 0
    username: str | None = None
    password_secret_ref: SecretKeyRef | None = None
    url_secret_ref: SecretKeyRef | None = None
    tls: bool = False

    @property
    def queue_label(self) -> str:
        if self.stream_name is not None:
            return f"{self.stream_name}/{self.consumer_group}"
        return self.list_name or ""


def parse(f: Fields, weight: float) -> RedisListSource:
    list_name = f.optional_string("listName", max_length=1024)
    stream_name = f.optional_string("streamName", max_length=1024)
    group = f.optional_string("consumerGroup", max_length=1024)
    stream_count = f.choice("streamCount", ("pending", "pendingAndLag"), "pending")
    for name, value in (("listName", list_name), ("streamName", stream_name), ("consumerGroup", group)):
        if value == "":
            f.error(name, "must not be empty")
    if list_name is None and stream_name is None:
        f.error("", "must set listName or streamName")
    elif list_name is not None and stream_name is not None:
        f.error("streamName", "cannot be combined with listName: a source counts one list or one stream")
    if stream_name is not None and group is None:
        f.error("consumerGroup", "is required with streamName")
    if stream_name is None and group is not None:
        f.error("consumerGroup", "applies only with streamName")
    if stream_name is None and f.has("streamCount"):
        f.error("streamCount", "applies only with streamName")

    host = f.optional_string("host", pattern=_HOST, pattern_help="must be a host name or IP address", max_length=253)
    port = f.integer("port", 6379, minimum=1, maximum=65535)
    db = f.integer("db", 0, minimum=0, maximum=15)
    username = f.optional_string("username", pattern=r"[^\s]+", pattern_help="must have no white space",
                                 max_length=128)
    password = f.secret_ref("passwordSecretRef")
    url = f.secret_ref("urlSecretRef")
    tls = f.boolean("tls", False)
    if url is None and host is None:
        f.error("", "must set host or urlSecretRef")
    if url is not None:
        for name in ("host", "port", "db", "tls"):
            if f.has(name):
                f.error(name, "comes from the URL when urlSecretRef is set (rediss:// for TLS)")

    return RedisListSource(
        type=TYPE,
        weight=weight,
        list_name=list_name,
        stream_name=stream_name,
        consumer_group=group,
        stream_count=stream_count,  # type: ignore[arg-type]
        host=host,
        port=port,
        db=db,
        username=username,
        password_secret_ref=password,
        url_secret_ref=url,
        tls=tls,
    )
