"""aws-sqs: SigV4 pinned by AWS's published examples and by botocore, spec validation, and polls of moto's SQS
server (moto[server], test-only) on 127.0.0.1."""

from __future__ import annotations

import calendar
import datetime as dt
import hashlib
import logging
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from controller.model.fields import SecretKeyRef, SpecError
from controller.model.readings import SourceReading
from controller.model.rule import parse_queuescaler
from controller.model.sources.aws_sqs import AwsSqsSource
from controller.sources.aws_sigv4 import (
    AwsCredentials,
    canonical_query,
    canonical_request,
    canonical_uri,
    sign,
    signing_key,
)
from controller.sources.aws_sqs import AwsSqsPoller
from controller.sources.base import SourceContext
from controller.sources.retries import RetryPolicy
from tests.azurite import free_port
from tests.helpers import DictSecrets
from tests.loopback import LoopbackServer, Reply, always
from tests.transports import http_client

EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"  # AWS's documentation example, not a real key
AUGUST_30 = calendar.timegm(dt.datetime(2015, 8, 30, 12, 36, 0).timetuple())
FAST = RetryPolicy(request_timeout=2.0, first_delay=0.02, max_delay=0.1, max_attempts=10)


# ---------------------------------------------------------------------------------------------- SigV4


def test_the_signing_key_matches_aws_documentation() -> None:
    assert signing_key(EXAMPLE_SECRET, "20120215", "us-east-1", "iam").hex() == (
        "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d")


def test_the_iam_list_users_example_signs_as_aws_documents() -> None:
    url = "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08"
    content_type = {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
    request, signed = canonical_request("GET", url, {**content_type, "host": "iam.amazonaws.com",
                                                     "x-amz-date": "20150830T123600Z"}, b"")
    assert signed == "content-type;host;x-amz-date"
    assert hashlib.sha256(request.encode()).hexdigest() == (
        "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59")
    headers = sign("GET", url, content_type, b"", AwsCredentials("AKIDEXAMPLE", EXAMPLE_SECRET), "us-east-1", "iam",
                   AUGUST_30)
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date, "
        "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7")


def test_canonical_uri_query_and_headers() -> None:
    assert canonical_uri("") == "/"
    assert canonical_uri("/documents and settings/") == "/documents%20and%20settings/"
    assert canonical_query("b=2&a=2&a=1&c=%2F x") == "a=1&a=2&b=2&c=%2F%20x"
    request, signed = canonical_request("POST", "https://h/", {"X-Amz-Date": "d", "My-Header": "  a   b  c ",
                                                              "Host": "h"}, b"{}")
    assert signed == "host;my-header;x-amz-date"
    assert "my-header:a b c\n" in request


@pytest.mark.parametrize("token", [None, "session-token-value"])
def test_the_sqs_request_signs_exactly_as_botocore_does(token: str | None) -> None:
    url = "https://sqs.eu-west-1.amazonaws.com/"
    body = b'{"QueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"}'
    base = {"content-type": "application/x-amz-json-1.0", "x-amz-target": "AmazonSQS.GetQueueAttributes"}
    ours = sign("POST", url, base, body, AwsCredentials("AKIDEXAMPLE", EXAMPLE_SECRET, token), "eu-west-1", "sqs",
                1_760_000_000.0)

    # botocore's own steps, with its clock replaced by our timestamp.
    request = AWSRequest(method="POST", url=url, data=body, headers=dict(base))
    request.context["timestamp"] = ours["x-amz-date"]
    auth = SigV4Auth(Credentials("AKIDEXAMPLE", EXAMPLE_SECRET, token), "sqs", "eu-west-1")
    auth._modify_request_before_signing(request)
    string_to_sign = auth.string_to_sign(request, auth.canonical_request(request))
    signature = auth.signature(string_to_sign, request)

    assert ours["Authorization"].endswith(f"Signature={signature}")
    assert ours["Authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{ours['x-amz-date'][:8]}/eu-west-1/sqs/aws4_request, SignedHeaders=")
    if token:
        assert ours["x-amz-security-token"] == request.headers["X-Amz-Security-Token"] == token


def test_credentials_hide_the_secret_in_their_repr() -> None:
    assert EXAMPLE_SECRET not in repr(AwsCredentials("AKIDEXAMPLE", EXAMPLE_SECRET, "tok"))
    assert "tok" not in repr(AwsCredentials("AKIDEXAMPLE", EXAMPLE_SECRET, "tok"))


# ---------------------------------------------------------------------------------------------- the spec

REFS = {"accessKeyIdSecretRef": {"name": "aws", "key": "id"}, "secretAccessKeySecretRef": {"name": "aws", "key": "secret"}}


def rule(**source: Any) -> dict[str, Any]:
    return {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {"name": "r"},
            "spec": {"scaleTargetRef": {"name": "w"}, "maxReplicas": 5, "sources": [{"type": "aws-sqs", **source}]}}


def errors_of(**source: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_queuescaler(rule(**source))
    return [str(e) for e in info.value.errors]


def test_the_region_comes_from_an_aws_queue_url() -> None:
    source = parse_queuescaler(rule(queueURL="https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
                                    **REFS)).spec.sources[0]
    assert isinstance(source, AwsSqsSource)
    assert (source.region, source.queue_label, source.include_in_flight) == ("eu-west-1", "orders", False)


def test_bad_fields_are_named_by_their_path() -> None:
    assert errors_of() == ["spec.sources[0].queueURL: is required", "spec.sources[0].accessKeyIdSecretRef: is required",
                           "spec.sources[0].secretAccessKeySecretRef: is required"]
    assert errors_of(queueURL="http://127.0.0.1:4566/123456789012/orders", **REFS) == [
        "spec.sources[0].awsRegion: is required when queueURL is not sqs.<region>.amazonaws.com"]
    assert errors_of(queueURL="https://sqs.eu-west-1.amazonaws.com/123456789012/orders", awsRegion="us-east-1",
                     **REFS) == ['spec.sources[0].awsRegion: must match the queue URL\'s region "eu-west-1", got '
                                 '"us-east-1"']
    assert errors_of(queueURL="https://sqs.eu-west-1.amazonaws.com/orders", **REFS)[0].startswith(
        "spec.sources[0].queueURL: must be a queue URL")


# ---------------------------------------------------------------------------------------------- moto's server


class MotoServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        binary = shutil.which("moto_server", path=str(__import__("pathlib").Path(sys.executable).parent))
        command = [binary] if binary else [sys.executable, "-m", "moto.server"]
        self.process = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode}")
            try:
                httpx.get(f"{self.url}/moto-api/", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("moto_server did not answer in 30s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def sqs(self) -> Any:
        return boto3.client("sqs", endpoint_url=self.url, region_name="eu-west-1", aws_access_key_id="AKIDMOTO",
                            aws_secret_access_key="moto-secret-key-6d1f")


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


SECRETS = DictSecrets({("aws", "id"): "AKIDMOTO", ("aws", "secret"): "moto-secret-key-6d1f"})


def sqs_source(queue_url: str, **fields: Any) -> AwsSqsSource:
    return AwsSqsSource(type="aws-sqs", queue_url=queue_url, region="eu-west-1",
                        access_key_id_secret_ref=SecretKeyRef("aws", "id"),
                        secret_access_key_secret_ref=SecretKeyRef("aws", "secret"), **fields)


async def poll(spec: AwsSqsSource, *, budget: float = 5.0, retry: RetryPolicy = FAST,
               secrets: DictSecrets = SECRETS) -> tuple[SourceReading, AwsSqsPoller]:
    async with http_client() as http:
        poller = AwsSqsPoller(spec, SourceContext(http=http, secrets=secrets), retry=retry)
        return await poller.poll(budget), poller


async def test_visible_and_in_flight_messages(moto: MotoServer) -> None:
    client = moto.sqs()
    queue_url = client.create_queue(QueueName=f"orders-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    for i in range(8):
        client.send_message(QueueUrl=queue_url, MessageBody=f"m{i}")
    client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=3, VisibilityTimeout=300)
    assert (await poll(sqs_source(queue_url)))[0] == SourceReading.of(5)
    assert (await poll(sqs_source(queue_url, include_in_flight=True)))[0] == SourceReading.of(8)


async def test_a_missing_queue_fails_at_once(moto: MotoServer) -> None:
    reading, poller = await poll(sqs_source(f"{moto.url}/123456789012/no-such-queue"))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable, poller.attempts) == ("QueueDoesNotExist", False, 1)


async def test_throttling_is_retried_and_access_denied_is_not() -> None:
    throttled = Reply(400, {"x-amzn-query-error": "Throttling;Sender"},
                      b'{"__type": "com.amazonaws.sqs#ThrottlingException", "message": "Rate exceeded"}')
    with LoopbackServer(always(throttled)) as server:
        reading, poller = await poll(sqs_source(f"{server.url}/123456789012/orders"), budget=1.0,
                                     retry=RetryPolicy(request_timeout=0.5, first_delay=0.1, max_delay=0.4))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("ThrottlingException", True)
    assert poller.attempts >= 3
    denied = Reply(400, {}, b'{"__type": "com.amazon.coral.service#AccessDeniedException", "message": "no"}')
    with LoopbackServer(always(denied)) as server:
        reading, poller = await poll(sqs_source(f"{server.url}/123456789012/orders"))
        sent = server.requests[0]
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable, poller.attempts) == ("AccessDenied", False, 1)
    assert "allow sqs:GetQueueAttributes" in reading.error.message
    assert sent.headers["x-amz-target"] == "AmazonSQS.GetQueueAttributes"
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDMOTO/")


async def test_no_secret_key_in_readings_reprs_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bad = Reply(403, {}, b'{"__type": "com.amazonaws.sqs#InvalidClientTokenId", "message": "bad token"}')
    with LoopbackServer(always(bad)) as server:
        spec = sqs_source(f"{server.url}/123456789012/orders",
                          session_token_secret_ref=SecretKeyRef("aws", "token"))
        secrets = DictSecrets({**SECRETS.values, ("aws", "token"): "session-token-9f2c"})
        reading, poller = await poll(spec, secrets=secrets)
    assert reading.error is not None and reading.error.code == "InvalidClientTokenId"
    texts = [repr(reading), repr(poller), repr(spec), reading.error.message, caplog.text]
    for text in texts:
        assert "moto-secret-key-6d1f" not in text and "session-token-9f2c" not in text
