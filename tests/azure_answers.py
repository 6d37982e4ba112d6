"""What Azure's queue service answers, for the scripted servers on loopback: Get Queue Metadata (a count in a header)
and Peek Messages (a message list with each message's InsertionTime), told apart by the route as Azure does."""

from __future__ import annotations

import email.utils
import time

from tests.loopback import Recorded, Reply, Script

XML = {"Content-Type": "application/xml"}


def is_peek(request: Recorded) -> bool:
    """Whether the request is Peek Messages (`GET {queue}/messages?peekonly=true`) rather than Get Queue Metadata."""
    return request.route.endswith("/messages")


def metadata(count: int) -> Reply:
    return Reply(200, {"x-ms-approximate-messages-count": str(count), "x-ms-request-id": "t"})


def peek_body(*inserted: float) -> bytes:
    """A Peek Messages body listing one message per insertion time (epoch seconds)."""
    messages = "".join(
        f"<QueueMessage><MessageId>m{index}</MessageId>"
        f"<InsertionTime>{email.utils.formatdate(at, usegmt=True)}</InsertionTime>"
        f"<ExpirationTime>{email.utils.formatdate(at + 604800, usegmt=True)}</ExpirationTime>"
        f"<DequeueCount>0</DequeueCount><MessageText>job {index}</MessageText></QueueMessage>"
        for index, at in enumerate(inserted)
    )
    return f'<?xml version="1.0" encoding="utf-8"?><QueueMessagesList>{messages}</QueueMessagesList>'.encode()


def peeked(*inserted: float) -> Reply:
    """A Peek Messages answer (the loopback server adds its own `Date`)."""
    return Reply(200, XML, peek_body(*inserted))


def error(status: int, code: str, message: str = "") -> Reply:
    body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'
    return Reply(status, {"x-ms-error-code": code, **XML}, body.encode())


def queue_of(count: int, *, waited: float = 0.0) -> Script:
    """A queue of `count` messages whose front one was put `waited` seconds before each answer."""

    def answer(request: Recorded) -> Reply:
        if is_peek(request):
            return peeked(*([time.time() - waited] if count else []))
        return metadata(count)

    return answer

