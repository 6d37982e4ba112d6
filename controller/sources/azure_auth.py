"""How the azure-queue source proves who it is: Shared Key signing, SAS tokens, connection strings, and the
Microsoft Entra workload-identity token exchange.

Everything here that holds a secret (an account key, a SAS, a bearer token, a whole connection string) has a
`__repr__` that hides it, and every error message is built from names, never from values, so a secret cannot
reach a log line, an exception, a status condition or a metric by accident.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit, urlunsplit

# Azurite's well-known development account (public, documented by Microsoft; not a secret).
DEV_ACCOUNT = "devstoreaccount1"
DEV_ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEV_QUEUE_ENDPOINT = f"http://127.0.0.1:10001/{DEV_ACCOUNT}"

STORAGE_SCOPE = "https://storage.azure.com/.default"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
DEFAULT_AUTHORITY = "https://login.microsoftonline.com/"

# The standard headers of the string-to-sign, in Microsoft's order (after the verb).
_SIGNED_STANDARD_HEADERS = (
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
)
_WHITESPACE = re.compile(r"\s+")
_SIG_PARAM = re.compile(r"(?i)(sig=)[^&\s'\"]*")


class CredentialError(ValueError):
    """A credential that cannot be used as given. The message names what is wrong, never the value."""


# --------------------------------------------------------------------------------------------------------------
# Redaction


def strip_query(url: str) -> str:
    """The URL without its query or fragment: what may appear in a message (a SAS lives in the query)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def scrub(text: str) -> str:
    """Text from elsewhere (a server's message) with any SAS signature blanked, in case it echoes one."""
    return _SIG_PARAM.sub(r"\1<redacted>", text)


# --------------------------------------------------------------------------------------------------------------
# Shared Key


def format_http_date(seconds: float) -> str:
    """RFC 1123 date in GMT, as `x-ms-date` wants it."""
    return email.utils.formatdate(seconds, usegmt=True)


def canonicalized_headers(headers: Mapping[str, str]) -> str:
    """Every `x-ms-*` header as `name:value\\n`: names lowercased and sorted, values trimmed, white space folded.

    A plain code-point sort matches the service's collation for names of lowercase letters, digits and dashes,
    which is all this source sends (x-ms-date, x-ms-version); names with `_` would need the service's own order.
    """
    lines = []
    for name, value in headers.items():
        lowered = name.strip().lower()
        if lowered.startswith("x-ms-"):
            lines.append((lowered, _WHITESPACE.sub(" ", value.strip())))
    return "".join(f"{name}:{value}\n" for name, value in sorted(lines))


def canonicalized_resource(account: str, url: str) -> str:
    """`/account/path` (the encoded path as sent), then `\\nname:value` per query parameter.

    Parameter names are lowercased and sorted; names and values are URL-decoded; several values of one name are
    sorted and joined with commas. A path-style URL (Azurite) therefore carries the account twice.
    """
    parts = urlsplit(url)
    resource = f"/{account}{parts.path or '/'}"
    params: dict[str, list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        params.setdefault(name.lower(), []).append(value)
    for name in sorted(params):
        resource += f"\n{name}:{','.join(sorted(params[name]))}"
    return resource


def string_to_sign(method: str, url: str, headers: Mapping[str, str], account: str) -> str:
    """The Shared Key string-to-sign (service versions 2009-09-19 and later) for one request."""
    lowered = {name.lower(): value for name, value in headers.items()}
    standard = []
    for name in _SIGNED_STANDARD_HEADERS:
        value = lowered.get(name, "")
        if name == "content-length" and value == "0":
            value = ""  # versions 2015-02-21 and later sign an empty Content-Length for a zero-length body
        if name == "date" and "x-ms-date" in lowered:
            value = ""
        standard.append(value)
    return "\n".join([method.upper(), *standard]) + "\n" + canonicalized_headers(headers) + canonicalized_resource(
        account, url
    )


@dataclass(frozen=True, repr=False)
class SharedKey:
    """An account name and its key; signs requests. The key never leaves this object except as a signature."""

    account: str
    key: bytes = field(compare=False)

    @classmethod
    def from_base64(cls, account: str, key: str, *, where: str) -> SharedKey:
        """Decode the Base64 key; `where` names its origin for the error (e.g. "Secret 'k' key 'account-key'")."""
        try:
            decoded = base64.b64decode(key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise CredentialError(f"the account key in {where} is not Base64") from None
        if not decoded:
            raise CredentialError(f"the account key in {where} is empty")
        return cls(account, decoded)

    def signature(self, method: str, url: str, headers: Mapping[str, str]) -> str:
        digest = hmac.new(self.key, string_to_sign(method, url, headers, self.account).encode("utf-8"), hashlib.sha256)
        return base64.b64encode(digest.digest()).decode("ascii")

    def authorization(self, method: str, url: str, headers: Mapping[str, str]) -> str:
        """The `Authorization` header value for a request that will carry exactly `headers`."""
        return f"SharedKey {self.account}:{self.signature(method, url, headers)}"

    def __repr__(self) -> str:
        return f"SharedKey(account={self.account!r}, key=<redacted>)"


# --------------------------------------------------------------------------------------------------------------
# SAS


@dataclass(frozen=True, repr=False)
class SasToken:
    """A shared access signature (account or service), appended to the URL as given."""

    query: str = field(compare=False)

    @classmethod
    def parse(cls, text: str, *, where: str) -> SasToken:
        token = text.strip()
        if "?" in token:  # a whole SAS URL was pasted: keep its query
            token = token.split("?", 1)[1]
        token = token.lstrip("?&")
        names = {name.lower() for name, _ in parse_qsl(token, keep_blank_values=True)}
        if "sig" not in names:
            raise CredentialError(f"the SAS in {where} has no sig= parameter (paste the token, e.g. sv=...&sig=...)")
        return cls(token)

    def apply(self, url: str) -> str:
        return f"{url}{'&' if '?' in url else '?'}{self.query}"

    @property
    def expiry(self) -> str | None:
        """The `se` (expiry) parameter, if any: not secret, and worth saying when the SAS is rejected."""
        for name, value in parse_qsl(self.query):
            if name.lower() == "se":
                return value
        return None

    def __repr__(self) -> str:
        return "SasToken(<redacted>)"


# --------------------------------------------------------------------------------------------------------------
# Connection strings


@dataclass(frozen=True, repr=False)
class ConnectionString:
    """What a storage connection string says about the queue service: where it is and how to sign."""

    queue_endpoint: str
    account: str | None
    shared_key: SharedKey | None = None
    sas: SasToken | None = None
    development: bool = False

    def __repr__(self) -> str:
        auth = "shared key" if self.shared_key else "SAS" if self.sas else "none"
        return f"ConnectionString(queue_endpoint={self.queue_endpoint!r}, account={self.account!r}, auth={auth})"


def parse_connection_string(text: str, *, where: str) -> ConnectionString:
    """Parse `Key=Value;...`. Keys are case-insensitive; values may hold '=' (Base64, SAS).

    `UseDevelopmentStorage=true` gives Azurite's well-known account, key and endpoint; any `AccountName`,
    `AccountKey` or `QueueEndpoint` next to it overrides the default (e.g. to reach Azurite on another port).
    """
    settings: dict[str, str] = {}
    for part in text.strip().split(";"):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise CredentialError(f"the connection string in {where} is not a list of Name=Value pairs")
        settings[name.strip().lower()] = value.strip()

    development = settings.get("usedevelopmentstorage", "").lower() == "true"
    if development:
        settings.setdefault("accountname", DEV_ACCOUNT)
        if "sharedaccesssignature" not in settings:
            settings.setdefault("accountkey", DEV_ACCOUNT_KEY)
        settings.setdefault("queueendpoint", DEV_QUEUE_ENDPOINT)

    account = settings.get("accountname") or None
    endpoint = settings.get("queueendpoint")
    if not endpoint:
        if account is None:
            raise CredentialError(
                f"the connection string in {where} has neither QueueEndpoint nor AccountName"
            )
        protocol = settings.get("defaultendpointsprotocol", "https").lower()
        if protocol not in ("http", "https"):
            raise CredentialError(f"the connection string in {where} has a DefaultEndpointsProtocol not http(s)")
        suffix = settings.get("endpointsuffix", "core.windows.net")
        endpoint = f"{protocol}://{account}.queue.{suffix}"
    if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", endpoint):
        raise CredentialError(f"the connection string in {where} has a QueueEndpoint that is not an http(s) URL")
    endpoint = endpoint.rstrip("/")

    shared_key = sas = None
    if settings.get("accountkey"):
        if account is None:
            raise CredentialError(f"the connection string in {where} has AccountKey but no AccountName")
        shared_key = SharedKey.from_base64(account, settings["accountkey"], where=where)
    elif settings.get("sharedaccesssignature"):
        sas = SasToken.parse(settings["sharedaccesssignature"], where=where)
    else:
        raise CredentialError(f"the connection string in {where} has neither AccountKey nor SharedAccessSignature")
    return ConnectionString(endpoint, account, shared_key, sas, development)


# --------------------------------------------------------------------------------------------------------------
# Workload identity


@dataclass(frozen=True, repr=False)
class BearerToken:
    """An access token for Azure Storage and when it stops being worth using (seconds since the epoch)."""

    value: str = field(compare=False)
    expires_at: float
    refresh_at: float

    def __repr__(self) -> str:
        return f"BearerToken(<redacted>, expires_at={self.expires_at:.0f})"


@dataclass(frozen=True)
class WorkloadIdentityConfig:
    """What the AKS workload-identity webhook injects into the pod (no secret: the assertion is read per use)."""

    client_id: str
    tenant_id: str
    token_file: str
    authority_host: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> WorkloadIdentityConfig:
        names = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE")
        missing = [name for name in names if not environ.get(name)]
        if missing:
            raise CredentialError(
                f"workload identity needs {', '.join(missing)} in the environment: label the pod "
                "azure.workload.identity/use=true and give it a service account annotated with "
                "azure.workload.identity/client-id"
            )
        return cls(
            client_id=environ["AZURE_CLIENT_ID"],
            tenant_id=environ["AZURE_TENANT_ID"],
            token_file=environ["AZURE_FEDERATED_TOKEN_FILE"],
            authority_host=environ.get("AZURE_AUTHORITY_HOST") or DEFAULT_AUTHORITY,
        )

    @property
    def token_url(self) -> str:
        return f"{self.authority_host.rstrip('/')}/{self.tenant_id}/oauth2/v2.0/token"

    def exchange_form(self, assertion: str) -> dict[str, str]:
        """The form body of the client-credentials exchange with the federated token as the assertion."""
        return {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "scope": STORAGE_SCOPE,
            "client_assertion_type": JWT_BEARER,
            "client_assertion": assertion,
        }


def token_refresh_time(now: float, expires_in: float) -> float:
    """When to fetch a new token: five minutes before expiry, or half-way through a short-lived one."""
    return now + max(0.0, expires_in - min(300.0, expires_in / 2))
