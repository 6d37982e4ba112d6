"""Shared Key canonicalization pinned to Microsoft's rules, connection strings, SAS tokens and redaction."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from controller.sources.azure_auth import (
    DEV_ACCOUNT,
    DEV_ACCOUNT_KEY,
    BearerToken,
    CredentialError,
    SasToken,
    SharedKey,
    WorkloadIdentityConfig,
    canonicalized_headers,
    canonicalized_resource,
    format_http_date,
    parse_connection_string,
    scrub,
    string_to_sign,
    strip_query,
    token_refresh_time,
)

DATE = "Sat, 21 Nov 2026 17:00:00 GMT"
HEADERS = {"x-ms-date": DATE, "x-ms-version": "2025-11-05"}
# The eleven standard headers after the verb, all empty: Content-Encoding ... Range.
EMPTY_STANDARD = "\n" * 11
KEY = base64.b64encode(b"not-a-real-key-0123456789abcdef").decode()


def test_string_to_sign_get_path_style_carries_the_account_twice() -> None:
    url = "http://127.0.0.1:10001/devstoreaccount1/orders?comp=metadata"
    assert string_to_sign("GET", url, HEADERS, "devstoreaccount1") == (
        "GET\n" + EMPTY_STANDARD
        + f"x-ms-date:{DATE}\n"
        + "x-ms-version:2025-11-05\n"
        + "/devstoreaccount1/devstoreaccount1/orders\n"
        + "comp:metadata"
    )


def test_string_to_sign_head_host_style_sorts_lowercased_query_names() -> None:
    url = "https://acme.queue.core.windows.net/orders/messages?peekonly=true&NumOfMessages=32"
    assert string_to_sign("HEAD", url, HEADERS, "acme") == (
        "HEAD\n" + EMPTY_STANDARD
        + f"x-ms-date:{DATE}\n"
        + "x-ms-version:2025-11-05\n"
        + "/acme/orders/messages\n"
        + "numofmessages:32\n"
        + "peekonly:true"
    )


def test_string_to_sign_get_host_style_metadata() -> None:
    url = "https://acme.queue.core.windows.net/orders?comp=metadata"
    assert string_to_sign("get", url, HEADERS, "acme") == (
        f"GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{DATE}\nx-ms-version:2025-11-05\n/acme/orders\ncomp:metadata"
    )


def test_standard_headers_keep_their_order_and_zero_length_and_date_are_empty() -> None:
    headers = {
        "Content-Type": "text/plain",
        "Content-Length": "0",
        "Date": "Fri, 20 Nov 2026 00:00:00 GMT",  # ignored: x-ms-date is sent
        "Range": "bytes=0-9",
        "If-Match": '"etag"',
        "Content-MD5": "abc==",
        **HEADERS,
    }
    lines = string_to_sign("PUT", "https://acme.queue.core.windows.net/q", headers, "acme").split("\n")
    assert lines[:13] == [
        "PUT", "", "", "", "abc==", "text/plain", "", "", '"etag"', "", "", "bytes=0-9",
        f"x-ms-date:{DATE}",
    ]


def test_content_length_other_than_zero_is_signed() -> None:
    lines = string_to_sign("PUT", "https://a.queue.core.windows.net/q", {"Content-Length": "12"}, "a").split("\n")
    assert lines[3] == "12"


def test_canonicalized_headers_lowercase_sort_trim_and_fold_white_space() -> None:
    headers = {
        "X-MS-Version": "2025-11-05",
        "x-ms-meta-b": "  two   words\there ",
        "X-Ms-Date": DATE,
        "x-ms-meta-a": "1",
        "Accept": "application/xml",  # not x-ms-*: not canonicalized
    }
    assert canonicalized_headers(headers) == (
        f"x-ms-date:{DATE}\nx-ms-meta-a:1\nx-ms-meta-b:two words here\nx-ms-version:2025-11-05\n"
    )


def test_canonicalized_resource_decodes_and_joins_repeated_parameters() -> None:
    url = "https://acme.queue.core.windows.net/q?b=x%20y&A=2&a=1&comp=list"
    assert canonicalized_resource("acme", url) == "/acme/q\na:1,2\nb:x y\ncomp:list"


def test_canonicalized_resource_of_the_account_root_is_a_slash() -> None:
    assert canonicalized_resource("acme", "https://acme.queue.core.windows.net?comp=list") == "/acme/\ncomp:list"


def test_canonicalized_resource_keeps_the_path_encoded_as_sent() -> None:
    assert canonicalized_resource("acme", "https://h/acme%20x/q") == "/acme/acme%20x/q"


def test_signature_is_hmac_sha256_of_the_string_to_sign_with_the_decoded_key() -> None:
    url = "https://acme.queue.core.windows.net/orders?comp=metadata"
    key = SharedKey.from_base64("acme", KEY, where="test")
    expected = base64.b64encode(
        hmac.new(base64.b64decode(KEY), string_to_sign("GET", url, HEADERS, "acme").encode(), hashlib.sha256).digest()
    ).decode()
    assert key.authorization("GET", url, HEADERS) == f"SharedKey acme:{expected}"


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "http://127.0.0.1:10001/devstoreaccount1/orders?comp=metadata"),
        ("HEAD", "http://127.0.0.1:10001/devstoreaccount1/orders?comp=metadata"),
        ("GET", "https://devstoreaccount1.queue.core.windows.net/orders/messages?peekonly=true&numofmessages=32"),
        ("HEAD", "https://devstoreaccount1.queue.core.windows.net/orders?comp=metadata&timeout=5"),
    ],
)
def test_signature_agrees_with_the_azure_sdks_own_signer(method: str, url: str) -> None:
    # An independent implementation (the SDK's private policy; if it moves, follow it) signing the same request.
    from azure.core.pipeline import PipelineContext, PipelineRequest
    from azure.core.pipeline.transport import HttpRequest
    from azure.storage.queue._shared.authentication import SharedKeyCredentialPolicy

    request = HttpRequest(method, url, headers=dict(HEADERS))
    policy = SharedKeyCredentialPolicy(DEV_ACCOUNT, DEV_ACCOUNT_KEY)  # type: ignore[no-untyped-call]
    policy.on_request(PipelineRequest(request, PipelineContext(None)))  # type: ignore[no-untyped-call]
    ours = SharedKey.from_base64(DEV_ACCOUNT, DEV_ACCOUNT_KEY, where="test").authorization(method, url, HEADERS)
    assert ours == request.headers["Authorization"]


def test_http_date_is_rfc1123_gmt() -> None:
    assert format_http_date(1_795_107_600 + 2 * 86400) == "Sat, 21 Nov 2026 17:00:00 GMT"


def test_an_account_key_that_is_not_base64_is_refused_without_showing_it() -> None:
    with pytest.raises(CredentialError) as info:
        SharedKey.from_base64("acme", "not base64 !!secretvalue", where="Secret 'k' key 'key'")
    assert "Secret 'k' key 'key'" in str(info.value)
    assert "secretvalue" not in str(info.value)


# --------------------------------------------------------------------------------------------------------------
# Connection strings


def test_connection_string_with_account_key_and_suffix() -> None:
    conn = parse_connection_string(
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={KEY};EndpointSuffix=core.chinacloudapi.cn",
        where="w",
    )
    assert conn.queue_endpoint == "https://acme.queue.core.chinacloudapi.cn"
    assert conn.account == "acme"
    assert conn.shared_key is not None
    assert conn.shared_key.account == "acme"
    assert conn.sas is None


def test_connection_string_keys_are_case_insensitive_and_default_to_the_public_cloud() -> None:
    conn = parse_connection_string(f"accountname=acme;accountkey={KEY}", where="w")
    assert conn.queue_endpoint == "https://acme.queue.core.windows.net"


def test_connection_string_with_sas_and_queue_endpoint() -> None:
    conn = parse_connection_string(
        "QueueEndpoint=https://acme.queue.core.windows.net/;SharedAccessSignature=sv=2025-11-05&sp=r&sig=abc%2B=",
        where="w",
    )
    assert conn.queue_endpoint == "https://acme.queue.core.windows.net"
    assert conn.account is None
    assert conn.sas is not None
    assert conn.sas.apply("https://x/q?comp=metadata") == "https://x/q?comp=metadata&sv=2025-11-05&sp=r&sig=abc%2B="


def test_development_storage_means_azurite_on_the_well_known_port() -> None:
    conn = parse_connection_string("UseDevelopmentStorage=true", where="w")
    assert conn.development
    assert conn.queue_endpoint == "http://127.0.0.1:10001/devstoreaccount1"
    assert conn.account == DEV_ACCOUNT
    assert conn.shared_key == SharedKey.from_base64(DEV_ACCOUNT, DEV_ACCOUNT_KEY, where="w")


def test_development_storage_endpoint_can_be_moved_to_another_port() -> None:
    conn = parse_connection_string(
        "UseDevelopmentStorage=true;QueueEndpoint=http://127.0.0.1:41234/devstoreaccount1", where="w"
    )
    assert conn.queue_endpoint == "http://127.0.0.1:41234/devstoreaccount1"
    assert conn.shared_key is not None


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("just some text", "Name=Value"),
        ("AccountKey=abc=", "neither QueueEndpoint nor AccountName"),
        ("AccountName=acme", "neither AccountKey nor SharedAccessSignature"),
        ("QueueEndpoint=https://h/;AccountKey=c2VjcmV0", "AccountKey but no AccountName"),
        ("QueueEndpoint=ftp://h;SharedAccessSignature=sig=x", "not an http(s) URL"),
        ("AccountName=acme;SharedAccessSignature=sv=1&sp=r", "no sig= parameter"),
        ("AccountName=acme;AccountKey=%%%secretvalue", "not Base64"),
    ],
)
def test_a_bad_connection_string_says_what_is_missing_and_never_echoes_it(text: str, complaint: str) -> None:
    with pytest.raises(CredentialError) as info:
        parse_connection_string(text, where="Secret 'c' key 'cs'")
    assert complaint in str(info.value)
    assert "Secret 'c' key 'cs'" in str(info.value)
    assert "secretvalue" not in str(info.value)
    assert "c2VjcmV0" not in str(info.value)


# --------------------------------------------------------------------------------------------------------------
# SAS and redaction


def test_a_sas_may_be_given_with_a_leading_question_mark_or_as_a_whole_url() -> None:
    assert SasToken.parse("?sv=1&sig=abc", where="w").query == "sv=1&sig=abc"
    assert SasToken.parse("https://acme.queue.core.windows.net/q?sv=1&sig=abc", where="w").query == "sv=1&sig=abc"


def test_sas_expiry_is_readable() -> None:
    assert SasToken.parse("sv=1&se=2026-01-01T00%3A00%3A00Z&sig=abc", where="w").expiry == "2026-01-01T00:00:00Z"


def test_reprs_hide_keys_sas_tokens_and_bearer_tokens() -> None:
    key = SharedKey.from_base64("acme", KEY, where="w")
    sas = SasToken.parse("sv=1&sp=r&sig=SIGVALUE", where="w")
    conn = parse_connection_string(f"AccountName=acme;AccountKey={KEY}", where="w")
    token = BearerToken("TOKENVALUE", 100.0, 50.0)
    texts = [repr(key), str(key), repr(sas), str(sas), repr(conn), repr(token), repr([key, sas, conn, token])]
    for text in texts:
        assert KEY not in text
        assert "SIGVALUE" not in text
        assert "TOKENVALUE" not in text
    assert "acme" in repr(key)


def test_strip_query_and_scrub_remove_signatures() -> None:
    assert strip_query("https://h/q?sv=1&sig=abc#f") == "https://h/q"
    assert scrub("bad url https://h/q?sv=1&sig=abc%2B&se=x") == "bad url https://h/q?sv=1&sig=<redacted>&se=x"


# --------------------------------------------------------------------------------------------------------------
# Workload identity


def test_workload_identity_names_every_missing_variable() -> None:
    with pytest.raises(CredentialError) as info:
        WorkloadIdentityConfig.from_environment({"AZURE_CLIENT_ID": "c"})
    assert "AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE" in str(info.value)


def test_workload_identity_defaults_to_the_public_authority() -> None:
    config = WorkloadIdentityConfig.from_environment(
        {"AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t", "AZURE_FEDERATED_TOKEN_FILE": "/f"}
    )
    assert config.token_url == "https://login.microsoftonline.com/t/oauth2/v2.0/token"


def test_tokens_refresh_five_minutes_early_or_half_way_for_short_ones() -> None:
    assert token_refresh_time(1000.0, 3600.0) == 1000.0 + 3300.0
    assert token_refresh_time(1000.0, 120.0) == 1060.0
