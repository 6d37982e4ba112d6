"""The Dockerfile's shape (no Docker engine here to build it): stages, pinned base, non-root user, exec form."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"

Instruction = tuple[str, str]  # (INSTRUCTION, arguments)


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


STEPS = instructions(DOCKERFILE.read_text())


def arguments(keyword: str) -> list[str]:
    return [rest for kind, rest in STEPS if kind == keyword]


def base_images() -> list[str]:
    """The image each FROM names, with ${ARG} defaults filled in."""
    build_args = {}
    for rest in arguments("ARG"):
        name, _, default = rest.partition("=")
        build_args[name] = default
    return [re.sub(r"\$\{(\w+)\}", lambda m: build_args[m.group(1)], rest.split()[0]) for rest in arguments("FROM")]


def final_stage() -> list[Instruction]:
    last_from = max(i for i, (kind, _) in enumerate(STEPS) if kind == "FROM")
    return STEPS[last_from:]


def test_two_stages_on_a_slim_python_pinned_by_version() -> None:
    images = base_images()
    assert len(images) == 2
    assert "AS build" in arguments("FROM")[0]
    for image in images:
        assert re.fullmatch(r"python:3\.\d+\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image


def test_the_wheel_is_built_in_the_first_stage_and_only_its_install_is_copied() -> None:
    first_stage = STEPS[: len(STEPS) - len(final_stage())]
    assert any("pip wheel" in rest for kind, rest in first_stage if kind == "RUN")
    copies = [rest for kind, rest in final_stage() if kind == "COPY"]
    assert copies and all(rest.startswith("--from=build ") for rest in copies), "the final stage copies sources"
    assert not [rest for kind, rest in final_stage() if kind == "RUN"], "the final stage installs nothing itself"


def test_no_test_extras_and_no_editable_installs() -> None:
    for rest in arguments("RUN"):
        assert "[test]" not in rest
        assert " -e " not in f" {rest} "


def test_runs_as_a_numeric_user_that_is_not_root() -> None:
    (user,) = arguments("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    (deployment,) = [d for d in yaml.safe_load_all((ROOT / "manifests" / "operator.yaml").read_text())
                     if d and d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_entrypoint_and_cmd_are_exec_form() -> None:
    (entrypoint,) = arguments("ENTRYPOINT")
    (cmd,) = arguments("CMD")
    assert json.loads(entrypoint) == ["queuescale"]
    assert json.loads(cmd) == ["run"]


def test_python_writes_no_bytecode_at_run_time() -> None:
    env = " ".join(rest for kind, rest in final_stage() if kind == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env


@pytest.mark.parametrize("entry", [".venv", ".tools", ".git", "tests", ".cache"])
def test_dockerignore_keeps_local_environments_and_tests_out(entry: str) -> None:
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert entry in ignored


def test_what_the_build_copies_is_not_ignored() -> None:
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    copied = [path.rstrip("/") for kind, rest in STEPS if kind == "COPY" and not rest.startswith("--from")
              for path in rest.split()[:-1]]
    assert copied
    for path in copied:
        assert path not in ignored
        assert (ROOT / path).exists(), path


def test_the_image_carries_the_drivers_of_every_queue_kind() -> None:
    # redis-list and sql-table need their drivers (extras) in the image, or rules fail with DriverNotInstalled.
    installs = [rest for rest in arguments("RUN") if "install" in rest]
    assert any("[redis,postgres]" in rest for rest in installs), installs
