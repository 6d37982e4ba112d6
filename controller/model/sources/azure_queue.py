"""The azure-queue source's fields: a Storage queue, by connection string, account key, SAS or workload identity."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from controller.model.fields import Fields, SecretKeyRef
from controller.model.schema import Choice, KindFields, Rule, SecretRef, Text
from controller.model.sources.base import SourceKind, SourceSpec

TYPE = "azure-queue"


Cloud = Literal["public", "china", "usgov"]
CountStrategy = Literal["approximate", "visible"]
OldestAge = Literal["auto", "peek", "off"]


CLOUD_SUFFIXES: dict[Cloud, str] = {
    "public": "core.windows.net",
    "china": "core.chinacloudapi.cn",
    "usgov": "core.usgovcloudapi.net",
}


@dataclass(frozen=True, kw_only=True)
class AzureQueueSource(SourceSpec):
    """One Azure Storage queue and how to reach it: exactly one of the ways to authenticate is set."""

    queue_name: str
    connection_secret_ref: SecretKeyRef | None = None
    account_name: str | None = None
    account_key_secret_ref: SecretKeyRef | None = None
    sas_secret_ref: SecretKeyRef | None = None
    identity: Literal["workload"] | None = None
    cloud: Cloud = "public"
    endpoint: str | None = None
    count_strategy: CountStrategy = "approximate"
    oldest_age: OldestAge = "auto"  # "auto" until the rule's parser settles it; unsettled, it peeks

    @property
    def queue_label(self) -> str:
        return self.queue_name

    def for_policy(self, *, learns_throughput: bool) -> AzureQueueSource:
        """`auto` becomes `peek` where the policy learns from waits (rate mode), `off` elsewhere: a count-mode rule
        would pay the second call for nothing (at 10,000 rules it doubles the operator's CPU)."""
        if self.oldest_age != "auto":
            return self
        return replace(self, oldest_age="peek" if learns_throughput else "off")


QUEUE_NAME = Text("queueName", required=True, min_length=3, max_length=63, pattern=r"[a-z0-9]([a-z0-9]|-[a-z0-9])*",
                  pattern_help="must be 3-63 lowercase letters, digits and single dashes",
                  note="lowercase letters, digits and single dashes", doc="the Azure Storage queue")
CONNECTION = SecretRef("connectionSecretRef", note="one of four ways to authenticate",
                       doc="a Secret key holding a storage connection string")
ACCOUNT_NAME = Text("accountName", pattern=r"[a-z0-9]{3,24}", pattern_help="must be 3-24 lowercase letters and digits",
                    note="3 to 24 lowercase letters and digits; required with the three below",
                    doc="the storage account")
ACCOUNT_KEY = SecretRef("accountKeySecretRef", note="one of four",
                        doc="a Secret key holding the account key (Base64, as the portal shows it)")
SAS = SecretRef("sasSecretRef", note="one of four", doc="a Secret key holding an account or service SAS token")
IDENTITY: Choice[Literal["workload"]] = Choice("identity", choices=("workload",), note="one of four",
                                               doc="Microsoft Entra workload identity: no Secret at all")
# No default in the CRD (no kind's field has one): the parser tells "unset" from "public", as cloud may not be
# combined with connectionSecretRef or endpoint.
CLOUD: Choice[Cloud] = Choice(
    "cloud", choices=get_args(Cloud), default=AzureQueueSource.cloud,
    description="public (the default when neither cloud nor endpoint is set), china or usgov.",
    doc="the Azure cloud. Not with `connectionSecretRef` or `endpoint`")
ENDPOINT = Text("endpoint", max_length=2048, pattern=r"https?://[^\s/?#]+(/[^\s?#]*)?",
                pattern_help="must be an http(s) URL with no query",
                note="an `http(s)://host[/path]` URL without query",
                doc="the queue service URL (a private endpoint, Azurite); not with `connectionSecretRef` or `cloud`")
COUNT_STRATEGY: Choice[CountStrategy] = Choice(
    "countStrategy", choices=get_args(CountStrategy), default=AzureQueueSource.count_strategy,
    description="approximate (the default) or visible.",
    doc="`approximate`: Azure's count, in-flight messages included; `visible`: exact below 32 visible messages")
OLDEST_AGE: Choice[OldestAge] = Choice(
    "oldestAge", choices=get_args(OldestAge), default=AzureQueueSource.oldest_age,
    description="auto (the default: peek where the policy learns from waits), peek or off.",
    doc="`peek`: after the count, Peek Messages reads the front message's InsertionTime, so the policy can compare "
        "real waits with what it expects (one more call per poll when the queue is not empty); `off`: count only; "
        "`auto`: `peek` in rate mode (`serviceTime` or `throughputPerReplica`, no `targetPerReplica`), else `off`")

DECLARED = KindFields(TYPE, fields=(
    QUEUE_NAME, CONNECTION, ACCOUNT_NAME, ACCOUNT_KEY, SAS, IDENTITY, CLOUD, ENDPOINT, COUNT_STRATEGY, OLDEST_AGE,
), rules=(
    Rule("self.type != 'azure-queue' || has(self.queueName)", "queueName is required", ".queueName"),
    Rule("self.type != 'azure-queue' || [has(self.connectionSecretRef), has(self.accountKeySecretRef), "
         "has(self.sasSecretRef), has(self.identity)].filter(x, x).size() == 1",
         "set exactly one of connectionSecretRef, accountKeySecretRef, sasSecretRef or identity"),
    Rule("!has(self.connectionSecretRef) || !(has(self.accountName) || has(self.cloud) || has(self.endpoint))",
         "accountName, cloud and endpoint come from the connection string when connectionSecretRef is set"),
    Rule("has(self.connectionSecretRef) || has(self.accountName) || !(has(self.accountKeySecretRef) || "
         "has(self.sasSecretRef) || has(self.identity))",
         "accountName is required unless connectionSecretRef is set", ".accountName"),
    Rule("!(has(self.cloud) && has(self.endpoint))",
         "endpoint cannot be combined with cloud: the endpoint already names the cloud", ".endpoint"),
))


def parse(f: Fields, weight: float) -> AzureQueueSource:
    queue_name = f.string(QUEUE_NAME)
    connection = f.secret_ref(CONNECTION)
    account = f.optional_string(ACCOUNT_NAME)
    account_key = f.secret_ref(ACCOUNT_KEY)
    sas = f.secret_ref(SAS)
    identity = f.optional_choice(IDENTITY)
    cloud = f.choice(CLOUD)
    endpoint = f.optional_string(ENDPOINT)
    strategy = f.choice(COUNT_STRATEGY)
    oldest_age = f.choice(OLDEST_AGE)

    ways = [name for name, given in (
        ("connectionSecretRef", connection is not None),
        ("accountKeySecretRef", account_key is not None),
        ("sasSecretRef", sas is not None),
        ("identity", f.has(IDENTITY)),
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
    if f.has(CLOUD) and f.has(ENDPOINT):
        f.error("endpoint", "cannot be combined with cloud: the endpoint already names the cloud")

    return AzureQueueSource(
        type=TYPE,
        weight=weight,
        queue_name=queue_name,
        connection_secret_ref=connection,
        account_name=account,
        account_key_secret_ref=account_key,
        sas_secret_ref=sas,
        identity=identity,
        cloud=cloud,
        endpoint=endpoint.rstrip("/") if endpoint else None,
        count_strategy=strategy,
        oldest_age=oldest_age,
    )


KIND = SourceKind(DECLARED, parse)
