"""controller/kube/api.py against the fake API server: plain JSON requests through the official asyncio client."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.kube.api import KubeApi, KubeError, core_path, load_configuration
from tests.fakekube import FakeKube


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
