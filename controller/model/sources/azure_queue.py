"""The azure-queue source's fields: a Storage queue, by connection string, account key, SAS or workload identity."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from controller.model.fields import Fields, SecretKeyRef
from controller.model.sources.base import SourceSpec

TYPE = "azure-queue"


CLOUD_SUFFIXES = {
    "public": "core.windows.net",
    "china": "core.chinacloudapi.cn",
    "usgov": "core.usgovcloudapi.net",
}


# 3-63 characters: lowercase letters, digits and single dashes, starting and ending with a letter or digit.
QUEUE_NAME = re.compile(r"(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*")


ACCOUNT_NAME = re.compile(r"[a-z0-9]{3,24}")


@dataclass(frozen=True, kw_only=True)
class AzureQueueSource(SourceSpec):
    """One Azure Storage queue and how to reach it: exactly one of the ways to authenticate is set."""

    queue_name: str
    connection_secret_ref: SecretKeyRef | None = None
    account_name: str | None = None
    account_key_secret_ref: SecretKeyRef | None = None
    sas_secret_ref: SecretKeyRef | None = None
    identity: Literal["workload"] | None = None
    cloud: Literal["public", "china", "usgov"] = "public"
    endpoint: str | None = None
    count_strategy: Literal["approximate", "visible"] = "approximate"

    @property
    def queue_label(self) -> str:
        return self.queue_name


def parse(f: Fields, weight: float) -> AzureQueueSource:
    queue_name = f.string("queueName", required=True)
    if queue_name and not QUEUE_NAME.fullmatch(queue_name):
        f.error("queueName", f'must be 3-63 lowercase letters, digits and single dashes, got "{queue_name}"')
    connection = f.secret_ref("connectionSecretRef")
    account = f.optional_string("accountName")
    if account is not None and not ACCOUNT_NAME.fullmatch(account):
        f.error("accountName", f'must be 3-24 lowercase letters and digits, got "{account}"')
    account_key = f.secret_ref("accountKeySecretRef")
    sas = f.secret_ref("sasSecretRef")
    identity = f.optional_string("identity")
    if identity is not None and identity != "workload":
        f.error("identity", f'must be "workload", got "{identity}"')
    cloud = f.choice("cloud", tuple(CLOUD_SUFFIXES), "public")
    endpoint = f.optional_string("endpoint", pattern=r"https?://[^\s/?#]+(/[^\s?#]*)?",
                                 pattern_help="must be an http(s) URL with no query")
    strategy = f.choice("countStrategy", ("approximate", "visible"), "approximate")

    ways = [name for name, given in (
        ("connectionSecretRef", connection is not None),
        ("accountKeySecretRef", account_key is not None),
        ("sasSecretRef", sas is not None),
        ("identity", identity is not None),
    ) if given]
    if not ways:
        f.error("", "must set one of connectionSecretRef, accountKeySecretRef, sasSecretRef or identity")
    elif len(ways) > 1:
        f.error(ways[1], f"cannot be combined with {ways[0]}: set exactly one way to authenticate")
    if connection is not None:
        for name in ("accountName", "cloud", "endpoint"):
            if f.has(name):
                f.error(name, "comes from the connection string when connectionSecretRef is set")
    elif ways and account is None:
        f.error("accountName", f"is required with {ways[0]}")
    if f.has("cloud") and f.has("endpoint"):
        f.error("endpoint", "cannot be combined with cloud: the endpoint already names the cloud")

    return AzureQueueSource(
        type=TYPE,
        weight=weight,
        queue_name=queue_name,
        connection_secret_ref=connection,
        account_name=account,
        account_key_secret_ref=account_key,
        sas_secret_ref=sas,
        identity="workload" if identity == "workload" else None,
        cloud=cloud,  # type: ignore[arg-type]
        endpoint=endpoint.rstrip("/") if endpoint else None,
        count_strategy=strategy,  # type: ignore[arg-type]
    )
