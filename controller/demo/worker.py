"""The demo's queue worker: receive messages, "work" on them, delete them.

    QUEUESCALE_DEMO_CONNECTION=<connection string> python -m controller.demo.worker --queue NAME --work-time 1

The connection string comes from the environment, never the command line (which `ps` shows to everyone).
With the defaults it holds one message at a time, works 1 s on it and, on SIGTERM, takes no new message,
finishes the one it holds, deletes it and exits 0: a scale-in that leaves it the grace period loses no work.
It also exits when its parent goes away, so a demo killed hard leaves no worker behind. With
`QUEUESCALE_READY_FILE` set (the local process target's readiness probe), it creates that file once its queue
client is ready. With `QUEUESCALE_IN_FLIGHT_FILE` set (the target's stand-in for a rule's `inFlight`), it serves
its in-flight count as a worker pod would: `GET /in-flight` (`--in-flight-path`) on 127.0.0.1 and a free port
answers the messages it holds now (received, not yet deleted) as plain text; it writes the port to that file
before it says it is ready.

A scenario run (`queuescale demo --scenario`) makes it behave as the scenario's pods do:
- `--service-time constant:1` (or `exponential:MEAN`, `uniform:MIN:MAX`, `lognormal:MEAN:STDDEV`): each message
  takes a draw of that distribution;
- `--concurrency N`: up to N messages at once, each on its own thread;
- `--startup-delay T`: it takes messages (and says it is ready) T seconds after it was spawned (the target puts
  the spawn time in `QUEUESCALE_SPAWNED_AT`), as a pod that needs T seconds to start;
- `--scale-in kill`: SIGTERM ends it at once, its messages undeleted (they reappear after the visibility
  timeout, as Azure does for a killed pod's messages); `release`: SIGTERM abandons the work but makes each message
  it holds visible again at once (Update Message with a visibility timeout of 0), so another worker takes it
  within seconds instead of a visibility timeout later; `drain` (the default) finishes what it holds first.

Each event is one JSON line on stdout (times in seconds since the epoch; `sent` is what the sender wrote into the
message): `ready`, `received` (a delivery: `message`, `sent`, `received`, `dequeue_count`), `done` (deleted, with
`received`, `done` and `work`, the drawn service time it slept: the rest of done - received is the delete and the
thread's start), `lost` (its delete failed: the message's visibility timeout ran out during the work and
another delivery owns it now), `released` (made visible again on SIGTERM, with `received` and `released`),
`stopped`. The demo reads them for its report and its measurements.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

CONNECTION_ENV = "QUEUESCALE_DEMO_CONNECTION"
SPAWNED_AT_ENV = "QUEUESCALE_SPAWNED_AT"  # wall clock when the target spawned this process (set by the target)
IN_FLIGHT_FILE_ENV = "QUEUESCALE_IN_FLIGHT_FILE"  # where to write the in-flight endpoint's port (set by the target)
IDLE_WAIT = 0.25  # between receive calls while the queue is empty


class ServiceTimeError(ValueError):
    """A --service-time that cannot be read."""


def service_time_sampler(text: str, rng: random.Random) -> Callable[[], float]:
    """A function drawing service times from `KIND:ARGS` (constant:1, exponential:2, uniform:1:3, lognormal:2:1)."""
    kind, _, rest = text.partition(":")
    try:
        args = [float(a) for a in rest.split(":")] if rest else []
    except ValueError:
        raise ServiceTimeError(f"--service-time: numbers expected after {kind}:, got {rest!r}") from None
    wanted = {"constant": 1, "exponential": 1, "uniform": 2, "lognormal": 2}
    if kind not in wanted:
        raise ServiceTimeError(f"--service-time: one of {', '.join(wanted)}, got {kind!r}")
    if len(args) != wanted[kind] or any(a < 0 or not math.isfinite(a) for a in args):
        raise ServiceTimeError(f"--service-time: {kind} takes {wanted[kind]} number(s) >= 0, got {rest!r}")
    if kind == "constant":
        return lambda: args[0]
    if kind == "exponential":
        mean = args[0]
        return lambda: rng.expovariate(1.0 / mean) if mean > 0 else 0.0
    if kind == "uniform":
        low, high = args
        return lambda: rng.uniform(low, high)
    mean, stddev = args
    # The scenario's lognormal is given by its mean and standard deviation; random wants those of the log.
    sigma2 = math.log(1.0 + (stddev / mean) ** 2) if mean > 0 else 0.0
    mu = math.log(mean) - sigma2 / 2 if mean > 0 else 0.0
    return lambda: rng.lognormvariate(mu, math.sqrt(sigma2))


class _Events:
    """JSON lines on stdout, one whole line at a time whatever thread writes."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.pid = os.getpid()
        self._lock = threading.Lock()

    def say(self, event: str, **fields: object) -> None:
        line = json.dumps({"event": event, "replica": self.replica, "pid": self.pid, **fields})
        with self._lock:
            print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller.demo.worker")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--work-time", type=float, default=1.0, help="seconds of work per message")
    parser.add_argument("--service-time", default=None,
                        help="a distribution instead of --work-time: constant:S, exponential:MEAN, uniform:MIN:MAX "
                             "or lognormal:MEAN:STDDEV (seconds)")
    parser.add_argument("--concurrency", type=int, default=1, help="messages worked on at once")
    parser.add_argument("--startup-delay", type=float, default=0.0,
                        help="seconds from spawn until it takes messages and says it is ready")
    parser.add_argument("--scale-in", choices=("drain", "kill", "release"), default="drain",
                        help="on SIGTERM: finish the messages held (drain), die at once (kill), or make them "
                             "visible again at once and stop (release)")
    parser.add_argument("--visibility-timeout", type=int, default=30,
                        help="seconds a received message stays invisible to other workers")
    parser.add_argument("--in-flight-path", default="/in-flight",
                        help=f"with {IN_FLIGHT_FILE_ENV} set: the path that answers the messages held now")
    args = parser.parse_args(argv)
    connection = os.environ.get(CONNECTION_ENV)
    if not connection:
        print(f"worker: set {CONNECTION_ENV} to the storage connection string", file=sys.stderr)
        return 2
    if args.concurrency < 1:
        print("worker: --concurrency must be >= 1", file=sys.stderr)
        return 2
    try:
        draw = service_time_sampler(args.service_time or f"constant:{args.work_time}", random.Random())
    except ServiceTimeError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    spawned = _spawned_at()
    events = _Events(os.environ.get("QUEUESCALE_REPLICA", "?"))
    stopping = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    # kill: the default action of SIGTERM, as a pod whose process does not handle it (its work is lost).
    signal.signal(signal.SIGTERM, signal.SIG_DFL if args.scale_in == "kill" else on_signal)
    signal.signal(signal.SIGINT, on_signal)
    parent = os.getppid()

    from azure.core.exceptions import AzureError
    from azure.storage.queue import QueueClient

    client = QueueClient.from_connection_string(connection, args.queue)
    # A pod is not ready before its start-up delay, however fast this process started.
    stopping.wait(max(0.0, spawned + args.startup_delay - time.time()))
    if stopping.is_set():
        events.say("stopped", processed=0)
        client.close()
        return 0
    concurrency: int = args.concurrency
    slots = threading.BoundedSemaphore(concurrency)
    free = [concurrency]
    lock = threading.Lock()

    def holding() -> int:
        # A slot is taken at the receive and given back after the delete: what a kill now would lose.
        with lock:
            return concurrency - free[0]

    in_flight_server = None
    in_flight_file = os.environ.get(IN_FLIGHT_FILE_ENV)
    if in_flight_file:
        in_flight_server = serve_in_flight(args.in_flight_path, holding)
        _write_whole(Path(in_flight_file), str(in_flight_server.server_address[1]))
    ready_file = os.environ.get("QUEUESCALE_READY_FILE")
    if ready_file:
        Path(ready_file).touch()
    events.say("ready", spawned=spawned, ready=time.time())
    processed = [0]
    threads: list[threading.Thread] = []
    # release: the messages being worked on, by id, and whether they were handed back (then no one deletes them).
    held: dict[str, tuple[Any, Any, Any, float]] = {}
    handed_back = [False]

    def work(message: Any, received: float) -> None:
        try:
            body = json.loads(message.content)
        except (TypeError, ValueError):
            body = {}
        number, sent = body.get("n"), body.get("sent")
        work_seconds = draw()
        time.sleep(work_seconds)  # the work; a SIGTERM now lets it finish (drain)
        with lock:
            if handed_back[0]:
                return  # released on SIGTERM: another delivery owns it now (the daemon thread ends with us)
            held.pop(message.id, None)
        try:
            client.delete_message(message)
        except AzureError as exc:
            # Its visibility timeout ran out and another receive took it: 400 PopReceiptMismatch (a duplicate).
            events.say("lost", message=number, sent=sent, received=received, done=time.time(),
                       work=work_seconds, error=type(exc).__name__)
        else:
            with lock:
                processed[0] += 1
            events.say("done", message=number, sent=sent, received=received, done=time.time(), work=work_seconds)
        finally:
            with lock:
                free[0] += 1
            slots.release()

    while not stopping.is_set():
        if os.getppid() != parent:
            events.say("orphaned")
            break
        # Wait for one free slot, then take as many messages as there are free slots; a SIGTERM ends the wait
        # (release hands the messages back now, not after the work in hand).
        while not slots.acquire(timeout=IDLE_WAIT):
            if stopping.is_set():
                break
        else:
            slots.release()
        if stopping.is_set():
            break
        with lock:
            wanted = free[0]
        try:
            batch = client.receive_messages(messages_per_page=min(32, wanted), max_messages=min(32, wanted),
                                            visibility_timeout=args.visibility_timeout)
            messages = list(batch)
        except AzureError as exc:
            events.say("error", error=type(exc).__name__)
            stopping.wait(1.0)
            continue
        if not messages:
            stopping.wait(IDLE_WAIT)
            continue
        received = time.time()
        for message in messages:
            slots.acquire()
            with lock:
                free[0] -= 1
            try:
                body = json.loads(message.content)
            except (TypeError, ValueError):
                body = {}
            events.say("received", message=body.get("n"), sent=body.get("sent"), received=received,
                       dequeue_count=message.dequeue_count)
            with lock:
                held[message.id] = (message, body.get("n"), body.get("sent"), received)
            thread = threading.Thread(target=work, args=(message, received), daemon=True)
            thread.start()
            threads.append(thread)
        threads = [t for t in threads if t.is_alive()]
    if args.scale_in == "release" and stopping.is_set():
        _release(client, held, handed_back, lock, events)
    else:
        for thread in threads:
            thread.join()
    if in_flight_server is not None:
        in_flight_server.shutdown()
        in_flight_server.server_close()
    events.say("stopped", processed=processed[0])
    client.close()
    return 0


def serve_in_flight(path: str, count: Callable[[], int]) -> ThreadingHTTPServer:
    """Answer `GET path` with `count()` as plain text, on 127.0.0.1 and a free port, from a daemon thread."""

    class InFlightHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if urlsplit(self.path).path != path:
                self.send_error(404)
                return
            body = f"{count()}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a line per request would bury the worker's events in its log

    server = ThreadingHTTPServer(("127.0.0.1", 0), InFlightHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="in-flight", daemon=True).start()
    return server


def _write_whole(path: Path, text: str) -> None:
    """Write `text` so that a reader sees the whole of it or no file at all."""
    partial = path.with_name(f"{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _release(client: Any, held: dict[str, tuple[Any, Any, Any, float]], handed_back: list[bool],
             lock: threading.Lock, events: _Events) -> None:
    """Make every message still being worked on visible again at once, so a stopped worker's messages wait
    seconds for another worker instead of their visibility timeout. Their work is lost, as with a kill."""
    from azure.core.exceptions import AzureError

    with lock:
        handed_back[0] = True
        holding = list(held.values())
    for message, number, sent, received in holding:
        try:
            client.update_message(message, visibility_timeout=0)
        except AzureError as exc:  # its visibility ran out already, or the queue is gone: nothing left to hand back
            events.say("error", error=type(exc).__name__)
        else:
            events.say("released", message=number, sent=sent, received=received, released=time.time())


def _spawned_at() -> float:
    """When the target spawned this process (its start-up delay counts from then), else now."""
    try:
        return float(os.environ[SPAWNED_AT_ENV])
    except (KeyError, ValueError):
        return time.time()


if __name__ == "__main__":
    sys.exit(main())
