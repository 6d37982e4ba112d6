"""The redis-list source's fields: a list key (or a stream's consumer group) on a Redis server."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from controller.model.fields import Fields, SecretKeyRef
from controller.model.schema import Boolean, Choice, Integer, KindFields, Rule, SecretRef, Text
from controller.model.sources.base import PASSWORD, SERVER_HOST, SERVER_PORT, USERNAME, SourceKind, SourceSpec

TYPE = "redis-list"


StreamCount = Literal["pending", "pendingAndLag"]


@dataclass(frozen=True, kw_only=True)
class RedisListSource(SourceSpec):
    """One Redis list (or stream and consumer group) and how to reach it: host/port/db, or a URL from a Secret."""

    list_name: str | None = None
    stream_name: str | None = None
    consumer_group: str | None = None
    stream_count: StreamCount = "pending"
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


LIST_NAME = Text("listName", min_length=1, max_length=1024, note="one of `listName`, `streamName`",
                 doc="the list whose `LLEN` is the count")
STREAM_NAME = Text("streamName", min_length=1, max_length=1024,
                   doc="a stream; counts `consumerGroup`'s pending entries")
CONSUMER_GROUP = Text("consumerGroup", min_length=1, max_length=1024, note="required with `streamName`",
                      doc="the stream's consumer group")
STREAM_COUNT: Choice[StreamCount] = Choice(
    "streamCount", choices=get_args(StreamCount), default=RedisListSource.stream_count,
    description="pending (the default) or pendingAndLag.",
    doc="`pending`: delivered, unacknowledged entries; `pendingAndLag`: plus entries not yet delivered")
PORT = replace(SERVER_PORT, default=RedisListSource.port)
DB = Integer("db", default=RedisListSource.db, minimum=0, maximum=15, doc="the Redis database")
URL = SecretRef("urlSecretRef", note="instead of `host`",
                doc="a Secret key holding `redis://[user:password@]host[:port][/db]` (`rediss://` for TLS)")
TLS = Boolean("tls", default=RedisListSource.tls, doc="connect to Redis with TLS")

DECLARED = KindFields(TYPE, fields=(
    LIST_NAME, STREAM_NAME, CONSUMER_GROUP, STREAM_COUNT, SERVER_HOST, PORT, DB, USERNAME, PASSWORD, URL, TLS,
), rules=(
    Rule("self.type != 'redis-list' || has(self.listName) != has(self.streamName)",
         "set exactly one of listName or streamName"),
    Rule("self.type != 'redis-list' || has(self.host) != has(self.urlSecretRef)",
         "set exactly one of host or urlSecretRef"),
))


def parse(f: Fields, weight: float) -> RedisListSource:
    list_name = f.optional_string(LIST_NAME)
    stream_name = f.optional_string(STREAM_NAME)
    group = f.optional_string(CONSUMER_GROUP)
    stream_count = f.choice(STREAM_COUNT)
    f.one_of(("listName", list_name), ("streamName", stream_name), "a source counts one list or one stream")
    if stream_name is not None and group is None:
        f.error("consumerGroup", "is required with streamName")
    f.only_with(("consumerGroup", "streamCount"), stream_name is not None, "streamName")

    host = f.optional_string(SERVER_HOST)
    port = f.integer(PORT)
    db = f.integer(DB)
    username = f.optional_string(USERNAME)
    password = f.secret_ref(PASSWORD)
    url = f.secret_ref(URL)
    tls = f.boolean(TLS)
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
        stream_count=stream_count,
        host=host,
        port=port,
        db=db,
        username=username,
        password_secret_ref=password,
        url_secret_ref=url,
        tls=tls,
    )


KIND = SourceKind(DECLARED, parse)
