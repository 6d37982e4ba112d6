"""Rendering the Helm chart with the real helm binary: shared by the chart and RBAC tests."""

from __future__ import annotations

import copy
import functools
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "queuescale"
NAMESPACE = "queuescale-system"
HELM = ROOT / ".tools" / "helm" / "helm"
RELEASE = "queuescale"
# Labels only Helm puts on objects (and selectors); manifests/ does not carry them.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")
# Annotations only Helm objects carry: the CRD survives `helm uninstall`.
HELM_ANNOTATIONS = ("helm.sh/resource-policy",)
Doc = dict[str, Any]


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.is_file():
        pytest.fail(f"helm is missing at {HELM.relative_to(ROOT)}: run `bash scripts/bootstrap` first")
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=60, check=False)


def render(*options: str, release: str = RELEASE, values: Path | None = None) -> list[Doc]:
    """`helm template` as parsed objects (each call renders once per process: the chart does not change)."""
    return [doc for doc in yaml.safe_load_all(_rendered(options, release, values)) if doc]


def normalised(doc: Doc) -> Doc:
    """The object without what Helm adds: its labels (on objects, pod templates and selectors) and annotations."""
    doc = copy.deepcopy(doc)
    _drop(doc["metadata"], "labels", HELM_LABELS)
    _drop(doc["metadata"], "annotations", HELM_ANNOTATIONS)
    spec = doc.get("spec") or {}
    if doc["kind"] == "Service":
        _drop(spec, "selector", HELM_LABELS)
    if isinstance(spec.get("selector"), dict):
        _drop(spec["selector"], "matchLabels", HELM_LABELS)
    if isinstance(spec.get("template"), dict):
        _drop(spec["template"]["metadata"], "labels", HELM_LABELS)
    return doc


@functools.cache
def _rendered(options: tuple[str, ...], release: str, values: Path | None) -> str:
    args = ["template", release, str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        args += ["--values", str(values)]
    result = helm(*args, *options)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _drop(mapping: Doc, key: str, names: Sequence[str]) -> None:
    found = mapping.get(key)
    if not isinstance(found, dict):
        return
    for name in names:
        found.pop(name, None)
    if not found:
        del mapping[key]
