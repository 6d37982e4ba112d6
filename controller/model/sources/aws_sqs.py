"""The aws-sqs source's fields: an SQS queue URL, its region and credentials."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from controller.model.fields import Fields, SecretKeyRef
from controller.model.sources.base import SourceSpec

TYPE = "aws-sqs"


_REGION = r"[a-z]{2}(-[a-z]+)+-\d"


_AWS_HOST = re.compile(rf"sqs\.({_REGION})\.amazonaws\.com(\.cn)?")


@dataclass(frozen=True, kw_only=True)
class AwsSqsSource(SourceSpec):
    """One SQS queue, by URL, and the access key that may read its attributes."""

    queue_url: str
    region: str
    access_key_id_secret_ref: SecretKeyRef
    secret_access_key_secret_ref: SecretKeyRef
    session_token_secret_ref: SecretKeyRef | None = None
    include_in_flight: bool = False

    @property
    def queue_label(self) -> str:
        return self.queue_url.rstrip("/").rsplit("/", 1)[-1]


def parse(f: Fields, weight: float) -> AwsSqsSource:
    url = f.string("queueURL", required=True, pattern=r"https?://[^\s/?#@]+/\d{12}/[A-Za-z0-9_-]{1,75}(\.fifo)?",
                   pattern_help="must be a queue URL, https://sqs.<region>.amazonaws.com/<account>/<queue>",
                   max_length=2048)
    region = f.optional_string("awsRegion", pattern=_REGION, pattern_help="must be an AWS region such as eu-west-1")
    key_id = f.secret_ref("accessKeyIdSecretRef")
    secret = f.secret_ref("secretAccessKeySecretRef")
    token = f.secret_ref("sessionTokenSecretRef")
    include = f.boolean("includeInFlight", False)
    host_match = _AWS_HOST.fullmatch(urlsplit(url).hostname or "") if url else None
    if region is None:
        if host_match is not None:
            region = host_match.group(1)
        elif url:
            f.error("awsRegion", "is required when queueURL is not sqs.<region>.amazonaws.com")
    elif host_match is not None and host_match.group(1) != region:
        f.error("awsRegion", f'must match the queue URL\'s region "{host_match.group(1)}", got "{region}"')
    if key_id is None:
        f.missing("accessKeyIdSecretRef")
    if secret is None:
        f.missing("secretAccessKeySecretRef")
    placeholder = SecretKeyRef("", "")
    return AwsSqsSource(type=TYPE, weight=weight, queue_url=url, region=region or "",
                        access_key_id_secret_ref=key_id or placeholder,
                        secret_access_key_secret_ref=secret or placeholder, session_token_secret_ref=token,
                        include_in_flight=include)
