"""The workload-identity token exchange, against a token endpoint and a queue endpoint served on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

from controller.model.sources.azure_queue import AzureQueueSource
from controller.sources.azure_auth import JWT_BEARER, STORAGE_SCOPE
from controller.sources.azure_queue import AzureQueuePoller
from controller.sources.base import SourceContext
from tests.azure_answers import queue_of
from tests.helpers import DictSecrets, poll_once
from tests.loopback import LoopbackServer, Recorded, Reply
from tests.transports import http_client

TENANT = "tenant-1"
CLIENT = "client-1"
TOKEN_ROUTE = f"/{TENANT}/oauth2/v2.0/token"


class FakeIdentityPlatform:
    """Issues token-1, token-2, ... and serves a queue of 9 messages (its count, and its front message to a peek) to
    whoever shows the latest token."""

    def __init__(self, expires_in: int = 3600) -> None:
        self.expires_in = expires_in
        self.issued = 0
        self.queue_status = 200
        self.queue_code = ""
        self.queue = queue_of(9, waited=2.0)

    def __call__(self, request: Recorded) -> Reply:
        if request.method == "POST" and request.route == TOKEN_ROUTE:
            self.issued += 1
            body = {"access_token": f"token-{self.issued}", "expires_in": self.expires_in, "token_type": "Bearer"}
            return Reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode())
        if (request.route in ("/acct/orders", "/acct/orders/messages")
                and request.headers.get("authorization") == f"Bearer token-{self.issued}"):
            if self.queue_status != 200:
                return Reply(self.queue_status, {"x-ms-error-code": self.queue_code})
            return self.queue(request)
        return Reply(401, {"x-ms-error-code": "InvalidAuthenticationInfo"})


def identity_source(server: LoopbackServer) -> AzureQueueSource:
    return AzureQueueSource(type="azure-queue", queue_name="orders", account_name="acct", identity="workload",
                            endpoint=f"{server.url}/acct")


def environment(server: LoopbackServer, token_file: Path) -> dict[str, str]:
    return {
        "AZURE_CLIENT_ID": CLIENT,
        "AZURE_TENANT_ID": TENANT,
        "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
        "AZURE_AUTHORITY_HOST": f"{server.url}/",
    }


def token_posts(server: LoopbackServer) -> list[Recorded]:
    return [r for r in server.requests if r.method == "POST"]


async def test_exchange_sends_the_federated_token_caches_the_result_and_rereads_the_file(tmp_path: Path) -> None:
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("assertion-1\n")
    platform = FakeIdentityPlatform(expires_in=3600)
    now = [1_000_000.0]
    with LoopbackServer(platform) as server:
        async with http_client() as http:
            context = SourceContext(http, DictSecrets(), now=lambda: now[0])
            poller = AzureQueuePoller(identity_source(server), context, environ=environment(server, token_file))

            first = await poller.poll(5.0)
            assert (first.count, first.error, first.note) == (9, None, "")
            assert first.oldest_age is not None and 1.0 <= first.oldest_age <= 4.0  # the peek took the same token
            posts = token_posts(server)
            assert len(posts) == 1
            assert posts[0].form == {
                "grant_type": "client_credentials",
                "client_id": CLIENT,
                "scope": STORAGE_SCOPE,
                "client_assertion_type": JWT_BEARER,
                "client_assertion": "assertion-1",
            }
            assert server.requests[-1].headers["authorization"] == "Bearer token-1"
            assert server.requests[-1].headers["x-ms-version"] >= "2017-11-09"

            token_file.write_text("assertion-2\n")  # the kubelet rotated it
            now[0] += 3000  # still 10 minutes before expiry: cached
            assert (await poller.poll(5.0)).count == 9
            assert len(token_posts(server)) == 1

            now[0] += 400  # within five minutes of expiry: a new exchange, with the new file contents
            assert (await poller.poll(5.0)).count == 9
            posts = token_posts(server)
            assert len(posts) == 2
            assert posts[1].form["client_assertion"] == "assertion-2"
            assert server.requests[-1].headers["authorization"] == "Bearer token-2"
            await poller.aclose()


async def test_a_rejected_exchange_says_which_client_and_the_aadsts_code(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("assertion-secret-value")

    def refuse(_request: Recorded) -> Reply:
        body = {"error": "invalid_client", "error_description": "AADSTS700016: Application not found. Trace ID: x"}
        return Reply(400, {"Content-Type": "application/json"}, json.dumps(body).encode())

    with LoopbackServer(refuse) as server:
        reading = await poll_once(identity_source(server), DictSecrets(), environ=environment(server, token_file))
    assert reading.error is not None
    assert reading.error.code == "TokenExchangeFailed"
    assert not reading.error.retryable
    assert "invalid_client AADSTS700016" in reading.error.message
    assert f"client id '{CLIENT}'" in reading.error.message
    assert "assertion-secret-value" not in reading.error.message
    assert len(server.requests) == 1


async def test_missing_webhook_variables_are_named() -> None:
    with LoopbackServer(FakeIdentityPlatform()) as server:
        reading = await poll_once(identity_source(server), DictSecrets(), environ={"AZURE_CLIENT_ID": CLIENT})
    assert reading.error is not None
    assert reading.error.code == "WorkloadIdentityNotConfigured"
    assert "AZURE_TENANT_ID" in reading.error.message
    assert server.requests == []


async def test_an_unreadable_token_file_is_named(tmp_path: Path) -> None:
    with LoopbackServer(FakeIdentityPlatform()) as server:
        environ = environment(server, tmp_path / "missing")
        reading = await poll_once(identity_source(server), DictSecrets(), environ=environ)
    assert reading.error is not None
    assert reading.error.code == "WorkloadIdentityNotConfigured"
    assert str(tmp_path / "missing") in reading.error.message


async def test_an_identity_without_the_role_is_told_which_role_to_assign(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("assertion")
    platform = FakeIdentityPlatform()
    platform.queue_status, platform.queue_code = 403, "AuthorizationPermissionMismatch"
    with LoopbackServer(platform) as server:
        reading = await poll_once(identity_source(server), DictSecrets(), environ=environment(server, token_file))
    assert reading.error is not None
    assert reading.error.code == "AuthorizationPermissionMismatch"
    assert "Storage Queue Data Reader" in reading.error.message
    assert f"client id '{CLIENT}'" in reading.error.message
