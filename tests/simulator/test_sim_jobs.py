"""`queuescale simulate --jobs N`: the policies' runs spread over processes, with the same results."""

from __future__ import annotations

import json
import subprocess

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
