"""Run the fake API server as a process: `python -m tests.fakekube --port 0 --kubeconfig-out FILE`.

It writes the kubeconfig once it listens (so a parent can wait for the file), then serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path

from tests.fakekube.server import FakeKube


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakekube", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--kubeconfig-out", type=Path, required=True, help="where to write the kubeconfig")
    parser.add_argument("--namespace", default="default", help="the kubeconfig context's namespace")
    parser.add_argument("--ready-delay", type=float, default=0.0, help="seconds before workloads become ready")
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    parser.add_argument("--history-limit", type=int, default=1000)
    parser.add_argument("--namespace-termination-delay", type=float, default=0.0,
                        help="seconds a deleted namespace stays Terminating before its content goes")
    parser.add_argument("--pods", action="store_true",
                        help="Deployments and ReplicaSets get Pod objects that follow spec.replicas")
    parser.add_argument("--crd", type=Path, action="append", default=[], help="a CRD manifest to install")
    args = parser.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    fake = FakeKube(port=args.port, ready_delay=args.ready_delay, bookmark_interval=args.bookmark_interval,
                    history_limit=args.history_limit, namespace_termination_delay=args.namespace_termination_delay,
                    pods=args.pods)
    fake.start()
    try:
        for crd in args.crd:
            import yaml

            fake.create(yaml.safe_load(crd.read_text()))
        # Write then rename, so a reader never sees half a file.
        partial = args.kubeconfig_out.with_suffix(".partial")
        fake.write_kubeconfig(partial, args.namespace)
        os.replace(partial, args.kubeconfig_out)
        print(f"fakekube listening on {fake.url}", flush=True)
        stop.wait()
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
