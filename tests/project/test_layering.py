"""The policy and the model are pure: they import nothing of the I/O layers (import-linter checks the layers too)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_FOR_POLICY = (
    "controller.sources", "controller.targets", "controller.kube", "controller.report.metrics", "controller.simulator",
    "controller.reconciler", "controller.cli", "httpx", "kubernetes", "prometheus_client", "asyncio", "time",
)


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return modules


def offending(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


def test_policy_and_model_import_nothing_of_the_io_layers() -> None:
    paths = [ROOT / "controller" / "policy.py", ROOT / "controller" / "throughput.py", *sorted((ROOT / "controller" / "model").rglob("*.py"))]
    assert len(paths) > 5
    for path in paths:
        assert offending(imported_modules(path), FORBIDDEN_FOR_POLICY) == [], path


def test_the_check_itself_catches_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from controller.sources.base import Source\nimport kubernetes.client\n")
    assert offending(imported_modules(bad), FORBIDDEN_FOR_POLICY) == ["controller.sources.base", "kubernetes.client"]


def test_sources_and_targets_never_import_each_other() -> None:
    for folder, other in (("sources", "controller.targets"), ("targets", "controller.sources")):
        for path in (ROOT / "controller" / folder).glob("*.py"):
            assert offending(imported_modules(path), (other,)) == [], path
