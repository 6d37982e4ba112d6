"""AWS Signature Version 4, written out so the sources can sign requests sent over the shared HTTP client.

Only what a JSON-protocol POST (SQS's GetQueueAttributes) and a query-string GET need: canonical request, string
to sign, signing key, Authorization header. `AwsCredentials` hides its secret in its repr; nothing here logs.
Reference: "Create a signed AWS API request" in the IAM user guide; the tests pin AWS's published examples.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True)
class AwsCredentials:
    """An access key pair (and a session token for temporary credentials). The repr shows the key id only."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def _uri_encode(text: str, *, keep_slash: bool) -> str:
    """RFC 3986 encoding as SigV4 wants it: unreserved characters kept, everything else %XX (uppercase)."""
    return quote(text, safe="-_.~/" if keep_slash else "-_.~")


def canonical_uri(path: str) -> str:
    """The path, each segment URI-encoded (already-encoded input is encoded again, as non-S3 services expect)."""
    return _uri_encode(path or "/", keep_slash=True)


def canonical_query(query: str) -> str:
    """Query parameters sorted by name then value, names and values URI-encoded."""
    if not query:
        return ""
    pairs = []
    for part in query.split("&"):
        name, _, value = part.partition("=")
        pairs.append((_uri_encode(_unquote(name), keep_slash=False), _uri_encode(_unquote(value), keep_slash=False)))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def _unquote(text: str) -> str:
    from urllib.parse import unquote_plus

    return unquote_plus(text)


def canonical_headers(headers: Mapping[str, str]) -> tuple[str, str]:
    """(`name:value\\n` lines, `;`-joined names): names lowercased and sorted, values trimmed, runs of spaces folded."""
    folded = {name.strip().lower(): " ".join(value.strip().split()) for name, value in headers.items()}
    names = sorted(folded)
    return "".join(f"{name}:{folded[name]}\n" for name in names), ";".join(names)


def canonical_request(method: str, url: str, headers: Mapping[str, str], payload: bytes) -> tuple[str, str]:
    """The canonical request and its signed-headers list."""
    parts = urlsplit(url)
    header_lines, signed = canonical_headers(headers)
    request = "\n".join([
        method.upper(), canonical_uri(parts.path), canonical_query(parts.query), header_lines, signed,
        _sha256_hex(payload),
    ])
    return request, signed


def signing_key(secret_access_key: str, date: str, region: str, service: str) -> bytes:
    """kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")."""
    key = _hmac(("AWS4" + secret_access_key).encode("utf-8"), date)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def amz_date(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload: bytes,
    credentials: AwsCredentials,
    region: str,
    service: str,
    now: float,
) -> dict[str, str]:
    """`headers` plus host, x-amz-date, (x-amz-security-token) and Authorization, signing all of them."""
    stamp = amz_date(now)
    signed_headers = {**headers, "host": urlsplit(url).netloc, "x-amz-date": stamp}
    if credentials.session_token:
        signed_headers["x-amz-security-token"] = credentials.session_token
    request, signed = canonical_request(method, url, signed_headers, payload)
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join([ALGORITHM, stamp, scope, _sha256_hex(request.encode("utf-8"))])
    key = signing_key(credentials.secret_access_key, stamp[:8], region, service)
    signature = hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    signed_headers["Authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    return signed_headers
