"""`queuescale simulate --jobs N`: the policies' runs spread over processes, with the same results."""

from __future__ import annotations

import json
import signal
import subprocess

from controller.simulator.run import worker_pool
from tests.commandline import queuescale


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return queuescale("simulate", *args)


def test_jobs_give_the_same_metrics_in_the_same_order_as_one_process() -> None:
    args = ("--scenario", "checkout-outage", "--static", "20", "--static", "30", "--aws-target", "10", "--json")
    one, three = simulate(*args, "--jobs", "1"), simulate(*args, "--jobs", "3")
    assert one.returncode == 0 and three.returncode == 0, one.stderr + three.stderr
    assert list(json.loads(one.stdout)) == ["queuescale-default", "static-20", "static-30", "aws-target-10"]
    assert json.loads(one.stdout) == json.loads(three.stdout)


def test_jobs_below_one_is_a_usage_error_naming_the_option() -> None:
    done = simulate("--scenario", "flash-crowd", "--jobs", "0")
    assert done.returncode == 2
    assert "--jobs: must be a whole number >= 1, got '0'" in done.stderr


def _handlers() -> tuple[object, object]:
    return signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)


def test_forked_workers_die_on_sigterm_whatever_handler_the_parent_had() -> None:
    # The test runner's own SIGTERM handler raises (tests/stop_on_term.py); a worker that inherited it raised at
    # whatever point Pool.terminate() caught it, and once in a while stayed waiting on a lock for good.
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
    with worker_pool(2) as pool:
        assert pool.apply(_handlers) == (signal.SIG_DFL, signal.SIG_IGN)
        assert pool.apply(signal.pthread_sigmask, (signal.SIG_BLOCK, set())) == set()


def test_the_parent_keeps_its_handlers_and_takes_signals_again_once_the_pool_is_up() -> None:
    before = _handlers()
    with worker_pool(2):
        assert _handlers() == before
        assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == set()
