"""Azure Storage Queue: the `azure-queue` kind's poller.

The poller reads one queue's approximate message count with one Get Queue Metadata call
(`GET {endpoint}/{queue}?comp=metadata`, header `x-ms-approximate-messages-count`) over the shared HTTP client
(`SourceContext.http`), signed with Shared Key, a SAS, or a workload-identity bearer token (see `azure_auth`).
With `countStrategy: visible` it first peeks up to 32 messages: fewer than 32 is the exact visible count.

With `oldestAge: peek` (the default) the reading also says how long the front message has waited: the answer's
`Date` (the service's clock, so ours may be off) minus the message's `InsertionTime`. When the count is above 0 that
takes one Peek Messages call of one message (never 32: a message may be 64 KiB); `countStrategy: visible` reads it
from its own peek (the earliest of the messages never delivered). A front message delivered before (DequeueCount
above 0) gives no age: its age counts a worker's time too. The age is a refinement: a peek that fails leaves the
count standing, with no age and a note.

Transient failures (503 ServerBusy, 500, 408, timeouts, refused connections) are retried with exponential
back-off and jitter inside the poll's budget (`retries.with_retries`); permanent ones (403, 404, 400) fail at
once. Either way the reading carries the Azure error code and a message a person can act on, and never a secret.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Literal
from urllib.parse import urlencode, urlsplit

from controller import __version__
from controller.model.fields import SecretKeyRef
from controller.model.readings import SourceError, SourceReading
from controller.model.secrets import SecretUnavailable
from controller.model.sources.azure_queue import CLOUD_SUFFIXES, TYPE, AzureQueueSource
from controller.model.sources.base import SourceSpec
from controller.model.textfmt import duration
from controller.net.http import Answer, HttpFailure, HttpTimeout
from controller.sources.azure_auth import (
    BearerToken,
    CredentialError,
    SasToken,
    SharedKey,
    WorkloadIdentityConfig,
    format_http_date,
    parse_connection_string,
    scrub,
    strip_query,
    token_refresh_time,
)
from controller.sources.base import Poller, SourceContext
from controller.sources.retries import RetryPolicy, with_retries

# --------------------------------------------------------------------------------------------------------------
# The poller

API_VERSION = "2025-11-05"  # pinned: Azurite 3.37 and Azure both know it; Bearer needs >= 2017-11-09
PEEK_LIMIT = 32  # the most Peek Messages returns
COUNT_HEADER = "x-ms-approximate-messages-count"
USER_AGENT = f"queuescale/{__version__}"
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}
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
        return f": check the {self.secret}"


_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# What a service too old for our pinned x-ms-version (an old Azurite or Azure Stack) answers.
_VERSION_TROUBLE = frozenset(
    {"InvalidHeaderValue", "InvalidQueryParameterValue", "UnsupportedHeader", "OutOfRangeInput"}
)
_PEEK = ("messages", f"peekonly=true&numofmessages={PEEK_LIMIT}")
_PEEK_FRONT = ("messages", "peekonly=true&numofmessages=1")  # for the age only: one message is enough
_METADATA = ("", "comp=metadata")


@dataclass(frozen=True)
class _Peeked:
    """What a Peek Messages answer says: how many messages it holds, and when the earliest of them was put."""

    count: int
    earliest_insertion: float | None  # epoch seconds; None when a message's InsertionTime is missing or unreadable
    delivered_before: bool = False  # every message peeked was delivered before: none of them has only waited


class AzureQueuePoller(Poller[AzureQueueSource, _Access, Answer]):
    """Polls one Azure Storage queue. Secrets are read on every poll, so a rotated key takes effect at once.

    An attempt is one call: Get Queue Metadata, or with `countStrategy: visible` Peek Messages first; when the
    peek finds the limit, Get Queue Metadata follows, with retries of its own within the same budget. With
    `oldestAge: peek` a count above 0 from Get Queue Metadata is followed by a peek at the front message for its
    age, again with retries of its own within the same budget.
    """

    kind = TYPE

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
        super().__init__(spec, context, retry=retry, rng=rng)
        self._environ = os.environ if environ is None else environ
        self._api_version = api_version
        self._token: BearerToken | None = None
        self._parsed: tuple[str, _Access] | None = None  # the Secret's text and what it gave (never in a repr)

    def __repr__(self) -> str:
        return f"AzureQueuePoller(queue={self._spec.queue_name!r}, account={self._spec.account_name!r})"

    async def aclose(self) -> None:
        self._token = None

    async def after_failure(self, error: SourceError) -> None:  # noqa: ARG002
        return None  # a token stays good through a busy queue service; `_classify` drops a rejected one

    async def prepare(self, deadline: float) -> _Access | SourceReading:
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await self._access()
        except SecretUnavailable as exc:
            return SourceReading.failed(exc.code, exc.message, retryable=False)
        except CredentialError as exc:
            return SourceReading.failed("InvalidCredential", str(exc), retryable=False)
        except TimeoutError:
            return SourceReading.failed(
                "Timeout", f"reading the credentials for queue '{self._spec.queue_name}' outlasted the budget"
            )

    async def attempt(self, settings: _Access, timeout: float) -> Answer | SourceError:
        return await self._call(settings, *(_PEEK if self._spec.count_strategy == "visible" else _METADATA), timeout)

    async def reading(self, settings: _Access, value: Answer, deadline: float) -> SourceReading:
        access = settings
        wants_age = self._spec.oldest_age != "off"
        if self._spec.count_strategy == "visible":
            peeked = _read_peek(value.body)
            if peeked is None:
                return SourceReading.failed(
                    "InvalidResponse", f"Peek Messages on {self._where(access)} answered with no message list"
                )
            age, age_note = self._age(value, peeked, access) if wants_age else (None, "")
            if peeked.count < PEEK_LIMIT:
                return SourceReading.of(peeked.count, age_note, oldest_age=age)
            metadata = await with_retries(lambda timeout: self._call(access, *_METADATA, timeout), deadline,
                                          self._retry, self._rng)
            if metadata.error is not None:
                return SourceReading(count=None, error=metadata.error)
            assert metadata.value is not None
            count = _parse_count(metadata.value.headers.get(COUNT_HEADER))
            if count is None:
                return self._no_count(access)
            return SourceReading.of(count, _notes(VISIBLE_UNKNOWN_NOTE, age_note), oldest_age=age)
        count = _parse_count(value.headers.get(COUNT_HEADER))
        if count is None:
            return self._no_count(access)
        if not wants_age:
            return SourceReading.of(count)
        if count == 0:
            return SourceReading.of(0, oldest_age=0.0)
        age, age_note = await self._front_age(access, deadline)
        return SourceReading.of(count, age_note, oldest_age=age)

    def _no_count(self, access: _Access) -> SourceReading:
        return SourceReading.failed(
            "InvalidResponse",
            f"Get Queue Metadata on {self._where(access)} answered without a valid {COUNT_HEADER} header",
        )

    async def _front_age(self, access: _Access, deadline: float) -> tuple[float | None, str]:
        """The front message's age from a peek at one message, or None and a note saying why there is none."""
        peek = await with_retries(lambda timeout: self._call(access, *_PEEK_FRONT, timeout), deadline,
                                  self._retry, self._rng)
        if peek.error is not None:
            return None, self._age_unknown(peek.error, access)
        assert peek.value is not None
        peeked = _read_peek(peek.value.body)
        if peeked is None:
            return None, (f"oldest message's age unknown: Peek Messages on {self._where(access)} answered with no "
                          "message list (InvalidResponse)")
        return self._age(peek.value, peeked, access)

    def _age(self, answer: Answer, peeked: _Peeked, access: _Access) -> tuple[float | None, str]:
        """Seconds the earliest peeked message has waited, by the service's clock (ours only when it sent none)."""
        if peeked.count == 0:
            return 0.0, ""  # every message is in flight or delayed: none waits
        if peeked.delivered_before:
            # Back after a worker failed or outlasted the visibility timeout: its age counts a worker's time as
            # well as waits, and would read as slow replicas. No age, and no note: this is the queue working.
            return None, ""
        if peeked.earliest_insertion is None:
            return None, (f"oldest message's age unknown: Peek Messages on {self._where(access)} answered without "
                          "a readable InsertionTime (InvalidResponse)")
        now = _http_time(answer.headers.get("Date"))
        if now is None:
            now = self._wall_clock()
        return max(0.0, now - peeked.earliest_insertion), ""

    def _age_unknown(self, error: SourceError, access: _Access) -> str:
        """The note of a peek that failed: the count stands, so this says what to change to get the age too."""
        where = self._where(access)
        if error.code == "AuthorizationResourceTypeMismatch":
            return (f"oldest message's age unknown: the account SAS for '{access.account}' may count but not peek "
                    f"at messages ({error.code}): the age needs object access, so issue it with srt=co (o to peek, "
                    f"c to count), or set oldestAge: off{access.check_secret}")
        if error.code == "AuthorizationPermissionMismatch" and access.how == "workload identity":
            return (f"oldest message's age unknown: the workload identity may not peek at messages of {where} "
                    f"({error.code}): assign it the Storage Queue Data Reader role, or set oldestAge: off")
        return f"oldest message's age unknown: Peek Messages failed ({error.code}): {error.message}"

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
            conn = parse_connection_string(text, where=str(ref))
            account = conn.account or _host(conn.queue_endpoint)
            return _Access(conn.queue_endpoint, account, "connection string", ref, conn.shared_key, conn.sas)
        account = spec.account_name or ""
        endpoint = spec.endpoint or f"https://{account}.queue.{CLOUD_SUFFIXES[spec.cloud]}"
        if spec.account_key_secret_ref is not None:
            ref = spec.account_key_secret_ref
            key = SharedKey.from_base64(account, text, where=str(ref))
            return _Access(endpoint, account, "account key", ref, shared_key=key)
        if spec.sas_secret_ref is not None:
            ref = spec.sas_secret_ref
            sas = SasToken.parse(text, where=str(ref))
            return _Access(endpoint, account, "SAS", ref, sas=sas)
        return _Access(endpoint, account, "workload identity")

    async def _bearer(self, timeout: float) -> str | SourceError:
        """A cached storage token, or a fresh one from the workload-identity exchange (or the failure)."""
        now = self._wall_clock()
        if self._token is not None and now < self._token.refresh_at:
            return self._token.value
        try:
            config = WorkloadIdentityConfig.from_environment(self._environ)
        except CredentialError as exc:
            return SourceError("WorkloadIdentityNotConfigured", str(exc), retryable=False)
        try:
            # Read every time: the kubelet rotates the projected service-account token.
            assertion = Path(config.token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            return SourceError(
                "WorkloadIdentityNotConfigured",
                f"cannot read the federated token file {config.token_file} ({why})",
                retryable=False,
            )
        token_url = strip_query(config.token_url)
        try:
            async with asyncio.timeout(timeout):
                form = urlencode(config.exchange_form(assertion)).encode("ascii")
                response = await self._context.http.fetch(
                    "POST", config.token_url, headers=_FORM, body=form, timeout=timeout
                )
        except (TimeoutError, HttpTimeout):
            return SourceError("Timeout", f"no answer from the token endpoint {token_url} within {duration(timeout)}")
        except HttpFailure as exc:
            return SourceError("ConnectionFailed", f"cannot reach the token endpoint {token_url} ({exc.reason})")
        return self._accept_token(response, config, token_url, now)

    def _accept_token(
        self, response: Answer, config: WorkloadIdentityConfig, token_url: str, now: float
    ) -> str | SourceError:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status == 200 and isinstance(body, dict) and isinstance(body.get("access_token"), str):
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
        retryable = response.status in _RETRYABLE_STATUS
        return SourceError(
            "TokenExchangeFailed",
            f"the workload-identity token exchange at {token_url} failed with HTTP {response.status}"
            f"{f' ({detail})' if detail else ''}: check the federated credential of client id "
            f"'{config.client_id}' in tenant '{config.tenant_id}'",
            retryable=retryable,
        )

    # ----------------------------------------------------------------------------------------------------------
    # Calls

    async def _call(self, access: _Access, subpath: str, query: str, timeout: float) -> Answer | SourceError:
        """One queue-service call: the answer of a success, else the error it makes."""
        path = f"{access.endpoint}/{self._spec.queue_name}{'/' + subpath if subpath else ''}"
        url = f"{path}?{query}"
        target = url
        authorization = ""
        if access.sas is not None:
            target = access.sas.apply(url)
        elif access.shared_key is None:
            started = time.monotonic()
            token = await self._bearer(timeout)
            if isinstance(token, SourceError):
                return token
            authorization = f"Bearer {token}"
            timeout = max(0.001, timeout - (time.monotonic() - started))  # the exchange spent part of it
        headers = {"x-ms-date": format_http_date(self._wall_clock()), "x-ms-version": self._api_version,
                   "User-Agent": USER_AGENT}
        if access.shared_key is not None:  # signs what goes out: the client adds only unsigned headers of its own
            authorization = access.shared_key.authorization("GET", url, headers)
        if authorization:
            headers["Authorization"] = authorization
        try:
            answer = await self._context.http.fetch("GET", target, headers=headers, timeout=timeout)
        except HttpTimeout:
            return SourceError("Timeout", f"no answer from {path} within {duration(timeout)}")
        except HttpFailure as exc:
            return SourceError("ConnectionFailed", f"cannot connect to {access.endpoint} ({exc.reason})")
        return self._classify(answer, access, path)

    def _classify(self, response: Answer, access: _Access, path: str) -> Answer | SourceError:
        status = response.status
        if 200 <= status < 300:
            return response
        code, azure_message = _error_details(response)
        retryable = status in _RETRYABLE_STATUS
        if access.how == "workload identity" and status in (401, 403) and code != "AuthorizationPermissionMismatch":
            self._token = None  # maybe revoked or for the wrong audience: exchange again next time
        message = self._explain(status, code or f"HTTP{status}", azure_message, access, path)
        return SourceError(code or f"HTTP{status}", message, retryable=retryable)

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
                    f"(srt=co to peek at messages too: countStrategy: visible and oldestAge: peek do){check}")
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



def _host(url: str) -> str:
    return urlsplit(url).hostname or url


def _parse_count(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def _read_peek(body: bytes) -> _Peeked | None:
    """The `<QueueMessage>`s of a Peek Messages answer and the earliest `InsertionTime`; None when it is not a
    message list."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    if root.tag != "QueueMessagesList":
        return None
    messages = [message for message in root if message.tag == "QueueMessage"]
    inserted = [_http_time(message.findtext("InsertionTime")) for message in messages]
    if not messages or None in inserted:
        return _Peeked(len(messages), None)
    # Only messages never delivered have done nothing but wait since they were put.
    waiting = [moment for message, moment in zip(messages, inserted, strict=True)
               if (message.findtext("DequeueCount") or "0").strip() == "0" and moment is not None]
    return _Peeked(len(messages), min(waiting) if waiting else None, delivered_before=not waiting)


def _http_time(value: str | None) -> float | None:
    """Epoch seconds of an RFC 1123 date (`Date`, `InsertionTime`); None when absent or unreadable."""
    if not value:
        return None
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # "-0000": UTC with no claim about the local zone
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _notes(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def _error_details(response: Answer) -> tuple[str, str]:
    """Azure's error code (header, or the XML body) and the first line of its message, scrubbed."""
    code = response.headers.get("x-ms-error-code", "")
    message = ""
    if response.body:
        try:
            root = ET.fromstring(response.body)
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
