"""The API server refuses a CRD whose CEL rules it estimates too costly; ours is cheap by construction.

Kubernetes estimates every `x-kubernetes-validations` rule's worst case when the CRD is created, multiplies it by how
often the rule's node can occur, and refuses the CRD when one rule is above StaticEstimatedCostLimit (10^7) or the
whole CRD above StaticEstimatedCRDCostLimit (10^8): apiextensions-apiserver
pkg/apis/apiextensions/validation/validation.go, validateCustomResourceDefinitionOpenAPISchema. tests/cel_cost.py
transcribes that estimate (its docstring cites each piece); these tests run it on manifests/crd.yaml for the
estimators of Kubernetes 1.29.0, 1.29.1 to 1.33 (an int-or-string sized at the request size, about 3 MiB, whatever
its maxLength) and 1.34 on (sized by maxLength), and check the transcription against upstream's own test numbers.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cel_cost import (
    ESTIMATORS,
    STATIC_ESTIMATED_COST_LIMIT,
    STATIC_ESTIMATED_CRD_COST_LIMIT,
    KubeEstimator,
    NotModelled,
    RuleSite,
    estimate_rule,
    expression_cost,
    functions_called,
    parse,
    rule_sites,
    schema_decl,
)

ROOT = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
SCHEMA: dict[str, Any] = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SITES = list(rule_sites(SCHEMA))
BY_VERSION = {e.versions: e for e in ESTIMATORS}
PRE_1_34 = BY_VERSION["1.29.1-1.33"]
CURRENT = BY_VERSION["1.34+"]


def bounds(site: RuleSite) -> dict[str, int]:
    return {e.versions: expression_cost(site, e) for e in ESTIMATORS}


# ---------------------------------------------------------------------------------------------- our CRD


def test_the_crd_has_rules_to_estimate() -> None:
    assert len(SITES) >= 20
    assert len(CRD["spec"]["versions"]) == 1, "estimate every served version's schema"


@pytest.mark.parametrize("site", SITES, ids=[s.name for s in SITES])
def test_each_rule_is_within_the_per_rule_budget_as_kube_apiserver_estimates(site: RuleSite) -> None:
    costs = bounds(site)
    print(f"{site.name}: x{site.cardinality} {costs} {site.rule!r}")
    for versions, cost in costs.items():
        assert cost <= STATIC_ESTIMATED_COST_LIMIT, (
            f"{site.name} {site.rule!r}: estimated cost {cost} exceeds {STATIC_ESTIMATED_COST_LIMIT} on Kubernetes "
            f"{versions}; the API server would refuse the CRD")


def test_the_whole_crd_is_within_the_crd_budget_as_kube_apiserver_estimates() -> None:
    for estimator in ESTIMATORS:
        total = sum(expression_cost(site, estimator) for site in SITES)
        print(f"Kubernetes {estimator.versions}: total {total}")
        assert total <= STATIC_ESTIMATED_CRD_COST_LIMIT, f"{estimator.versions}: {total}"


def test_the_crd_is_cheap_by_construction_with_room_to_grow() -> None:
    # Far below the limit: a new rule of the same shapes cannot tip the CRD over.
    for site in SITES:
        assert max(bounds(site).values()) < STATIC_ESTIMATED_COST_LIMIT // 100, site.name


def test_every_list_that_holds_a_rule_is_bounded() -> None:
    assert all(site.cardinality is not None for site in SITES)


def test_no_rule_depends_on_how_an_int_or_string_is_sized() -> None:
    # Before 1.34 an int-or-string is as long as a request (about 3 MiB) to the estimator, whatever its maxLength,
    # and any string operation on one costs in proportion. The two estimators differ only there.
    for site in SITES:
        assert not site.schema.get("x-kubernetes-int-or-string"), site.name
        assert expression_cost(site, PRE_1_34) == expression_cost(site, CURRENT), site.name


# Standard CEL, in every Kubernetes CEL environment since the first (apiserver pkg/cel/environment/base.go: the
# language's own operators and macros come with cel.NewEnv; the versioned options add libraries on top).
STANDARD_CEL = {"_&&_", "_||_", "!_", "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "_?_:_", "size", "has",
                "comprehension", "@not_strictly_false"}


def test_kube_version_is_where_every_feature_the_rules_use_is_ga_and_every_estimator_accepts_them() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "queuescale" / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.29.0-0"  # x-kubernetes-validations GA; reason and fieldPath since 1.28
    assert ESTIMATORS[0].versions == "1.29.0"  # the oldest estimator checked above is the chart's floor
    used = set().union(*(functions_called(parse(site.rule)) for site in SITES))
    assert used <= STANDARD_CEL, f"a rule uses {used - STANDARD_CEL}: check which Kubernetes version added it"


# ---------------------------------------------------------------------------------------------- it can fail

OLD_DURATION_RULE = ("type(self) == int || (self.matches('^[0-9]+(\\\\.[0-9]+)?$') ? double(self) >= 1.0 : "
                     "duration(self) >= duration('1s'))")


def policies_with(rule: str) -> dict[str, Any]:
    period = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}],
              "maxLength": 32, "x-kubernetes-validations": [{"rule": rule}]}
    item = {"type": "object", "required": ["period"], "properties": {"period": period}}
    return {"type": "object", "properties": {"policies": {"type": "array", "maxItems": 10, "items": item}}}


def test_the_old_duration_rule_in_a_list_is_refused_before_1_34_as_kube_apiserver_does() -> None:
    # The rule our policies[].period carried: `self.matches` on an int-or-string sized at 3 MiB - 2 costs
    # ceil(3145727 * 0.1) * ceil(19 * 0.25) = 314573 * 5, `type(self) == int` another 314573 (the type name `int`
    # is looked up as a path of one element, so sized as `self`), times the 10 items of the list.
    [site] = rule_sites(policies_with(OLD_DURATION_RULE))
    assert site.cardinality == 10
    assert expression_cost(site, PRE_1_34) == 10 * (314573 * 5 + 1 + 4 + 314573 + 3) == 18_874_460
    assert expression_cost(site, PRE_1_34) > STATIC_ESTIMATED_COST_LIMIT
    # 1.34 sizes it by maxLength: 32 code points, 128 bytes.
    assert expression_cost(site, CURRENT) == 10 * (13 * 5 + 1 + 4 + 13 + 3) == 860


def test_a_string_compared_without_max_length_in_a_list_of_32_is_refused_on_every_version() -> None:
    # `self.start != self.end` on schedules[] before start and end had a maxLength: 314573 per comparison (as
    # upstream's "index of array with strings", below, compares two unbounded strings), 32 times.
    clock = {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}
    item: dict[str, Any] = {"type": "object", "properties": {"start": clock, "end": clock},
            "x-kubernetes-validations": [{"rule": "self.start != self.end"}]}
    [site] = rule_sites({"type": "object", "properties": {"schedules": {"type": "array", "maxItems": 32,
                                                                          "items": item}}})
    for estimator in ESTIMATORS:
        assert expression_cost(site, estimator) == 32 * (314573 + 4) > STATIC_ESTIMATED_COST_LIMIT
    bounded = copy.deepcopy(item)
    bounded["properties"]["start"]["maxLength"] = bounded["properties"]["end"]["maxLength"] = 5
    [site] = rule_sites({"type": "object", "properties": {"schedules": {"type": "array", "maxItems": 32,
                                                                          "items": bounded}}})
    assert expression_cost(site, CURRENT) == 32 * (2 + 4)


@pytest.mark.parametrize("rule", [
    "self.all(x, x.matches('a'))",  # iterating over an object
    "self.items.exists_one(x, true)",  # a macro not transcribed
    "self.name in ['a', 'b']",  # an operator not transcribed
    "self.name.lowerAscii() == 'a'",  # a Kubernetes library function
    "self.nothing == 1",  # a field the schema does not have
    "{'a': 1}.size() == 1",  # a map literal
])
def test_a_rule_shape_the_estimator_does_not_know_fails_the_test(rule: str) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "items": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}},
              "x-kubernetes-validations": [{"rule": rule}]}
    [site] = rule_sites(schema)
    with pytest.raises(NotModelled):
        expression_cost(site, CURRENT)


def test_a_rule_under_an_unbounded_list_runs_as_often_as_its_node_fits_in_a_request() -> None:
    # compilation.go maxCardinality: MaxRequestSizeBytes / (MinSerializedSize + 1); an object is at least `{}`.
    item = {"type": "object", "properties": {"replicas": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.replicas >= 0"}]}
    [site] = rule_sites({"type": "array", "items": item})
    assert site.cardinality is None
    assert expression_cost(site, CURRENT) == 3 * (3 * 1024 * 1024 // (2 + 1))


# ---------------------------------------------------------------------------------------------- against upstream

def _string(max_length: int | None) -> dict[str, Any]:
    return {"type": "string"} | ({"maxLength": max_length} if max_length is not None else {})


def _array_of(item: dict[str, Any], max_items: int | None) -> dict[str, Any]:
    return {"type": "array", "items": item} | ({"maxItems": max_items} if max_items is not None else {})


def _map_of(value: dict[str, Any], max_properties: int | None) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": value} | (
        {"maxProperties": max_properties} if max_properties is not None else {})


_OBJECT_ITEM = {"type": "object", "required": ["required"],
                "properties": {"required": {"type": "string"}, "optional": {"type": "string"}}}
_INT_OR_STRING: dict[str, Any] = {"x-kubernetes-int-or-string": True}

# apiextensions-apiserver pkg/apiserver/schema/cel/compilation_test.go TestCostEstimation (v0.35.0): the rule's
# MaxCost without a bound ("calc") and with setMaxElements as maxLength / maxItems / maxProperties ("set").
UPSTREAM_COSTS: list[tuple[str, Any, str, int, int, int]] = [
    ("number array with all", lambda n: _array_of({"type": "number"}, n), "self.all(x, true)", 4718591, 10, 32),
    ("string array with all", lambda n: _array_of({"type": "string"}, n), "self.all(x, true)", 3145727, 20, 62),
    ("boolean array with all", lambda n: _array_of({"type": "boolean"}, n), "self.all(x, true)", 1887437, 5, 17),
    ("array of objects with all", lambda n: _array_of(_OBJECT_ITEM, n), "self.all(x, true)", 555128, 50, 152),
    ("map of strings with all", lambda n: _map_of({"type": "string"}, n), "self.all(x, true)", 1179647, 3, 11),
    ("int-or-string array with all", lambda n: _array_of(_INT_OR_STRING, n), "self.all(x, true)", 4718591, 10, 32),
    ("index of array with strings", lambda n: _array_of({"type": "string"}, n), "self[1] == self[1]", 314577, 8,
     314577),
    ("index of array with numbers", lambda n: _array_of({"type": "number"}, n), "self[1] == 0.0", 2, 5000, 2),
    ("string with contains", _string, "self.contains('test')", 314574, 10, 5),
    ("string with startsWith", _string, "self.startsWith('test')", 2, 15, 2),
    ("concat string", _string, 'size(self + "hello") > size("hello")', 314578, 4, 7),
    ("regex matches simple", _string, 'self.matches("x")', 314574, 50, 22),
    ("regex matches empty string", _string, '"".matches("(((((((((())))))))))[0-9]")', 7, 10, 7),
    ("regex matches empty regex", _string, 'self.matches("")', 1, 100, 1),
    ("enums with maxLength equals to the longest possible value",
     lambda n: _string(n) | {"enum": ["A", "B", "C", "LongValue"]}, "self.contains('A')", 2, 1000, 401),
    ("IntOrString type with quantity rule",
     lambda n: _INT_OR_STRING | ({"maxLength": n} if n is not None else {}), "isQuantity(self)", 314574, 20, 9),
]


@pytest.mark.parametrize(("name", "schema", "rule", "unbounded", "limit", "bounded"), UPSTREAM_COSTS,
                         ids=[case[0] for case in UPSTREAM_COSTS])
def test_the_estimator_gives_upstreams_own_numbers(name: str, schema: Any, rule: str, unbounded: int, limit: int,
                                                   bounded: int) -> None:
    for max_elements, expected in ((None, unbounded), (limit, bounded)):
        declared = schema_decl(schema(max_elements), CURRENT)
        assert declared is not None
        assert estimate_rule(rule, declared, CURRENT) == expected, (name, max_elements)


# cel-go checker/cost_test.go TestCost (v0.26.0; the first two also in v0.17.7): expressions on literals alone.
CEL_GO_COSTS = [
    ("all comprehension on literal", "[1, 2, 3].all(x, true)", 20),
    (".filter list literal", "[1,2,3,4,5].filter(x, x % 2 == 0)", 101),
    ("variable cost function with constant", "'123'.matches('[0-9]')", 2),
    ("lt", "1 < 2", 1),
]


@pytest.mark.parametrize(("name", "rule", "expected"), CEL_GO_COSTS, ids=[case[0] for case in CEL_GO_COSTS])
def test_the_estimator_gives_cel_gos_own_numbers(name: str, rule: str, expected: int) -> None:
    for estimator in ESTIMATORS:
        assert estimate_rule(rule, _decl({"type": "object"}, estimator), estimator) == expected, name


def test_has_costs_only_its_operand_except_on_1_29_0() -> None:
    # cel-go TestCost "select: field test only" (2) and "... no has() cost" (1, PresenceTestHasCost(false)), which
    # Kubernetes sets for new rules from 1.29.1 (apiserver pkg/cel/environment/base.go).
    declared = {e.versions: _decl({"type": "object", "properties": {"a": {"type": "integer"}}}, e) for e in ESTIMATORS}
    assert {v: estimate_rule("has(self.a)", d, BY_VERSION[v]) for v, d in declared.items()} == {
        "1.29.0": 2, "1.29.1-1.33": 1, "1.34+": 1}


def test_the_loops_of_a_nested_all_multiply_as_upstream_says() -> None:
    # TestCostEstimation "O(n^2) loop with numbers": over the limit without maxItems, 352 with 10.
    rule = "self.all(x, self.all(y, true))"
    assert estimate_rule(rule, _decl(_array_of({"type": "number"}, None)), CURRENT) > 100_000_000
    assert estimate_rule(rule, _decl(_array_of({"type": "number"}, 10)), CURRENT) == 352


def test_an_int_or_string_is_sized_by_the_request_before_1_34_whatever_its_max_length() -> None:
    # apiserver pkg/cel/common/schemas.go before kubernetes#132837 (v0.33.x): dyn.MaxElements = maxRequestSizeBytes - 2.
    declared = schema_decl(_INT_OR_STRING | {"maxLength": 20}, PRE_1_34)
    assert declared is not None and declared.max_elements == 3 * 1024 * 1024 - 2
    assert estimate_rule("isQuantity(self)", declared, PRE_1_34) == 314574


def _decl(schema: dict[str, Any], estimator: KubeEstimator = CURRENT) -> Any:
    declared = schema_decl(schema, estimator)
    assert declared is not None
    return declared


# apiextensions-apiserver pkg/apis/apiextensions/validation/validation_test.go TestCostInfo: the cardinality of a
# string under these parents.
UPSTREAM_CARDINALITIES: list[tuple[str, list[dict[str, Any]], int | None]] = [
    ("object", [{"type": "object"}], 1),
    ("array", [{"type": "array", "maxItems": 5}], 5),
    ("unbounded array", [{"type": "array"}], None),
    ("map", [{"type": "object", "maxProperties": 10, "additionalProperties": {}}], 10),
    ("unbounded map", [{"type": "object", "additionalProperties": {}}], None),
    ("array inside map", [{"type": "object", "maxProperties": 5, "additionalProperties": {}},
                          {"type": "array", "maxItems": 5}], 25),
    ("unbounded array inside bounded map", [{"type": "object", "maxProperties": 5, "additionalProperties": {}},
                                            {"type": "array"}], None),
    ("object inside array", [{"type": "array", "maxItems": 3}, {"type": "object"}], 3),
    ("map inside object inside array", [{"type": "array", "maxItems": 2}, {"type": "object"},
                                        {"type": "object", "maxProperties": 4, "additionalProperties": {}}], 8),
]


@pytest.mark.parametrize(("name", "parents", "expected"), UPSTREAM_CARDINALITIES,
                         ids=[case[0] for case in UPSTREAM_CARDINALITIES])
def test_cardinality_multiplies_as_upstream_says(name: str, parents: list[dict[str, Any]],
                                                 expected: int | None) -> None:
    node: dict[str, Any] = {"type": "string", "x-kubernetes-validations": [{"rule": "true"}]}
    for parent in reversed(parents):
        wrapped = copy.deepcopy(parent)
        if wrapped["type"] == "array":
            wrapped["items"] = node
        elif "additionalProperties" in wrapped:
            wrapped["additionalProperties"] = node
        else:
            wrapped["properties"] = {"child": node}
        node = wrapped
    [site] = rule_sites(node)
    assert site.cardinality == expected
