"""Azure Storage Queue: the `azure-queue` kind's fields, validation and poller.

The poller reads one queue's approximate message count with one Get Queue Metadata call
(`GET {endpoint}/{queue}?comp=metadata`, header `x-ms-approximate-messages-count`) over the shared
`httpx.AsyncClient`, signed with Shared Key, a SAS, or a workload-identity bearer token (see `azure_auth`).
With `countStrategy: visible` it first peeks up to 32 messages: fewer than 32 is the exact visible count.

Transient failures (503 ServerBusy, 500, 408, timeouts, refused connections) are retried with exponential
back-off and jitter inside the poll's budget; permanent ones (403, 404, 400) fail at once. Either way the reading
carries the Azure error code and a message a person can act on, and never a secret.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import httpx

from controller import __version__
from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceError, SourceReading
from controller.model.secrets import SecretUnavailable
from controller.model.sources.azure_queue import CLOUD_SUFFIXES, AzureQueueSource
from controller.model.sources.base import SourceSpec
from controller.model.textfmt import duration
from controller.net.transport import PollingClient
from controller.sources.azure_auth import (
    BearerToken,
    CredentialError,
    SasToken,
    SharedKey,
    WorkloadIdentityConfig,
    format_http_date,
    install_log_scrubbing,
    parse_connection_string,
    scrub,
    strip_query,
    token_refresh_time,
)
from controller.sources.base import SourceContext
from controller.sources.retries import RetryPolicy

log = logging.getLogger(__name__)









# --------------------------------------------------------------------------------------------------------------
# The poller

API_VERSION = "2025-11-05"  # pinned: Azurite 3.37 and Azure both know it; Bearer needs >= 2017-11-09
PEEK_LIMIT = 32  # the most Peek Messages returns
COUNT_HEADER = "x-ms-approximate-messages-count"
USER_AGENT = f"queuescale/{__version__}"  # on the fast path, which sends no header of httpx's
VISIBLE_UNKNOWN_NOTE = (
    f"visible count unknown: {PEEK_LIMIT} or more visible, used the approximate count "
    "(which also counts invisible messages)"
)


@dataclass(frozen=True)
class _Access:
    """How one poll reaches the queue: the endpoint and exactly one of the credentials (all repr-safe)."""

    endpoint: str  # no trailing slash, no query
    account: str  # for messages: the account name, or the endpoint's host when only a SAS names it
    how: Literal["account key", "connection string", "SAS", "workload identity"]
    secret: SecretKeyRef | None = None
    shared_key: SharedKey | None = None
    sas: SasToken | None = None

    @property
    def check_secret(self) -> str:
        if self.secret is None:
            return ""
        return f": check the Secret '{self.secret.name}' key '{self.secret.key}'"


class _Answer(Protocol):
    """What the poller reads of an answer: an `httpx.Response`, or a `RawAnswer` from the fast path."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...


@dataclass(frozen=True)
class _Outcome:
    """One call's result after retries: a response, or the error that ended it."""

    response: _Answer | None
    error: SourceError | None = None
    attempts: int = 1


_Attempt = Callable[[float], Awaitable[_Outcome]]
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# What a service too old for our pinned x-ms-version (an old Azurite or Azure Stack) answers.
_VERSION_TROUBLE = frozenset(
    {"InvalidHeaderValue", "InvalidQueryParameterValue", "UnsupportedHeader", "OutOfRangeInput"}
)


# Back-off jitter needs no generator per queue (a random.Random holds 2.5 KB of state).
_JITTER = random.Random()


class AzureQueuePoller:
    """Polls one Azure Storage queue. Secrets are read on every poll, so a rotated key takes effect at once."""

    def __init__(
        self,
        spec: AzureQueueSource,
        context: SourceContext,
        *,
        retry: RetryPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
        api_version: str = API_VERSION,
    ) -> None:
        self._spec = spec
        self._context = context
        self._retry = retry or RetryPolicy()
        self._environ = os.environ if environ is None else environ
        self._rng = rng or _JITTER
        self._api_version = api_version
        self._token: BearerToken | None = None
        self._parsed: tuple[str, _Access] | None = None  # the Secret's text and what it gave (never in a repr)
        self._urls: dict[str, httpx.URL] = {}
        self.retries = 0  # retries made by the last poll (for tests and metrics)

    @property
    def spec(self) -> AzureQueueSource:
        return self._spec

    def __repr__(self) -> str:
        return f"AzureQueuePoller(queue={self._spec.queue_name!r}, account={self._spec.account_name!r})"

    async def aclose(self) -> None:
        self._token = None

    def _wall_clock(self) -> float:
        return self._context.now() if self._context.now is not None else time.time()

    # ----------------------------------------------------------------------------------------------------------

    async def poll(self, budget: float) -> SourceReading:
        """The queue's count, or an error reading; retries transient failures within `budget` seconds."""
        # Finish a little before the budget so the caller's own timeout never has to cut us off.
        deadline = time.monotonic() + max(0.0, budget - min(0.25, budget * 0.1))
        self.retries = 0
        try:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    access = await self._access()
            except SecretUnavailable as exc:
                return SourceReading.failed(exc.code, exc.message, retryable=False)
            except CredentialError as exc:
                return SourceReading.failed("InvalidCredential", str(exc), retryable=False)
            except TimeoutError:
                return SourceReading.failed(
                    "Timeout", f"reading the credentials for queue '{self._spec.queue_name}' outlasted the budget"
                )
            return await self._count(access, deadline)
        except Exception as exc:  # never raise out of a poll; the exception's text may hold a URL with a SAS
            log.error("azure-queue %s: unexpected %s", self._spec.queue_name, type(exc).__name__)
            return SourceReading.failed("InternalError", f"unexpected {type(exc).__name__} while polling")

    async def _count(self, access: _Access, deadline: float) -> SourceReading:
        if self._spec.count_strategy == "visible":
            peek = await self._call(access, "messages", "peekonly=true&numofmessages=32", deadline)
            if peek.error is not None:
                return SourceReading(count=None, error=peek.error)
            assert peek.response is not None
            visible = _count_peeked(peek.response.content)
            if visible is None:
                return SourceReading.failed(
                    "InvalidResponse", f"Peek Messages on {self._where(access)} answered with no message list"
                )
            if visible < PEEK_LIMIT:
                return SourceReading.of(visible)
        metadata = await self._call(access, "", "comp=metadata", deadline)
        if metadata.error is not None:
            return SourceReading(count=None, error=metadata.error)
        assert metadata.response is not None
        count = _parse_count(metadata.response.headers.get(COUNT_HEADER))
        if count is None:
            return SourceReading.failed(
                "InvalidResponse",
                f"Get Queue Metadata on {self._where(access)} answered without a valid {COUNT_HEADER} header",
            )
        note = VISIBLE_UNKNOWN_NOTE if self._spec.count_strategy == "visible" else ""
        return SourceReading.of(count, note)

    def _where(self, access: _Access) -> str:
        return f"queue '{self._spec.queue_name}' in account '{access.account}'"

    # ----------------------------------------------------------------------------------------------------------
    # Credentials

    async def _access(self) -> _Access:
        """The credentials, parsed again only when the Secret's text changed (a rotated key)."""
        spec = self._spec
        ref = spec.connection_secret_ref or spec.account_key_secret_ref or spec.sas_secret_ref
        if ref is None:
            return self._parse_access("")
        text = await self._context.secrets(ref.name, ref.key)
        parsed = self._parsed
        if parsed is not None and parsed[0] == text:
            return parsed[1]
        access = self._parse_access(text)
        self._parsed = (text, access)
        return access

    def _parse_access(self, text: str) -> _Access:
        spec = self._spec
        if spec.connection_secret_ref is not None:
            ref = spec.connection_secret_ref
            conn = parse_connection_string(text, where=_secret_words(ref))
            account = conn.account or _host(conn.queue_endpoint)
            return _Access(conn.queue_endpoint, account, "connection string", ref, conn.shared_key, conn.sas)
        account = spec.account_name or ""
        endpoint = spec.endpoint or f"https://{account}.queue.{CLOUD_SUFFIXES[spec.cloud]}"
        if spec.account_key_secret_ref is not None:
            ref = spec.account_key_secret_ref
            key = SharedKey.from_base64(account, text, where=_secret_words(ref))
            return _Access(endpoint, account, "account key", ref, shared_key=key)
        if spec.sas_secret_ref is not None:
            ref = spec.sas_secret_ref
            sas = SasToken.parse(text, where=_secret_words(ref))
            return _Access(endpoint, account, "SAS", ref, sas=sas)
        return _Access(endpoint, account, "workload identity")

    async def _bearer(self, timeout: float) -> str | _Outcome:
        """A cached storage token, or a fresh one from the workload-identity exchange (or the failure)."""
        now = self._wall_clock()
        if self._token is not None and now < self._token.refresh_at:
            return self._token.value
        try:
            config = WorkloadIdentityConfig.from_environment(self._environ)
        except CredentialError as exc:
            return _failure("WorkloadIdentityNotConfigured", str(exc), retryable=False)
        try:
            # Read every time: the kubelet rotates the projected service-account token.
            assertion = Path(config.token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            return _failure(
                "WorkloadIdentityNotConfigured",
                f"cannot read the federated token file {config.token_file} ({why})",
                retryable=False,
            )
        token_url = strip_query(config.token_url)
        try:
            async with asyncio.timeout(timeout):
                response = await self._context.http.post(
                    config.token_url, data=config.exchange_form(assertion), timeout=timeout
                )
        except (TimeoutError, httpx.TimeoutException):
            return _failure("Timeout", f"no answer from the token endpoint {token_url} within {duration(timeout)}")
        except httpx.TransportError as exc:
            return _failure("ConnectionFailed", f"cannot reach the token endpoint {token_url} ({type(exc).__name__})")
        return self._accept_token(response, config, token_url, now)

    def _accept_token(
        self, response: httpx.Response, config: WorkloadIdentityConfig, token_url: str, now: float
    ) -> str | _Outcome:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code == 200 and isinstance(body, dict) and isinstance(body.get("access_token"), str):
            try:
                expires_in = float(body.get("expires_in", 3600))
            except (TypeError, ValueError):
                expires_in = 3600.0
            self._token = BearerToken(body["access_token"], now + expires_in, token_refresh_time(now, expires_in))
            return self._token.value
        error = body.get("error") if isinstance(body, dict) else None
        description = body.get("error_description") if isinstance(body, dict) else None
        aadsts = re.search(r"AADSTS\d+", description) if isinstance(description, str) else None
        detail = " ".join(str(part) for part in (error, aadsts.group(0) if aadsts else None) if part)
        retryable = response.status_code in _RETRYABLE_STATUS
        return _failure(
            "TokenExchangeFailed",
            f"the workload-identity token exchange at {token_url} failed with HTTP {response.status_code}"
            f"{f' ({detail})' if detail else ''}: check the federated credential of client id "
            f"'{config.client_id}' in tenant '{config.tenant_id}'",
            retryable=retryable,
        )

    # ----------------------------------------------------------------------------------------------------------
    # Calls

    async def _call(self, access: _Access, subpath: str, query: str, deadline: float) -> _Outcome:
        """One queue-service call, retried while it fails transiently and the budget allows."""
        path = f"{access.endpoint}/{self._spec.queue_name}{'/' + subpath if subpath else ''}"
        url = f"{path}?{query}"

        async def attempt(timeout: float) -> _Outcome:
            target = url
            authorization = ""
            if access.sas is not None:
                target = access.sas.apply(url)
            elif access.shared_key is None:
                started = time.monotonic()
                token = await self._bearer(timeout)
                if isinstance(token, _Outcome):
                    return token
                authorization = f"Bearer {token}"
                timeout = max(0.001, timeout - (time.monotonic() - started))  # the exchange spent part of it
            target_url = self._url(target)
            http = self._context.http
            direct = http.direct(target_url) if isinstance(http, PollingClient) else None
            headers = {"x-ms-date": format_http_date(self._wall_clock()), "x-ms-version": self._api_version}
            if direct is not None:
                headers["User-Agent"] = USER_AGENT
            if access.shared_key is not None:  # signs what goes out: httpx adds only unsigned headers of its own
                authorization = access.shared_key.authorization("GET", url, headers)
            if authorization:
                headers["Authorization"] = authorization
            try:
                if direct is not None:
                    # Cancelling StreamTransport is safe (it closes the interrupted connection and gives back its
                    # slot), and fetch's timeout bounds the whole call: no shield and no timer of our own.
                    wire = [(name.encode("ascii"), value.encode("ascii")) for name, value in headers.items()]
                    response: _Answer = await direct.fetch("GET", target_url, wire, timeout=timeout)
                else:
                    response = await _through_httpx(http, target_url, headers, timeout)
            except (TimeoutError, httpx.TimeoutException):
                return _failure("Timeout", f"no answer from {path} within {duration(timeout)}")
            except httpx.TransportError as exc:
                return _failure("ConnectionFailed", f"cannot connect to {access.endpoint} ({type(exc).__name__})")
            return self._classify(response, access, path)

        outcome = await self._with_retries(attempt, deadline)
        if outcome.error is not None and outcome.error.retryable and outcome.attempts > 1:
            error = outcome.error
            message = f"{error.message} (gave up after {outcome.attempts} attempts)"
            outcome = _Outcome(None, SourceError(error.code, message, error.retryable), outcome.attempts)
        return outcome

    def _url(self, target: str) -> httpx.URL:
        """The parsed URL, kept: parsing it again on every poll was a tenth of httpx's work per request."""
        url = self._urls.get(target)
        if url is None:
            if len(self._urls) >= 4:  # metadata and peek, for the current credentials: a new key makes new ones
                self._urls.clear()
            url = self._urls[target] = httpx.URL(target)
        return url

    async def _with_retries(self, attempt: _Attempt, deadline: float) -> _Outcome:
        policy = self._retry
        attempts = 0
        last: _Outcome | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempts += 1
            outcome = await attempt(min(policy.request_timeout, remaining))
            last = _Outcome(outcome.response, outcome.error, attempts)
            if outcome.error is None or not outcome.error.retryable or attempts >= policy.max_attempts:
                return last
            wait = policy.delay(attempts - 1, self._rng)
            # Retry only if the wait leaves time for a useful attempt.
            if time.monotonic() + wait + min(0.05, policy.request_timeout) >= deadline:
                return last
            self.retries += 1
            await asyncio.sleep(wait)
        return last or _failure("Timeout", "the poll's time budget was spent before any request")

    def _classify(self, response: _Answer, access: _Access, path: str) -> _Outcome:
        status = response.status_code
        if 200 <= status < 300:
            return _Outcome(response)
        code, azure_message = _error_details(response)
        retryable = status in _RETRYABLE_STATUS
        if access.how == "workload identity" and status in (401, 403) and code != "AuthorizationPermissionMismatch":
            self._token = None  # maybe revoked or for the wrong audience: exchange again next time
        message = self._explain(status, code or f"HTTP{status}", azure_message, access, path)
        return _failure(code or f"HTTP{status}", message, retryable=retryable)

    def _explain(self, status: int, code: str, azure_message: str, access: _Access, path: str) -> str:
        """A message that says what to fix, in the user's words (queue, account, Secret), never a secret."""
        queue, account = self._spec.queue_name, access.account
        check = access.check_secret
        if code == "QueueNotFound":
            return f"queue '{queue}' not found in account '{account}': create it or fix queueName"
        if code == "AuthenticationFailed" or (status == 401 and access.how == "workload identity"):
            if access.how == "account key":
                what = f"the account key for '{account}' was rejected ({code})"
            elif access.how == "connection string":
                what = f"the connection string's credentials for '{account}' were rejected ({code})"
            elif access.how == "SAS":
                expiry = access.sas.expiry if access.sas is not None else None
                what = (f"the SAS for '{account}' was rejected ({code}): it may have expired"
                        f"{f' (se={expiry})' if expiry else ''}, be malformed or signed with a rotated key")
            else:
                what = f"the workload-identity token for '{account}' was rejected ({code})"
            clock = " (or this machine's clock is more than 15 minutes off)" if access.how != "SAS" else ""
            return f"{what}{check}{clock}"
        if code == "AuthorizationPermissionMismatch":
            if access.how == "workload identity":
                client = self._environ.get("AZURE_CLIENT_ID", "?")
                return (f"the workload identity (client id '{client}') may not read queue '{queue}' in account "
                        f"'{account}' ({code}): assign it the Storage Queue Data Reader role")
            return (f"the credentials for '{account}' may not read queue '{queue}' ({code}): a SAS needs the r "
                    f"permission{check}")
        if code == "AuthorizationResourceTypeMismatch":
            return (f"the account SAS for '{account}' does not cover this call ({code}): issue it with srt=c "
                    f"(srt=co with countStrategy: visible, since Peek Messages reads messages){check}")
        if code == "InvalidResourceName":
            return (f"queue name '{queue}' is not valid in account '{account}' ({code}): use 3-63 lowercase "
                    "letters, digits and single dashes")
        if code in _VERSION_TROUBLE or "Version" in code:
            return (f"the queue service at {access.endpoint} rejected the request ({code}): it may not support "
                    f"service version {self._api_version}; {azure_message}".rstrip("; "))
        if status in (500, 503) or code in ("ServerBusy", "InternalError", "OperationTimedOut"):
            return f"the queue service for account '{account}' is busy or failing (HTTP {status} {code})"
        detail = f": {azure_message}" if azure_message else ""
        return f"HTTP {status} ({code}) from {path}{detail}"


async def _through_httpx(http: httpx.AsyncClient, url: httpx.URL, headers: dict[str, str],
                         timeout: float) -> httpx.Response:
    """A GET through httpx, waited for at most `timeout` seconds.

    Never cancel a request inside httpx: a cancellation while httpcore waits for a pooled connection or connects
    leaves that connection CONNECTING for ever, and once the pool is full of them every later poll times out (seen
    under load: 1,000 rules, then no poll ever answered). On our deadline we stop waiting; the request itself ends
    by httpx's own timeout, in the background.
    """
    request = asyncio.ensure_future(http.get(url, headers=headers, timeout=timeout))
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.shield(request)
    except (TimeoutError, asyncio.CancelledError):
        request.add_done_callback(_retrieve)
        raise


def _retrieve(request: asyncio.Future[httpx.Response]) -> None:
    """Mark an abandoned request's outcome as seen (no "exception was never retrieved" noise)."""
    if not request.cancelled():
        request.exception()


def _failure(code: str, message: str, *, retryable: bool = True) -> _Outcome:
    return _Outcome(None, SourceError(code, message, retryable))


def _secret_words(ref: SecretKeyRef) -> str:
    return f"Secret '{ref.name}' key '{ref.key}'"


def _host(url: str) -> str:
    return httpx.URL(url).host


def _parse_count(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def _count_peeked(body: bytes) -> int | None:
    """How many `<QueueMessage>` a Peek Messages answer holds; None when it is not a message list."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    if root.tag != "QueueMessagesList":
        return None
    return sum(1 for child in root if child.tag == "QueueMessage")


def _error_details(response: _Answer) -> tuple[str, str]:
    """Azure's error code (header, or the XML body) and the first line of its message, scrubbed."""
    code = response.headers.get("x-ms-error-code", "")
    message = ""
    if response.content:
        try:
            root = ET.fromstring(response.content)
        except ET.ParseError:
            root = None
        if root is not None:
            code = code or (root.findtext("Code") or "").strip()
            message = (root.findtext("Message") or "").strip().split("\n", 1)[0].strip()
    return code, scrub(message)[:300]


def build(spec: SourceSpec, context: SourceContext) -> AzureQueuePoller:
    if not isinstance(spec, AzureQueueSource):
        raise TypeError(f"azure-queue factory got a {type(spec).__name__}")
    return AzureQueuePoller(spec, context)


install_log_scrubbing()
