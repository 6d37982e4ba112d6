"""controller/kube/lease.py against the fake API server: how long a lead lasts after a renewal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.kube.api import KubeApi, RequestOptions, load_configuration
from controller.kube.lease import LeaderElector
from tests.fakekube import FakeKube
from tests.operator_harness import NS

if TYPE_CHECKING:
    from typing_extensions import Unpack


class AnsweredLate(KubeApi):
    """Our client, whose lease writes' answers are read `lag` seconds (of the test's clock) after the server
    stored them: an event loop busy with other work, or a slow network on the way back."""

    def __init__(self, configuration: Any, clock: list[float], lag: float) -> None:
        super().__init__(configuration)
        self.clock = clock
        self.lag = lag

    async def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> dict[str, Any]:
        answer = await super().request(method, path, **options)
        if method in ("PUT", "POST") and "/leases" in path:
            self.clock[0] += self.lag
        return answer


async def test_a_lead_lasts_the_renew_deadline_from_when_the_renewal_was_sent_not_when_its_answer_was_read(
    fake_kube: FakeKube, kubeconfig: Path
) -> None:
    fake_kube.ensure_namespace(NS)
    clock = [1000.0]
    api = AnsweredLate(await load_configuration(str(kubeconfig)), clock, lag=0.5)
    try:
        # Taking the lease (a create), then renewing it (a replace: a restarted replica of the same identity).
        for sent in (1000.0, 1010.0):
            clock[0] = sent
            elector = LeaderElector(api, namespace=NS, name="queuescale-operator", identity="op-a",
                                    lease_duration=3.0, renew_deadline=2.0, retry_period=0.5,
                                    monotonic=lambda: clock[0])
            await elector.step()
            assert clock[0] == sent + 0.5, "the lease write was not answered late"
            assert elector.is_leader and elector.holds_lease()
            clock[0] = sent + 2.0
            assert elector.holds_lease()
            # Another replica may take the lease a lease duration after it saw this write, which the server
            # stored before the answer left: counted from the answer, the lead would run to sent + 2.5.
            clock[0] = sent + 2.01
            assert not elector.holds_lease()
        writes = [r.method for r in fake_kube.requests if "/leases" in r.path and r.method in ("POST", "PUT")]
        assert writes == ["POST", "PUT"]
        lease = fake_kube.get("coordination.k8s.io/v1", "Lease", "queuescale-operator", NS)
        assert lease["spec"]["holderIdentity"] == "op-a"
    finally:
        await api.close()
