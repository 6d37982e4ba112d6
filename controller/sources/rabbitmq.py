"""RabbitMQ: the `rabbitmq` kind's poller.

One call to the management HTTP API, `GET {managementURL}/api/queues/{vhost}/{queue}` with HTTP basic auth, over
the shared HTTP client (`SourceContext.http`); the count is `messages_ready`, plus `messages_unacknowledged` with
`count: readyAndUnacked`. The management plugin refreshes these figures every `collect_statistics_interval`
(5 s by default), so a count may be that old.

Transient failures (5xx, 429, timeouts, refused connections) are retried within the poll's budget; 401, 403 and
404 fail at once. Messages name the URL, vhost, queue, user and Secret, never the password.
"""

from __future__ import annotations

import base64
from urllib.parse import quote

from controller.model.readings import SourceError, SourceReading
from controller.model.secrets import SecretUnavailable
from controller.model.sources.base import SourceSpec
from controller.model.sources.rabbitmq import TYPE, RabbitMqSource
from controller.model.textfmt import duration
from controller.net.http import Answer, HttpFailure, HttpTimeout
from controller.sources.base import Poller, SourceContext

_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class RabbitMqPoller(Poller[RabbitMqSource, dict[str, str], int]):
    """Polls one queue through the management API; the password is read from its Secret on every poll."""

    kind = TYPE

    def __repr__(self) -> str:
        return f"RabbitMqPoller(queue={self._spec.queue_label!r}, url={self._spec.management_url!r})"

    @property
    def _url(self) -> str:
        spec = self._spec
        return f"{spec.management_url}/api/queues/{quote(spec.vhost, safe='')}/{quote(spec.queue, safe='')}"

    async def prepare(self, deadline: float) -> dict[str, str] | SourceReading:  # noqa: ARG002
        """The request's headers: HTTP basic auth with the user and the password from its Secret."""
        password = ""
        ref = self._spec.password_secret_ref
        if ref is not None:
            try:
                password = await self._context.secrets(ref.name, ref.key)
            except SecretUnavailable as exc:
                return SourceReading.failed(exc.code, exc.message, retryable=False)
        credentials = base64.b64encode(f"{self._spec.username}:{password}".encode()).decode("ascii")
        return {"Authorization": f"Basic {credentials}"}

    async def attempt(self, settings: dict[str, str], timeout: float) -> int | SourceError:
        spec = self._spec
        try:
            response = await self._context.http.fetch("GET", self._url, headers=settings, timeout=timeout)
        except HttpTimeout:
            return SourceError("Timeout", f"no answer from {spec.management_url} within {duration(timeout)}")
        except HttpFailure as exc:
            return SourceError("ConnectionFailed", f"cannot connect to {spec.management_url} ({exc.reason})")
        status = response.status
        where = f"queue '{spec.queue}' in vhost '{spec.vhost}' at {spec.management_url}"
        if status == 200:
            return self._count(response, where)
        if status == 401:
            check = (f": check the {spec.password_secret_ref}"
                     if spec.password_secret_ref is not None else "")
            return SourceError("AuthenticationFailed", f"RabbitMQ at {spec.management_url} rejected user "
                               f"'{spec.username}'{check} (a user needs the monitoring tag to use the API)",
                               retryable=False)
        if status == 403:
            return SourceError("NotAuthorised", f"user '{spec.username}' may not read {where}: give it the "
                               f"monitoring tag and a permission on vhost '{spec.vhost}'", retryable=False)
        if status == 404:
            return SourceError("QueueNotFound", f"{where} does not exist (or the vhost does not): fix queue or "
                               "vhost", retryable=False)
        return SourceError(f"HTTP{status}", f"HTTP {status} from the management API for {where}",
                           retryable=status in _RETRYABLE_STATUS)

    def _count(self, response: Answer, where: str) -> int | SourceError:
        try:
            body = response.json()
        except ValueError:
            body = None
        fields = ["messages_ready"] + (["messages_unacknowledged"] if self._spec.count == "readyAndUnacked" else [])
        values = [body.get(name) if isinstance(body, dict) else None for name in fields]
        if isinstance(body, dict) and all(v is None for v in values) and "messages_ready" not in body:
            # A queue that has never been sampled yet has no figures: retry until the first sample.
            return SourceError("StatisticsNotReady", f"the management API has no message figures for {where} yet")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return SourceError("InvalidResponse", f"the management API answer for {where} has no "
                               f"{' and '.join(fields)}", retryable=False)
        return sum(int(v) for v in values if isinstance(v, int))


def build(spec: SourceSpec, context: SourceContext) -> RabbitMqPoller:
    if not isinstance(spec, RabbitMqSource):
        raise TypeError(f"rabbitmq factory got a {type(spec).__name__}")
    return RabbitMqPoller(spec, context)
