"""What a failed Kubernetes API call means: the one map from an answer (or its absence) to a `KubeError`.

Every call the operator makes goes through `KubeApi`, so this is the only place that reads a failed answer: its
HTTP status, the `metav1.Status` body the API server sends with it (reason and message), and Retry-After; and the
Status a watch sends as an ERROR event. Callers
switch on `status` (and `retryable`); the scale target words its own messages from what the Status said
(`stated`), because "not found: fix scaleTargetRef" helps a user more than the server's sentence alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

# How much of an answer that is not a Status (a proxy's HTML page, say) a message quotes.
TEXT_ERROR_MAX_SIZE = 200


@dataclass(frozen=True)
class StatedStatus:
    """What a failed answer's body said: the Status's reason and message ("" where it said none), or, for a body
    that is not JSON, its first TEXT_ERROR_MAX_SIZE characters as `text`."""

    reason: str = ""
    message: str = ""
    text: str = ""


class KubeError(Exception):
    """A failed API call: HTTP `status` (0 for no answer), the Status `reason`, and a message without secrets.

    `reason` and `message` fall back to the HTTP reason phrase (and then to `Unknown` / `HTTP <status>`) when the
    answer carried no Status; `stated` holds only what the body said."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None, *,
                 stated: StatedStatus | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.stated = stated or StatedStatus()

    @property
    def retryable(self) -> bool:
        """Worth asking again: no answer, a timeout, throttling, or the server's own failure."""
        return self.status in (0, 408, 429) or self.status >= 500


def error_from_answer(status: int, reason_phrase: str, body: object, headers: Mapping[str, str] | None) -> KubeError:
    """The KubeError for an answer with a failing HTTP `status`, its reason phrase, body and headers."""
    stated = stated_status(body)
    return KubeError(status, stated.reason or reason_phrase or "Unknown",
                     stated.message or reason_phrase or f"HTTP {status}", retry_after(headers), stated=stated)


def error_from_status(status: Mapping[str, object]) -> KubeError:
    """The KubeError for a Status object that came as a watch's ERROR event (410 when the version expired)."""
    code = status.get("code")
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    return KubeError(code if isinstance(code, int) else 500, reason or "WatchError", message or "an ERROR event",
                     stated=StatedStatus(reason, message))


def stated_status(body: object) -> StatedStatus:
    """The reason and message of the Status body the API server sent, when it sent one."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body:
        return StatedStatus()
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return StatedStatus(text=body[:TEXT_ERROR_MAX_SIZE])
    if not isinstance(parsed, dict):
        return StatedStatus()
    return StatedStatus(str(parsed.get("reason") or ""), str(parsed.get("message") or ""))


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The seconds a 429 (or 503) asks the client to wait, when its Retry-After header gives a number."""
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
