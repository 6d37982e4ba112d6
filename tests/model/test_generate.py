"""The CRD's schema and the reference tables come from the fields' declarations, which the parser reads too."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, assert_type

import pytest
import yaml

from controller.model import generate
from controller.model.fields import FieldError, Fields
from controller.model.generate import DeclarationError, crd_text, openapi, reference_text, rows, spec_schema, table
from controller.model.rule import AGGREGATION, MAX_REPLICAS, SPEC, Aggregation
from controller.model.schema import Duration, Integer, KindFields, ListOf, Number, Object, OneOfKinds, Text
from controller.model.sources import SOURCE
from controller.model.sources.sql_table import STATEMENT_TIMEOUT

ROOT = Path(__file__).resolve().parents[2]


def read(field: Any, raw: dict[str, Any]) -> tuple[object, list[str]]:
    """What the parser makes of `raw` for one declared field, with the errors it records."""
    errors: list[FieldError] = []
    f = Fields(raw, "spec", errors)
    value: object
    if isinstance(field, Integer):
        value = f.integer(field)
    elif isinstance(field, Number):
        value = f.number(field)
    elif isinstance(field, Duration):
        value = f.duration(field)
    else:
        value = f.string(field)
    return value, [str(e) for e in errors]


def schema_paths(schema: dict[str, Any], prefix: str) -> set[str]:
    found = set()
    for name, child in (schema.get("properties") or {}).items():
        found |= {f"{prefix}.{name}"} | schema_paths(child, f"{prefix}.{name}")
        if isinstance(child.get("items"), dict):
            found |= schema_paths(child["items"], f"{prefix}.{name}[]")
    return found


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_schema", ROOT / "tools" / "generate_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_schema"] = module
    spec.loader.exec_module(module)
    return module


def test_a_declared_bound_is_in_the_crd_and_refused_by_the_parser() -> None:
    replicas = Integer("replicas", minimum=2, maximum=5, int32=True, doc="d")
    assert openapi(replicas) == {"type": "integer", "format": "int32", "minimum": 2, "maximum": 5}
    assert read(replicas, {"replicas": 1})[1] == ["spec.replicas: must be >= 2, got 1"]
    assert read(replicas, {"replicas": 6})[1] == ["spec.replicas: must be <= 5, got 6"]
    assert read(replicas, {"replicas": 5}) == (5, [])


def test_a_declared_default_is_in_the_crd_and_is_what_the_parser_returns_when_absent() -> None:
    window = Duration("window", default=90.0, minimum=1.0, doc="d")
    assert openapi(window)["default"] == "1m30s"
    assert read(window, {}) == (90.0, [])
    ratio = Number("ratio", default=0.25, minimum=0, maximum=1, doc="d")
    assert openapi(ratio)["default"] == 0.25
    assert read(ratio, {}) == (0.25, [])


def test_a_declared_pattern_is_anchored_in_the_crd_and_matched_whole_by_the_parser() -> None:
    name = Text("name", pattern="[a-z]+", pattern_help="must be lowercase letters", max_length=8, doc="d")
    assert openapi(name) == {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"}
    assert read(name, {"name": "ab1"})[1] == ['spec.name: must be lowercase letters, got "ab1"']
    assert read(name, {"name": "abcdefghi"})[1] == ["spec.name: must be at most 8 characters, got 9"]


def test_a_duration_bound_below_a_second_is_more_than_the_seconds_below_it_in_the_crd() -> None:
    schema = openapi(STATEMENT_TIMEOUT)
    assert (schema["minimum"], schema["exclusiveMinimum"], schema["maximum"]) == (0, True, 60)
    assert read(STATEMENT_TIMEOUT, {"statementTimeout": 0})[1][0].startswith(
        "spec.statementTimeout: must be a duration >= 1ms")
    assert read(STATEMENT_TIMEOUT, {"statementTimeout": 61})[1] == [
        "spec.statementTimeout: must be at most 1m, got 1m1s"]


def test_changing_a_declaration_changes_the_crd(monkeypatch: pytest.MonkeyPatch) -> None:
    current = (ROOT / "manifests" / "crd.yaml").read_text()
    fields = tuple(dataclasses.replace(f, maximum=500) if f is MAX_REPLICAS else f for f in SPEC.fields)
    monkeypatch.setattr(generate, "SPEC", dataclasses.replace(SPEC, fields=fields))
    changed = yaml.safe_load(crd_text(current))
    schema = changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert schema["properties"]["maxReplicas"]["maximum"] == 500
    assert "| required; 1 to 500; ≥ `minReplicas` |" in table("spec")


def test_choices_are_typed_as_their_literal_and_refused_outside_it() -> None:
    errors: list[FieldError] = []
    f = Fields({"aggregation": "max", "mode": "avg"}, "spec", errors)
    aggregation = f.choice(AGGREGATION)
    assert_type(aggregation, Aggregation)  # mypy checks this line: choice() returns the Literal, not str
    assert aggregation == "max"
    mode: Literal["hold", "fixed"] = f.choice("mode", ("hold", "fixed"), "hold")  # typed by what it is given to
    assert mode == "hold"
    assert [str(e) for e in errors] == ['spec.mode: must be one of hold, fixed, got "avg"']
    assert openapi(AGGREGATION) == {"type": "string", "enum": ["sum", "max"], "default": "sum"}


def test_a_kinds_own_default_is_left_out_of_the_crd_and_shown_in_the_reference() -> None:
    port = spec_schema()["properties"]["sources"]["items"]["properties"]["port"]
    assert "default" not in port
    assert port["description"] == "6379 for redis-list, 5432 for sql-table when unset."
    assert "| `spec.sources[].port` | integer | `6379` (redis-list), `5432` (sql-table) |" in table("spec.sources[]")


def test_kinds_that_share_a_field_must_declare_it_alike() -> None:
    a = KindFields("a", fields=(Integer("port", minimum=1, default=1, doc="d"),))
    b = KindFields("b", fields=(Integer("port", minimum=0, default=2, doc="d"),))
    with pytest.raises(DeclarationError, match=r"spec.sources\[\].port: b declares it unlike a"):
        openapi(OneOfKinds("", common=(), kinds=(a, b)))
    alike = KindFields("b", fields=(Integer("port", minimum=1, default=2, doc="other words"),))
    assert openapi(OneOfKinds("", common=(), kinds=(a, alike)))["properties"]["port"] == {
        "type": "integer", "description": "1 for a, 2 for b when unset.", "minimum": 1}


def test_every_declared_field_has_one_schema_and_one_row() -> None:
    paths = [row.path for row in rows(SPEC, "spec")]
    assert len(paths) == len(set(paths)) > 60
    assert set(paths) == schema_paths(spec_schema(), "spec")
    tables = "".join(table(root) for root in ("spec", "spec.sources[]", "spec.policy", "spec.fallback",
                                              "spec.schedules[]"))
    assert sorted(path for path in paths if f"| `{path}` |" not in tables) == []
    assert tables.count("\n| `spec.") == len(paths)


def test_a_field_without_words_for_the_reference_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"spec\.replicas has no doc"):
        table("spec", Object("spec", fields=(Integer("replicas"),)))
    assert table("spec", Object("spec", fields=(Integer("replicas", doc="how many"),))).endswith(
        "| `spec.replicas` | integer | | | how many |\n")


def test_the_source_schema_lists_every_kinds_rules_in_table_order() -> None:
    rules = spec_schema()["properties"]["sources"]["items"]["x-kubernetes-validations"]
    assert len(rules) == sum(len(kind.rules) for kind in SOURCE.kinds)
    kinds_named = [kind.kind for kind in SOURCE.kinds]
    assert kinds_named == ["azure-queue", "redis-list", "sql-table", "rabbitmq", "aws-sqs"]
    assert spec_schema()["properties"]["sources"]["items"]["properties"]["type"]["enum"] == kinds_named


def test_lists_are_atomic_unless_they_have_keys() -> None:
    assert openapi(ListOf("xs", items=Integer(""), max_items=3))["x-kubernetes-list-type"] == "atomic"
    keyed = openapi(ListOf("xs", items=Object("", fields=(Text("name"),)), map_keys=("name",)))
    assert (keyed["x-kubernetes-list-type"], keyed["x-kubernetes-list-map-keys"]) == ("map", ["name"])


def test_the_generated_parts_are_found_by_their_markers_only() -> None:
    with pytest.raises(DeclarationError, match="no generated part"):
        crd_text("apiVersion: v1\n")
    with pytest.raises(DeclarationError, match="no generated table"):
        reference_text("# Reference\n")
    text = "# Reference\n\nprose\n\n<!-- BEGIN generated: the fields of spec.fallback (tools/generate_schema.py) " \
           "-->\nstale\n<!-- END generated -->\n\nmore prose\n"
    regenerated = reference_text(text)
    assert regenerated.startswith("# Reference\n\nprose\n\n") and regenerated.endswith("\n\nmore prose\n")
    assert "stale" not in regenerated and "`spec.fallback.mode`" in regenerated
    assert reference_text(regenerated) == regenerated


def test_the_tool_rewrites_a_stale_file_and_its_check_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    tool = load_tool()
    crd = tmp_path / "crd.yaml"
    current = (ROOT / "manifests" / "crd.yaml").read_text()
    crd.write_text(current.replace("maxLength: 253", "maxLength: 254", 1))
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    monkeypatch.setattr(tool, "GENERATED", {crd: crd_text})
    assert tool.main(["--check"]) == 1
    assert capsys.readouterr().out == "crd.yaml: not current\n"
    assert tool.main([]) == 0
    assert crd.read_text() == current
    assert tool.main(["--check"]) == 0
