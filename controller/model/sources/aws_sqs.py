"""The aws-sqs source's fields: an SQS queue URL, its region and credentials."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from controller.model.fields import Fields, SecretKeyRef
from controller.model.schema import Boolean, KindFields, Rule, SecretRef, Text
from controller.model.sources.base import SourceKind, SourceSpec

TYPE = "aws-sqs"


_REGION = r"[a-z]{2}(-[a-z]+)+-[0-9]"


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


QUEUE_URL = Text("queueURL", required=True, max_length=2048,
                 pattern=r"https?://[^\s/?#@]+/[0-9]{12}/[A-Za-z0-9_-]{1,75}(\.fifo)?",
                 pattern_help="must be a queue URL, https://sqs.<region>.amazonaws.com/<account>/<queue>",
                 note="`https://sqs.<region>.amazonaws.com/<account>/<queue>`", doc="the SQS queue")
AWS_REGION = Text("awsRegion", max_length=32, pattern=_REGION, pattern_help="must be an AWS region such as eu-west-1",
                  description="Taken from queueURL when it is sqs.<region>.amazonaws.com.",
                  note="an AWS region such as `eu-west-1`", doc="required when the queue URL does not name it")
ACCESS_KEY_ID = SecretRef("accessKeyIdSecretRef", required=True, doc="a Secret key holding the access key id")
SECRET_ACCESS_KEY = SecretRef("secretAccessKeySecretRef", required=True,
                              doc="a Secret key holding the secret access key")
SESSION_TOKEN = SecretRef("sessionTokenSecretRef",
                          doc="a Secret key holding a session token (temporary credentials)")
INCLUDE_IN_FLIGHT = Boolean("includeInFlight", default=AwsSqsSource.include_in_flight,
                            doc="add `ApproximateNumberOfMessagesNotVisible`")

DECLARED = KindFields(TYPE, fields=(
    QUEUE_URL, AWS_REGION, ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN, INCLUDE_IN_FLIGHT,
), rules=(
    Rule("self.type != 'aws-sqs' || (has(self.queueURL) && has(self.accessKeyIdSecretRef) && "
         "has(self.secretAccessKeySecretRef))",
         "queueURL, accessKeyIdSecretRef and secretAccessKeySecretRef are required"),
))


def parse(f: Fields, weight: float) -> AwsSqsSource:
    url = f.string(QUEUE_URL)
    region = f.optional_string(AWS_REGION)
    key_id = f.secret_ref(ACCESS_KEY_ID)
    secret = f.secret_ref(SECRET_ACCESS_KEY)
    token = f.secret_ref(SESSION_TOKEN)
    include = f.boolean(INCLUDE_IN_FLIGHT)
    host_match = _AWS_HOST.fullmatch(urlsplit(url).hostname or "") if url else None
    if region is None:
        if host_match is not None:
            region = host_match.group(1)
        elif url:
            f.error("awsRegion", "is required when queueURL is not sqs.<region>.amazonaws.com")
    elif host_match is not None and host_match.group(1) != region:
        f.error("awsRegion", f'must match the queue URL\'s region "{host_match.group(1)}", got "{region}"')
    placeholder = SecretKeyRef("", "")
    return AwsSqsSource(type=TYPE, weight=weight, queue_url=url, region=region or "",
                        access_key_id_secret_ref=key_id or placeholder,
                        secret_access_key_secret_ref=secret or placeholder, session_token_secret_ref=token,
                        include_in_flight=include)


KIND = SourceKind(DECLARED, parse)
