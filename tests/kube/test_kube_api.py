"""controller/kube/api.py against the fake API server: plain JSON requests through the official asyncio client."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import urllib3
import yaml
from kubernetes import client, config

from controller.kube.api import KubeApi, KubeConfigurationError, core_path, load_configuration
from controller.kube.errors import TEXT_ERROR_MAX_SIZE, KubeError, StatedStatus, error_from_answer, error_from_status
from tests.azurite import free_port
from tests.fakekube import FakeKube
from tests.fakekube.tls import issue

ROOT = Path(__file__).resolve().parents[2]


async def test_a_request_reads_json_and_a_missing_object_is_a_404_kube_error(
    fake_kube: FakeKube, kubeconfig: Path
) -> None:
    fake_kube.ensure_namespace("shop")
    api = KubeApi(await load_configuration(str(kubeconfig)))
    try:
        namespace = await api.request("GET", "/api/v1/namespaces/shop")
        assert namespace["metadata"]["name"] == "shop"
        with pytest.raises(KubeError) as raised:
            await api.request("GET", core_path("secrets", "shop", "missing"))
        assert raised.value.status == 404 and not raised.value.retryable
    finally:
        await api.close()


def test_a_failed_answer_is_read_from_its_status_body_and_retry_after() -> None:
    body = b'{"kind": "Status", "reason": "TooManyRequests", "message": "slow down"}'
    error = error_from_answer(429, "Too Many Requests", body, {"Retry-After": "3"})
    assert (error.status, error.reason, error.message, error.retry_after) == (429, "TooManyRequests", "slow down", 3.0)
    assert error.retryable
    assert error.stated == StatedStatus("TooManyRequests", "slow down")


def test_an_answer_that_is_not_a_status_is_named_by_its_reason_phrase_and_quoted_only_in_stated() -> None:
    """A proxy's HTML page: the KubeError's own message stays the reason phrase (a body may hold anything, and
    logs print messages); only callers that word their own message quote the body, cut short."""
    page = "<html>" + "x" * 500 + "</html>"
    error = error_from_answer(502, "Bad Gateway", page.encode(), {"Retry-After": "soon"})
    assert (error.reason, error.message, error.retry_after) == ("Bad Gateway", "Bad Gateway", None)
    assert error.retryable
    assert error.stated.text == page[:TEXT_ERROR_MAX_SIZE] and not error.stated.reason
    assert error_from_answer(418, "", None, None).message == "HTTP 418"


def test_a_watch_error_event_is_read_like_a_failed_answer() -> None:
    expired = error_from_status({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})
    assert (expired.status, expired.reason, expired.message) == (410, "Expired", "too old")
    assert expired.stated == StatedStatus("Expired", "too old") and not expired.retryable
    bare = error_from_status({})
    assert (bare.status, bare.reason, bare.message) == (500, "WatchError", "an ERROR event") and bare.retryable


async def test_without_a_proxy_in_the_environment_no_request_looks_for_a_netrc_file(
    fake_kube: FakeKube, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # With trust_env, aiohttp reads ~/.netrc in a worker thread on every request, and a netrc naming the API
    # server's host makes every call fail ("Cannot combine AUTHORIZATION header with AUTH argument"). Without a
    # proxy to honour, the operator's client does not trust the environment.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    fake_kube.ensure_namespace("shop")
    api = KubeApi(await load_configuration(str(kubeconfig)))
    try:
        await api.request("GET", "/api/v1/namespaces/shop")
        assert api.api_client.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()


async def test_a_proxy_in_the_environment_is_still_honoured(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    api = KubeApi(await load_configuration(str(kubeconfig)))
    try:
        assert api.api_client.rest_client.pool_manager.trust_env is True
    finally:
        await api.close()


# ----------------------------------------------------------------------------------------------------------------
# TLS: the fake serves HTTPS like a real API server, so the clients' certificate checks are exercised


def kubeconfig_trusting_another_ca(fake_kube: FakeKube, path: Path) -> Path:
    """The fake's kubeconfig with the CA of another cluster: what a copied or stale kubeconfig looks like."""
    kubeconfig = fake_kube.kubeconfig()
    other_ca = issue("another-cluster-ca").ca_pem
    kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(other_ca).decode()
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


async def test_the_operator_client_verifies_the_api_server_certificate_against_the_kubeconfig_ca(
    fake_kube: FakeKube, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # client-go and the official clients check the server against the kubeconfig's certificate-authority-data
    # (k8s.io/client-go/transport/transport.go, TLSConfigFor); so must the operator's client.
    wrong = kubeconfig_trusting_another_ca(fake_kube, tmp_path / "kubeconfig")
    api = KubeApi(await load_configuration(str(wrong)))
    try:
        for _ in range(2):
            with pytest.raises(KubeError) as raised:
                await api.request("GET", "/api/v1/namespaces")
            assert raised.value.reason == "CertificateNotTrusted" and raised.value.status == 0
            assert "unable to get local issuer certificate" in raised.value.message
    finally:
        await api.close()
    reported = [r.getMessage() for r in caplog.records if "certificate is not trusted" in r.getMessage()]
    assert len(reported) == 1, "the log names the cause once, not on every retry"
    assert "certificate-authority-data" in reported[0]
    assert not [r for r in fake_kube.requests if r.path == "/api/v1/namespaces"], "no request got through"


def test_the_sync_client_refuses_a_server_its_kubeconfig_does_not_trust(fake_kube: FakeKube, tmp_path: Path) -> None:
    wrong = kubeconfig_trusting_another_ca(fake_kube, tmp_path / "kubeconfig")
    api_client = config.new_client_from_config(config_file=str(wrong))
    api_client.configuration.retries = 0
    try:
        with pytest.raises(urllib3.exceptions.MaxRetryError) as raised:
            client.CoreV1Api(api_client).list_namespace(_request_timeout=5)
        assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value.reason)
    finally:
        api_client.close()


def test_the_operator_with_an_untrusted_api_server_says_why_and_never_becomes_ready(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    wrong = kubeconfig_trusting_another_ca(fake_kube, tmp_path / "kubeconfig")
    health_port = free_port()
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        operator = subprocess.Popen(
            [sys.executable, "-m", "controller", "run", "--kubeconfig", str(wrong), "--bind-address", "127.0.0.1",
             "--metrics-port", str(free_port()), "--health-port", str(health_port)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            deadline = time.monotonic() + 20
            while "certificate is not trusted" not in log.read_text() and time.monotonic() < deadline:
                assert operator.poll() is None, log.read_text()
                time.sleep(0.1)
            ready = httpx.get(f"http://127.0.0.1:{health_port}/readyz", timeout=2).status_code
        finally:
            operator.terminate()
            operator.wait(timeout=20)
    text = log.read_text()
    assert "ERROR controller.kube.api: the API server's TLS certificate is not trusted (unable to get local issuer " \
           "certificate): check the certificate authority of the kubeconfig (certificate-authority-data)" in text
    assert "Traceback" not in text
    assert ready == 503  # the rules were never listed: a rollout waits instead of replacing a working operator


# --------------------------------------------------------------------------------------------------------------
# No configuration: say where we looked (client-go's clientcmd looks at the --kubeconfig flag, then $KUBECONFIG,
# then ~/.kube/config: k8s.io/client-go/tools/clientcmd/loader.go, ClientConfigLoadingRules; in a pod
# rest.InClusterConfig reads KUBERNETES_SERVICE_HOST/PORT and the service account token).


def _no_configuration_anywhere(monkeypatch: pytest.MonkeyPatch, home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    environ["HOME"] = str(home)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(home))
    return environ


async def test_no_configuration_names_every_place_looked_and_the_remedy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_configuration_anywhere(monkeypatch, tmp_path)
    with pytest.raises(KubeConfigurationError) as raised:
        await load_configuration()
    message = str(raised.value)
    for looked in ("--kubeconfig", "$KUBECONFIG: not set", f"{tmp_path}/.kube/config (no such file)",
                   "in-cluster service account", "Give --kubeconfig FILE, set KUBECONFIG"):
        assert looked in message
    assert "current-context" not in message


async def test_a_kubeconfig_flag_naming_no_file_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_configuration_anywhere(monkeypatch, tmp_path)
    with pytest.raises(KubeConfigurationError, match=r"^--kubeconfig nope: no such file; "):
        await load_configuration("nope")


async def test_kubeconfig_env_lists_files_and_the_first_existing_one_is_read(
    fake_kube: FakeKube, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_configuration_anywhere(monkeypatch, tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}{os.pathsep}{kubeconfig}")
    configuration = await load_configuration()
    assert configuration.host == fake_kube.url


async def test_a_kubeconfig_that_is_not_one_names_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_configuration_anywhere(monkeypatch, tmp_path)
    empty = tmp_path / "empty"
    empty.write_text("{}\n")
    with pytest.raises(KubeConfigurationError, match=rf"^{empty}: not a usable kubeconfig: "):
        await load_configuration(str(empty))


@pytest.mark.parametrize("args", [[], ["--kubeconfig", "nope"]])
def test_run_without_a_configuration_exits_2_with_what_to_do_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]
) -> None:
    environ = _no_configuration_anywhere(monkeypatch, tmp_path)
    done = subprocess.run([sys.executable, "-m", "controller", "run", "--metrics-port", "0", "--health-port", "0",
                           *args], cwd=Path(__file__).resolve().parents[2], env=environ, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "Config not found" not in done.stderr
    assert "Expected key current-context" not in done.stderr
    assert "--kubeconfig" in done.stderr
