"""The demo's queue worker: receive a message, "work" on it, delete it; one message at a time.

    QUEUESCALE_DEMO_CONNECTION=<connection string> python -m controller.demo.worker --queue NAME --work-time 1

The connection string comes from the environment, never the command line (which `ps` shows to everyone).
On SIGTERM the worker takes no new message, finishes the one it holds, deletes it and exits 0: a scale-in that
leaves it the grace period loses no work. It also exits when its parent goes away, so a demo killed hard leaves
no worker behind. With `QUEUESCALE_READY_FILE` set (the local process target's readiness probe), it creates that
file once its queue client is ready.

Each processed message is one JSON line on stdout: `{"event": "done", "replica": 2, "message": 17,
"sent": ..., "received": ..., "done": ...}` (times in seconds since the epoch; `sent` is what the sender wrote into
the message), which the demo reads for its report.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

CONNECTION_ENV = "QUEUESCALE_DEMO_CONNECTION"
IDLE_WAIT = 0.25  # between receive calls while the queue is empty


def _say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller.demo.worker")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--work-time", type=float, default=1.0, help="seconds of work per message")
    parser.add_argument("--visibility-timeout", type=int, default=30,
                        help="seconds a received message stays invisible to other workers")
    args = parser.parse_args(argv)
    connection = os.environ.get(CONNECTION_ENV)
    if not connection:
        print(f"worker: set {CONNECTION_ENV} to the storage connection string", file=sys.stderr)
        return 2
    replica = os.environ.get("QUEUESCALE_REPLICA", "?")
    stopping = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    parent = os.getppid()

    from azure.core.exceptions import AzureError
    from azure.storage.queue import QueueClient

    client = QueueClient.from_connection_string(connection, args.queue)
    ready_file = os.environ.get("QUEUESCALE_READY_FILE")
    if ready_file:
        Path(ready_file).touch()
    _say("ready", replica=replica, pid=os.getpid())
    processed = 0
    while not stopping.is_set():
        if os.getppid() != parent:
            _say("orphaned", replica=replica)
            break
        try:
            message = client.receive_message(visibility_timeout=args.visibility_timeout)
        except AzureError as exc:
            _say("error", replica=replica, error=type(exc).__name__)
            stopping.wait(1.0)
            continue
        if message is None:
            stopping.wait(IDLE_WAIT)
            continue
        received = time.time()
        time.sleep(args.work_time)  # the work; a SIGTERM now lets it finish
        try:
            client.delete_message(message)
        except AzureError as exc:
            _say("error", replica=replica, error=type(exc).__name__)
            continue
        processed += 1
        try:
            body = json.loads(message.content)
        except (TypeError, ValueError):
            body = {}
        _say("done", replica=replica, message=body.get("n"), sent=body.get("sent"), received=received,
             done=time.time())
    _say("stopped", replica=replica, processed=processed)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
