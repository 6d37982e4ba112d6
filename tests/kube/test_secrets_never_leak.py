"""No account key, SAS signature, bearer token or connection string in any message, log line, repr or output."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import parse_qsl

import pytest
from azure.storage.queue import QueueSasPermissions, generate_queue_sas

from controller.commands.check import NamespaceSecrets, SecretStore
from controller.model.fields import SecretKeyRef
from controller.model.sources.azure_queue import AzureQueueSource
from controller.net.http import polling_client
from controller.sources.azure_auth import CredentialError, SasToken, SharedKey, parse_connection_string
from controller.sources.azure_queue import AzureQueuePoller
from controller.sources.base import SourceContext
from controller.sources.retries import RetryPolicy
from tests.azurite import Azurite
from tests.commandline import run_check, write
from tests.helpers import WRONG_KEY, DictSecrets, in_one_hour, key_source, new_queue, unique_queue

FAST = RetryPolicy(request_timeout=0.5, first_delay=0.01, max_delay=0.05, max_attempts=2)


def sig_of(sas: str) -> str:
    return dict(parse_qsl(sas))["sig"]


def forbidden_values(azurite: Azurite, sases: list[str]) -> list[str]:
    values = [azurite.key, WRONG_KEY, azurite.connection_string]
    for sas in sases:
        values += [sas, sig_of(sas), sas.split("sig=", 1)[1].split("&", 1)[0]]
    return values


async def test_no_secret_in_readings_reprs_or_logs(azurite: Azurite, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    queue = new_queue(azurite)
    read_sas = generate_queue_sas(azurite.account, queue.queue_name, azurite.key,
                                  permission=QueueSasPermissions(read=True), expiry=in_one_hour())
    add_sas = generate_queue_sas(azurite.account, queue.queue_name, azurite.key,
                                 permission=QueueSasPermissions(add=True), expiry=in_one_hour())
    secrets = DictSecrets({
        ("storage", "account-key"): WRONG_KEY,
        ("good", "account-key"): azurite.key,
        ("conn", "cs"): azurite.connection_string,
        ("read", "sas"): read_sas,
        ("add", "sas"): add_sas,
        ("broken", "sas"): read_sas.replace("sig=", "sig=AAAA"),
    })

    def sas_spec(ref: str, queue_name: str, endpoint: str = azurite.endpoint) -> AzureQueueSource:
        return AzureQueueSource(type="azure-queue", queue_name=queue_name, account_name=azurite.account,
                                endpoint=endpoint, sas_secret_ref=SecretKeyRef(ref, "sas"))

    specs = [
        key_source(azurite, queue.queue_name),  # wrong key: 403
        AzureQueueSource(type="azure-queue", queue_name=unique_queue(), account_name=azurite.account,
                         endpoint=azurite.endpoint, account_key_secret_ref=SecretKeyRef("good", "account-key")),
        AzureQueueSource(type="azure-queue", queue_name=unique_queue(),
                         connection_secret_ref=SecretKeyRef("conn", "cs")),
        sas_spec("read", queue.queue_name),  # works: the SAS rides in the URL
        sas_spec("add", queue.queue_name),  # 403 AuthorizationPermissionMismatch
        sas_spec("broken", queue.queue_name),  # 403 AuthenticationFailed
        sas_spec("read", "orders", endpoint="http://127.0.0.1:9/devstoreaccount1"),  # connection refused
    ]
    texts: list[str] = []
    async with polling_client(timeout=5.0) as http:
        context = SourceContext(http, secrets)
        for spec in specs:
            poller = AzureQueuePoller(spec, context, retry=FAST)
            reading = await poller.poll(2.0)
            texts += [repr(poller), repr(spec), repr(reading), str(reading.error or "")]
    errors = [t for t in texts if "error=SourceError" in t]
    assert len(errors) == 6  # the leak check below looked at real failures

    texts += [r.getMessage() for r in caplog.records]
    texts += [caplog.text]
    texts += [repr(SharedKey.from_base64("a", azurite.key, where="w")), repr(SasToken.parse(read_sas, where="w"))]
    texts += [repr(parse_connection_string(azurite.connection_string, where="w"))]
    store = SecretStore({(None, "s"): {"k": azurite.key}})
    texts += [repr(store), repr(NamespaceSecrets(store, "ns"))]

    for value in forbidden_values(azurite, [read_sas, add_sas]):
        for text in texts:
            assert value not in text


def test_no_secret_in_credential_errors(azurite: Azurite) -> None:
    bad_strings = [
        f"AccountKey={azurite.key}",  # no account, no endpoint
        f"QueueEndpoint=https://h/;AccountKey={azurite.key}",  # no account name
        f"AccountName=a;AccountKey={azurite.key}!",  # not Base64
        f"{azurite.connection_string};junk",
    ]
    for text in bad_strings:
        with pytest.raises(CredentialError) as info:
            parse_connection_string(text, where="Secret 'c' key 'cs'")
        assert azurite.key not in str(info.value)
        assert azurite.key not in repr(info.value)


def test_no_secret_in_check_output(azurite: Azurite, tmp_path: Path) -> None:
    queue = new_queue(azurite)
    sas = generate_queue_sas(azurite.account, queue.queue_name, azurite.key,
                             permission=QueueSasPermissions(add=True), expiry=in_one_hour())
    rules = write(tmp_path, "rules.yaml", f"""
apiVersion: queuescale.io/v1alpha1
kind: QueueScaler
metadata: {{name: leaks}}
spec:
  scaleTargetRef: {{name: w}}
  maxReplicas: 3
  pollingInterval: 3s
  sources:
    - {{type: azure-queue, queueName: {queue.queue_name}, accountName: {azurite.account},
        endpoint: "{azurite.endpoint}", sasSecretRef: {{name: q, key: sas}}}}
    - {{type: azure-queue, queueName: {queue.queue_name}, accountName: {azurite.account},
        endpoint: "{azurite.endpoint}", accountKeySecretRef: {{name: q, key: key}}}}
""")
    for extra in ([], ["--json"]):
        done = run_check(rules, *extra, env={"QUEUESCALE_SECRET_Q_SAS": sas, "QUEUESCALE_SECRET_Q_KEY": WRONG_KEY})
        assert done.returncode == 1
        assert "AuthorizationPermissionMismatch" in done.stdout
        assert "AuthenticationFailed" in done.stdout
        for value in forbidden_values(azurite, [sas]):
            assert value not in done.stdout + done.stderr
