"""Rule status writes: a merge patch of the QueueScaler's status subresource (controller/report/status.py builds
what it says)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.kube.api import MERGE_PATCH, KubeApi, rules_path

# A status write retried a little (429 after Retry-After, 5xx, no answer), not for long: the next tick writes a
# newer status anyway.
STATUS_WRITE_ATTEMPTS = 3


async def write_status(api: KubeApi, namespace: str, name: str, status: Mapping[str, Any],
                       previous: Mapping[str, Any] | None) -> None:
    """Make the rule's status `status`: keys `previous` (the status last written) has and `status` has not are set
    to null, since a merge patch keeps every key it does not name. Raises KubeError."""
    patch = dict(status)
    for gone in set(previous or {}) - set(status):
        patch[gone] = None
    await api.request_with_retries("PATCH", rules_path(namespace, name, "status"), body={"status": patch},
                                   content_type=MERGE_PATCH, attempts=STATUS_WRITE_ATTEMPTS)
