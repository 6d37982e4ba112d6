"""Amazon SQS: the `aws-sqs` kind's poller.

One `GetQueueAttributes` call (AWS JSON 1.0 protocol: `POST /` with `X-Amz-Target: AmazonSQS.GetQueueAttributes`)
over the shared HTTP client (`SourceContext.http`), signed with SigV4 by `aws_sigv4` (no AWS SDK). The count is
`ApproximateNumberOfMessages` (visible), plus `ApproximateNumberOfMessagesNotVisible` (in flight) with
`includeInFlight: true`.

Transient failures (5xx, throttling, timeouts, refused connections) are retried within the poll's budget;
permanent ones (no such queue, access denied, bad signature) fail at once. Messages name the queue URL, region,
access key id and Secret, never the secret access key or session token.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from controller.model.readings import SourceError, SourceReading
from controller.model.secrets import SecretUnavailable
from controller.model.sources.aws_sqs import TYPE, AwsSqsSource
from controller.model.sources.base import SourceSpec
from controller.model.textfmt import duration
from controller.net.http import Answer, HttpFailure, HttpTimeout
from controller.sources.aws_sigv4 import AwsCredentials, sign
from controller.sources.base import Poller, SourceContext

_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_THROTTLING = {"ThrottlingException", "RequestThrottled", "ServiceUnavailable", "InternalFailure",
               "KmsThrottled"}


class AwsSqsPoller(Poller[AwsSqsSource, AwsCredentials, int]):
    """Polls one SQS queue; the credentials are read from their Secrets on every poll."""

    kind = TYPE

    def __repr__(self) -> str:
        return f"AwsSqsPoller(queue={self._spec.queue_url!r}, region={self._spec.region!r})"

    async def prepare(self, deadline: float) -> AwsCredentials | SourceReading:  # noqa: ARG002
        try:
            return await self._credentials()
        except SecretUnavailable as exc:
            return SourceReading.failed(exc.code, exc.message, retryable=False)

    async def _credentials(self) -> AwsCredentials:
        spec = self._spec
        secrets = self._context.secrets
        key_id = await secrets(spec.access_key_id_secret_ref.name, spec.access_key_id_secret_ref.key)
        secret = await secrets(spec.secret_access_key_secret_ref.name, spec.secret_access_key_secret_ref.key)
        token = None
        if spec.session_token_secret_ref is not None:
            token = await secrets(spec.session_token_secret_ref.name, spec.session_token_secret_ref.key)
        return AwsCredentials(key_id.strip(), secret.strip(), token.strip() if token else None)

    async def attempt(self, settings: AwsCredentials, timeout: float) -> int | SourceError:
        credentials = settings
        spec = self._spec
        parts = urlsplit(spec.queue_url)
        endpoint = f"{parts.scheme}://{parts.netloc}/"
        names = ["ApproximateNumberOfMessages"] + (
            ["ApproximateNumberOfMessagesNotVisible"] if spec.include_in_flight else [])
        body = json.dumps({"QueueUrl": spec.queue_url, "AttributeNames": names}).encode()
        headers = sign("POST", endpoint, {"content-type": "application/x-amz-json-1.0",
                                          "x-amz-target": "AmazonSQS.GetQueueAttributes"},
                       body, credentials, spec.region, "sqs", self._wall_clock())
        headers.pop("host")  # the client sets the same value
        try:
            response = await self._context.http.fetch("POST", endpoint, headers=headers, body=body, timeout=timeout)
        except HttpTimeout:
            return SourceError("Timeout", f"no answer from {endpoint} within {duration(timeout)}")
        except HttpFailure as exc:
            return SourceError("ConnectionFailed", f"cannot connect to {endpoint} ({exc.reason})")
        if response.status == 200:
            return self._count(response, names)
        return self._error(response, credentials)

    def _count(self, response: Answer, names: list[str]) -> int | SourceError:
        try:
            attributes = response.json().get("Attributes") or {}
            return sum(int(attributes[name]) for name in names)
        except (ValueError, KeyError, TypeError, AttributeError):
            return SourceError("InvalidResponse", f"GetQueueAttributes for {self._spec.queue_url} answered without "
                               f"{' and '.join(names)}", retryable=False)

    def _error(self, response: Answer, credentials: AwsCredentials) -> SourceError:
        spec = self._spec
        status = response.status
        try:
            body = response.json()
        except ValueError:
            body = {}
        kind = str(body.get("__type", "") if isinstance(body, dict) else "").rsplit("#", 1)[-1]
        query_error = response.headers.get("x-amzn-query-error", "").split(";", 1)[0]
        code = kind or query_error.rsplit(".", 1)[-1] or f"HTTP{status}"
        aws_message = str(body.get("message") or body.get("Message") or "") if isinstance(body, dict) else ""
        queue = f"queue {spec.queue_url}"
        key = f"access key '{credentials.access_key_id}'"
        check = (f": check the Secrets '{spec.access_key_id_secret_ref.name}' and "
                 f"'{spec.secret_access_key_secret_ref.name}'")
        if code in ("QueueDoesNotExist", "NonExistentQueue"):
            return SourceError("QueueDoesNotExist", f"{queue} does not exist in {spec.region}: fix queueURL "
                               "or awsRegion", retryable=False)
        if code in ("InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch",
                    "IncompleteSignature", "ExpiredToken", "InvalidSignatureException", "MissingAuthenticationToken"):
            return SourceError(code, f"AWS rejected {key} for {queue} ({code}){check} (or this machine's clock is "
                               "more than 5 minutes off)", retryable=False)
        if code in ("AccessDenied", "AccessDeniedException", "KMSAccessDenied"):
            return SourceError("AccessDenied", f"{key} may not read {queue}: allow sqs:GetQueueAttributes on it",
                               retryable=False)
        retryable = status in _RETRYABLE_STATUS or code in _THROTTLING
        detail = f": {aws_message[:200]}" if aws_message else ""
        return SourceError(code, f"HTTP {status} ({code}) from SQS for {queue}{detail}", retryable=retryable)


def build(spec: SourceSpec, context: SourceContext) -> AwsSqsPoller:
    if not isinstance(spec, AwsSqsSource):
        raise TypeError(f"aws-sqs factory got a {type(spec).__name__}")
    return AwsSqsPoller(spec, context)
