"""The Kubernetes API server's static cost estimate of a CRD's CEL rules, transcribed for our tests.

When a CRD is created or updated, the API server compiles every `x-kubernetes-validations` rule and estimates its
worst-case cost from the schema alone: string lengths from maxLength (or enum, or the request size), list lengths
from maxItems, function costs from those sizes. It multiplies that by the number of times the rule's node can
occur (the maxItems of every enclosing list) and refuses the CRD when one rule is above StaticEstimatedCostLimit or
all of them together above StaticEstimatedCRDCostLimit. This module computes the same numbers for the expression
shapes it knows, and raises `NotModelled` for any other, so that a new kind of rule cannot pass unestimated.

Transcribed from (kubernetes/kubernetes staging, read as k8s.io/apiextensions-apiserver and k8s.io/apiserver at
tags v0.29.0 to v0.35.0, and google/cel-go v0.17.7 (Kubernetes 1.29) to v0.26.0 (1.34, 1.35)):

- limits: apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go (StaticEstimatedCostLimit,
  StaticEstimatedCRDCostLimit, getExpressionCost, multiplyWithOverflowGuard); apiserver pkg/apis/cel/config.go
  (MaxRequestSizeBytes); apiserver pkg/cel/limits.go (the minimum serialized sizes).
- how often a rule runs: apiextensions-apiserver pkg/apis/apiextensions/validation/cel_validation.go
  (RootCELContext, childContext, extractMaxElements), and pkg/apiserver/schema/cel/compilation.go (maxCardinality,
  used under an unbounded list or map).
- sizes: apiserver pkg/cel/common/schemas.go (SchemaDeclType and its estimate* helpers), pkg/cel/types.go
  (NewListType, NewMapType, NewObjectType); looked up by field path in apiextensions-apiserver
  pkg/apiserver/schema/cel/compilation.go (sizeEstimator.EstimateSize).
- costs: cel-go checker/cost.go (coster.cost, costIdent, costSelect, costCall, costCreateList, costComprehension,
  functionCost, sizeEstimate / computeSize) with the constants of common/cost.go, and the macro expansions of
  parser/macro.go (has, all, exists, filter). The Kubernetes libraries' own estimates (apiserver
  pkg/cel/library/cost.go CostEstimator.EstimateCallCost) cover only their own functions and types: of those only
  isQuantity is modelled here, to compare with upstream's own test numbers.
- has() costs nothing of its own: apiserver pkg/cel/environment/base.go sets PresenceTestHasCost(false), for new
  rules from 1.29.1 on (1.29.0 compiled new rules at compatibility version 1.28, before that option).

Where cel-go versions differ in a way our shapes could see (the size of a comprehension's result is unknown in
v0.17 and the loop count from v0.20 on), the larger number is taken, so the bound holds on every version.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes
from celpy.celparser import CELParser
from lark import Token, Tree

# apiserver pkg/apis/cel/config.go
MAX_REQUEST_SIZE_BYTES = 3 * 1024 * 1024
# apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
STATIC_ESTIMATED_CRD_COST_LIMIT = 100_000_000
# apiserver pkg/cel/limits.go
_MAX_DURATION_SIZE_JSON = 32
_MAX_DATETIME_SIZE_JSON = 32
_MIN_DURATION_SIZE_JSON = 3
_JSON_DATE_SIZE = 12
_MIN_DATETIME_SIZE_JSON = 21
_MIN_STRING_SIZE = 2
_MIN_BOOL_SIZE = 4
_MIN_NUMBER_SIZE = 1
# cel-go common/cost.go
_SELECT_AND_IDENT_COST = 1
_CONST_COST = 0
_LIST_CREATE_BASE_COST = 10
_STRING_TRAVERSAL_COST_FACTOR = 0.1
_REGEX_STRING_LENGTH_COST_FACTOR = 0.25

MAX_UINT64 = 2**64 - 1
_ACCUMULATOR = "__result__"  # cel-go parser.AccumulatorName
_SCALARS = frozenset({"bool", "double", "duration", "int", "timestamp", "uint"})  # cel-go checker isScalar
_TYPE_NAMES = frozenset({"bool", "bytes", "double", "duration", "dyn", "int", "list", "map", "null_type", "string",
                         "timestamp", "type", "uint"})


class NotModelled(Exception):
    """A schema or expression shape this transcription does not estimate: add it here before using it in the CRD."""


@dataclass(frozen=True)
class KubeEstimator:
    """What differs between the Kubernetes versions whose estimates we check."""

    versions: str
    # 1.34 sizes an int-or-string by its maxLength (apiserver pkg/cel/common/schemas.go, kubernetes#132837);
    # before, always by the request size, about 3 MiB.
    int_or_string_uses_max_length: bool
    presence_test_cost: int


ESTIMATORS = (
    KubeEstimator("1.29.0", int_or_string_uses_max_length=False, presence_test_cost=1),
    KubeEstimator("1.29.1-1.33", int_or_string_uses_max_length=False, presence_test_cost=0),
    KubeEstimator("1.34+", int_or_string_uses_max_length=True, presence_test_cost=0),
)


# ----------------------------------------------------------------------------------------------------------------
# Saturating arithmetic, as cel-go's addUint64NoOverflow, multiplyUint64NoOverflow and multiplyByCostFactor


def _add(*values: int) -> int:
    return min(sum(values), MAX_UINT64)


def _multiply(x: int, y: int) -> int:
    return min(x * y, MAX_UINT64)


def _by_factor(x: int, factor: float) -> int:
    # Go computes math.Ceil(float64(x) * factor) in float64, as Python does.
    product = math.ceil(float(x) * factor)
    return MAX_UINT64 if product >= 2.0**64 else int(product)


# ----------------------------------------------------------------------------------------------------------------
# Schema -> CEL declaration with sizes: apiserver pkg/cel/common/schemas.go SchemaDeclType


@dataclass(frozen=True)
class Decl:
    """A DeclType: its kind, MaxElements (a string's length, a list's items) and MinSerializedSize."""

    kind: str
    max_elements: int = 0
    min_serialized_size: int = 1
    fields: Mapping[str, Decl] = field(default_factory=dict)
    elem: Decl | None = None
    key: Decl | None = None


_BOOL = Decl("bool", 0, _MIN_BOOL_SIZE)
_INT = Decl("int", 0, _MIN_NUMBER_SIZE)
_DOUBLE = Decl("double", 0, _MIN_NUMBER_SIZE)
_STRING_KEY = Decl("string", 0, _MIN_STRING_SIZE)  # apiservercel.StringType, the key of every map
_TYPE = Decl("type")
_DYN = Decl("dyn")


def schema_decl(schema: Mapping[str, Any], estimator: KubeEstimator) -> Decl | None:
    """SchemaDeclType: the declaration a rule at this schema sees as `self`; None when CEL cannot see the node."""
    if schema.get("x-kubernetes-embedded-resource"):
        raise NotModelled("x-kubernetes-embedded-resource adds apiVersion, kind and metadata to the declaration")
    if schema.get("x-kubernetes-int-or-string"):
        # "smallest value for a serialized x-kubernetes-int-or-string is 0"
        if estimator.int_or_string_uses_max_length and "maxLength" in schema:
            return Decl("dyn", max(schema["maxLength"], 0) * 4, 1)  # estimateMaxElementsFromMaxLength
        return Decl("dyn", MAX_REQUEST_SIZE_BYTES - 2, 1)  # estimateMaxStringLengthPerRequest
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return None
        item = schema_decl(items, estimator)
        if item is None:
            return None
        if "maxItems" in schema:
            max_items = max(schema["maxItems"], 0)
        else:  # estimateMaxArrayItemsFromMinSize
            max_items = (MAX_REQUEST_SIZE_BYTES - 2) // (item.min_serialized_size + 1)
        return Decl("list", max_items, 2, elem=item)
    if kind == "object":
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            value = schema_decl(additional, estimator)
            if value is None:
                return None
            if "maxProperties" in schema:
                max_properties = max(schema["maxProperties"], 0)
            else:  # estimateMaxAdditionalPropertiesFromMinSize
                max_properties = (MAX_REQUEST_SIZE_BYTES - 2) // (value.min_serialized_size + 6)
            return Decl("map", max_properties, 2, elem=value, key=_STRING_KEY)
        required = set(schema.get("required") or ())
        fields: dict[str, Decl] = {}
        min_size = 2  # "an object will always be serialized at least as {}"
        for name, prop in (schema.get("properties") or {}).items():
            declared = schema_decl(prop, estimator)
            if declared is None:
                continue
            fields[name] = declared
            if name in required and "default" not in prop:
                min_size += len(name) + declared.min_serialized_size + 4
        return Decl("object", 0, min_size, fields)
    if kind == "string":
        text_format = schema.get("format")
        if text_format == "byte":
            return Decl("bytes", max(schema.get("maxLength", MAX_REQUEST_SIZE_BYTES - 2), 0), _MIN_STRING_SIZE)
        if text_format == "duration":
            return Decl("duration", _MAX_DURATION_SIZE_JSON, _MIN_DURATION_SIZE_JSON)
        if text_format == "date":
            return Decl("timestamp", _JSON_DATE_SIZE, _JSON_DATE_SIZE)
        if text_format == "date-time":
            return Decl("timestamp", _MAX_DATETIME_SIZE_JSON, _MIN_DATETIME_SIZE_JSON)
        if "maxLength" in schema:
            # maxLength counts code points; a code point may take 4 bytes
            return Decl("string", max(schema["maxLength"], 0) * 4, _MIN_STRING_SIZE)
        if schema.get("enum"):  # estimateMaxStringEnumLength
            return Decl("string", max(len(v) for v in schema["enum"] if isinstance(v, str)), _MIN_STRING_SIZE)
        return Decl("string", MAX_REQUEST_SIZE_BYTES - 2, _MIN_STRING_SIZE)
    if kind == "boolean":
        return _BOOL
    if kind == "number":
        return _DOUBLE
    if kind == "integer":
        return _INT
    return None


# ----------------------------------------------------------------------------------------------------------------
# Where rules are, and how many times each can run: apiextensions validation/cel_validation.go


@dataclass(frozen=True)
class RuleSite:
    """One `x-kubernetes-validations` rule, where it is, and how many times its node can occur in one object."""

    path: str
    index: int
    rule: str
    schema: Mapping[str, Any]
    cardinality: int | None  # None: under a list or map without maxItems / maxProperties

    @property
    def name(self) -> str:
        return f"{self.path}[{self.index}]"


def _max_elements(schema: Mapping[str, Any]) -> int | None:
    """extractMaxElements: by how much a schema multiplies how often its children occur (None: unbounded)."""
    if schema.get("type") == "object":
        if "additionalProperties" in schema:
            return max(schema["maxProperties"], 0) if "maxProperties" in schema else None
        return 1
    if schema.get("type") == "array":
        return max(schema["maxItems"], 0) if "maxItems" in schema else None
    return 1


def rule_sites(root: Mapping[str, Any], path: str = "") -> Iterator[RuleSite]:
    """Every rule under an openAPIV3Schema, with the cardinality RootCELContext and childContext give its node."""
    yield from _sites(root, path, 1)


def _sites(schema: Mapping[str, Any], path: str, cardinality: int | None) -> Iterator[RuleSite]:
    for index, rule in enumerate(schema.get("x-kubernetes-validations") or ()):
        if "messageExpression" in rule:
            raise NotModelled(f"{path}: messageExpression costs are estimated too; not transcribed here")
        yield RuleSite(path, index, rule["rule"], schema, cardinality)
    for keyword in ("allOf", "anyOf", "oneOf", "not"):
        nested = schema.get(keyword)
        for part in nested if isinstance(nested, list) else [nested] if nested else []:
            if "x-kubernetes-validations" in str(part):
                raise NotModelled(f"{path}: rules inside {keyword}")
    factor = _max_elements(schema)
    child = None if cardinality is None or factor is None else _multiply(cardinality, factor)
    for name, prop in (schema.get("properties") or {}).items():
        yield from _sites(prop, f"{path}.{name}" if path else name, child)
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _sites(schema["additionalProperties"], f"{path}[*]", child)
    if isinstance(schema.get("items"), Mapping):
        yield from _sites(schema["items"], f"{path}[]", child)


def expression_cost(site: RuleSite, estimator: KubeEstimator) -> int:
    """getExpressionCost: one evaluation's estimate times how often the rule can run, as compared with the limit."""
    declared = schema_decl(site.schema, estimator)
    if declared is None:
        raise NotModelled(f"{site.name}: a rule on a schema CEL cannot see")
    cost = estimate_rule(site.rule, declared, estimator)
    if site.cardinality is not None:
        cardinality = site.cardinality
    else:  # compilation.go maxCardinality: as many as fit in one request, one comma apart
        cardinality = MAX_REQUEST_SIZE_BYTES // (declared.min_serialized_size + 1)
    return 0 if cost == 0 else _multiply(cost, cardinality)


# ----------------------------------------------------------------------------------------------------------------
# Expressions: celpy's parse tree, with cel-go's macros expanded as parser/macro.go does


@dataclass(eq=False)
class Expr:
    """A node of a parsed, macro-expanded CEL expression (compared by identity, as cel-go keys nodes by id)."""


@dataclass(eq=False)
class Literal(Expr):
    value: Any
    kind: str


@dataclass(eq=False)
class Ident(Expr):
    name: str


@dataclass(eq=False)
class Select(Expr):
    operand: Expr
    field: str
    test_only: bool


@dataclass(eq=False)
class Call(Expr):
    function: str
    target: Expr | None
    args: list[Expr]


@dataclass(eq=False)
class ListLiteral(Expr):
    elements: list[Expr]


@dataclass(eq=False)
class Comprehension(Expr):
    iter_range: Expr
    iter_var: str
    accu_var: str
    accu_init: Expr
    loop_condition: Expr
    loop_step: Expr
    result: Expr


_CEL = celpy.Environment()
_PARSER = CELParser()
_RELATIONS = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
              "relation_eq": "_==_", "relation_ne": "_!=_"}
_ARITHMETIC = {"addition_add": "_+_", "addition_sub": "_-_", "multiplication_mul": "_*_",
               "multiplication_div": "_/_", "multiplication_mod": "_%_"}


def parse(rule: str) -> Expr:
    """The expression cel-go's parser would build, macros expanded."""
    return _convert(_PARSER.parse(rule))


def _literal(token: Token) -> Literal:
    value = _CEL.program(_CEL.compile(str(token))).evaluate({})
    for kind, cel_type in (("bool", celtypes.BoolType), ("uint", celtypes.UintType), ("int", celtypes.IntType),
                           ("double", celtypes.DoubleType), ("string", celtypes.StringType),
                           ("bytes", celtypes.BytesType)):
        if isinstance(value, cel_type):
            return Literal(value, kind)
    if value is None:
        return Literal(None, "null")
    raise NotModelled(f"literal {token}")


def _args(tree: Tree[Token] | None) -> list[Expr]:
    return [] if tree is None else [_convert(child) for child in tree.children if isinstance(child, Tree)]


def _convert(tree: Tree[Token]) -> Expr:
    kind = str(tree.data)
    children = [c for c in tree.children if isinstance(c, Tree | Token)]
    first = children[0] if children else None
    if kind in ("expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary",
                "member", "primary", "paren_expr") and len(children) == 1 and isinstance(first, Tree):
        return _convert(first)
    if kind == "expr" and len(children) == 3:
        return Call("_?_:_", None, [_convert(c) for c in children if isinstance(c, Tree)])
    if kind in ("conditionalor", "conditionaland") and len(children) == 2:
        left, right = (_convert(c) for c in children if isinstance(c, Tree))
        return Call("_||_" if kind == "conditionalor" else "_&&_", None, [left, right])
    if kind in ("relation", "addition", "multiplication") and len(children) == 2 and isinstance(first, Tree):
        operator = str(first.data)
        names = _RELATIONS if kind == "relation" else _ARITHMETIC
        if operator not in names:
            raise NotModelled(f"operator {operator}")
        left_tree = first.children[0]
        assert isinstance(left_tree, Tree) and isinstance(children[1], Tree)
        return Call(names[operator], None, [_convert(left_tree), _convert(children[1])])
    if kind == "unary" and len(children) == 2 and isinstance(first, Tree) and isinstance(children[1], Tree):
        return Call("!_" if first.data == "unary_not" else "-_", None, [_convert(children[1])])
    if kind == "ident" and isinstance(first, Token):
        return Ident(str(first))
    if kind == "literal" and isinstance(first, Token):
        return _literal(first)
    if kind == "list_lit":
        return ListLiteral(_args(first if isinstance(first, Tree) else None))
    if kind == "member_index" and isinstance(first, Tree) and isinstance(children[1], Tree):
        return Call("_[_]", None, [_convert(first), _convert(children[1])])
    if kind == "member_dot" and isinstance(first, Tree):
        return Select(_convert(first), str(children[1]), test_only=False)
    if kind == "member_dot_arg" and isinstance(first, Tree):
        arguments = children[2] if len(children) > 2 and isinstance(children[2], Tree) else None
        return _member_call(_convert(first), str(children[1]), _args(arguments))
    if kind == "ident_arg" and isinstance(first, Token):
        arguments = children[1] if len(children) > 1 and isinstance(children[1], Tree) else None
        return _global_call(str(first), _args(arguments))
    raise NotModelled(f"expression shape {kind}")


def _global_call(function: str, args: list[Expr]) -> Expr:
    if function == "has":  # parser/macro.go MakeHas: a presence test on a field selection
        if len(args) != 1 or not isinstance(args[0], Select):
            raise NotModelled("has() takes one field selection")
        return Select(args[0].operand, args[0].field, test_only=True)
    return Call(function, None, args)


def _member_call(target: Expr, function: str, args: list[Expr]) -> Expr:
    if function not in ("all", "exists", "filter", "exists_one", "map"):
        return Call(function, target, args)
    if len(args) != 2 or not isinstance(args[0], Ident):
        raise NotModelled(f"{function}() with {len(args)} arguments")
    variable, predicate = args[0].name, args[1]

    def accu() -> Ident:
        return Ident(_ACCUMULATOR)

    if function == "all":  # makeQuantifier quantifierAll
        return Comprehension(target, variable, _ACCUMULATOR, Literal(True, "bool"),
                             Call("@not_strictly_false", None, [accu()]), Call("_&&_", None, [accu(), predicate]),
                             accu())
    if function == "exists":  # makeQuantifier quantifierExists
        return Comprehension(target, variable, _ACCUMULATOR, Literal(False, "bool"),
                             Call("@not_strictly_false", None, [Call("!_", None, [accu()])]),
                             Call("_||_", None, [accu(), predicate]), accu())
    if function == "filter":  # MakeFilter
        step = Call("_?_:_", None, [predicate, Call("_+_", None, [accu(), ListLiteral([Ident(variable)])]), accu()])
        return Comprehension(target, variable, _ACCUMULATOR, ListLiteral([]), Literal(True, "bool"), step, accu())
    raise NotModelled(f"the {function}() macro")


def functions_called(e: Expr) -> set[str]:
    """Every function, operator and macro an expression uses (macros by their expansion's name)."""
    if isinstance(e, Call):
        found = {e.function} | (functions_called(e.target) if e.target is not None else set())
        return found.union(*(functions_called(arg) for arg in e.args))
    if isinstance(e, Select):
        return functions_called(e.operand) | ({"has"} if e.test_only else set())
    if isinstance(e, ListLiteral):
        return set().union(*(functions_called(element) for element in e.elements))
    if isinstance(e, Comprehension):
        return {"comprehension"}.union(*(functions_called(part) for part in (
            e.iter_range, e.accu_init, e.loop_condition, e.loop_step, e.result)))
    return set()


# ----------------------------------------------------------------------------------------------------------------
# The estimate: cel-go checker/cost.go, Max side only (no Max there depends on a Min)


@dataclass(frozen=True)
class _Var:
    path: tuple[str, ...] | None
    declared: Decl


def estimate_rule(rule: str, self_decl: Decl, estimator: KubeEstimator) -> int:
    """costEst.Max of one rule with `self` declared as `self_decl` (CompilationResult.MaxCost)."""
    return _Coster(self_decl, estimator).cost(parse(rule))


class _Coster:
    def __init__(self, root: Decl, estimator: KubeEstimator) -> None:
        self.root = root
        self.estimator = estimator
        self.scopes: dict[str, list[_Var]] = {}
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, int] = {}
        self.types: dict[int, Decl] = {}
        self.nodes: list[Expr] = []  # keeps every node alive, so no id() is reused

    # -- bookkeeping

    def type_of(self, e: Expr) -> Decl:
        return self.types[id(e)]

    def _record(self, e: Expr, declared: Decl, path: tuple[str, ...] | None = None) -> None:
        self.nodes.append(e)
        self.types[id(e)] = declared
        if path is not None:
            self.paths[id(e)] = path

    def _lookup(self, path: tuple[str, ...]) -> int | None:
        """compilation.go sizeEstimator.EstimateSize: walk the path from `self`, whatever its first element says."""
        node: Decl | None = self.root
        for name in path[1:]:
            if node is None:
                return None
            if name in ("@items", "@values"):
                node = node.elem
            elif name == "@keys":
                node = node.key
            else:
                node = node.fields.get(name)
        return None if node is None else node.max_elements

    def size(self, e: Expr) -> int:
        """sizeEstimate (v0.17) / computeSize (v0.26): computed, literal, by path, scalar, else unknown."""
        if id(e) in self.sizes:
            return self.sizes[id(e)]
        if isinstance(e, Literal):
            return len(e.value) if e.kind in ("string", "bytes") else 1
        if isinstance(e, ListLiteral):
            return len(e.elements)
        path = self.paths.get(id(e))
        if path and path[0] != _ACCUMULATOR:  # newAstNode gives no path to accumulator variables
            found = self._lookup(path)
            if found is not None:
                return found
        if self.type_of(e).kind in _SCALARS:
            return 1
        return MAX_UINT64

    # -- the walk

    def cost(self, e: Expr) -> int:
        if isinstance(e, Literal):
            self._record(e, Decl(e.kind))
            return _CONST_COST
        if isinstance(e, Ident):
            return self._ident(e)
        if isinstance(e, Select):
            return self._select(e)
        if isinstance(e, Call):
            return self._call(e)
        if isinstance(e, ListLiteral):
            total = _add(*(self.cost(element) for element in e.elements), _LIST_CREATE_BASE_COST)
            self._record(e, Decl("list", elem=self.type_of(e.elements[0]) if e.elements else _DYN))
            return total
        if isinstance(e, Comprehension):
            return self._comprehension(e)
        raise NotModelled(type(e).__name__)

    def _ident(self, e: Ident) -> int:
        scope = self.scopes.get(e.name)
        if scope:
            self._record(e, scope[-1].declared, scope[-1].path)
        elif e.name in ("self", "oldSelf"):
            self._record(e, self.root, (e.name,))
        elif e.name in _TYPE_NAMES:
            self._record(e, _TYPE, (e.name,))  # a path of one element: EstimateSize answers `self`'s size
        else:
            raise NotModelled(f"identifier {e.name}")
        return _SELECT_AND_IDENT_COST

    def _select(self, e: Select) -> int:
        operand_cost = self.cost(e.operand)
        operand = self.type_of(e.operand)
        if operand.kind == "object":
            if e.field not in operand.fields:
                raise NotModelled(f"no field {e.field!r}: the API server would not compile this rule")
            declared = operand.fields[e.field]
        elif operand.kind == "map" and operand.elem is not None:
            declared = operand.elem
        elif operand.kind == "dyn":
            declared = _DYN
        else:
            raise NotModelled(f"selecting {e.field} on a {operand.kind}")
        if e.test_only:  # has(): the presence test's own cost, then the operand's
            self._record(e, _BOOL)
            return _add(self.estimator.presence_test_cost, operand_cost)
        self._record(e, declared, (*self.paths.get(id(e.operand), ()), e.field))
        extra = _SELECT_AND_IDENT_COST if operand.kind in ("object", "map") else 0
        return _add(operand_cost, extra)

    def _comprehension(self, e: Comprehension) -> int:
        total = _add(self.cost(e.iter_range), self.cost(e.accu_init))
        iterated = self.type_of(e.iter_range)
        range_path = self.paths.get(id(e.iter_range), ())
        if iterated.kind == "list" and iterated.elem is not None:
            variable = _Var((*range_path, "@items"), iterated.elem)
        elif iterated.kind == "map" and iterated.key is not None:
            variable = _Var((*range_path, "@keys"), iterated.key)
        else:
            raise NotModelled(f"iterating over a {iterated.kind}")
        initial = self.type_of(e.accu_init)
        accumulated = Decl("list", elem=variable.declared) if initial.kind == "list" else initial
        self.scopes.setdefault(e.accu_var, []).append(_Var(None, accumulated))
        self.scopes.setdefault(e.iter_var, []).append(variable)
        loop = _add(self.cost(e.loop_condition), self.cost(e.loop_step))
        self.scopes[e.iter_var].pop()
        total = _add(total, self.cost(e.result))
        self.scopes[e.accu_var].pop()
        self._record(e, self.type_of(e.result))
        return _add(total, _multiply(self.size(e.iter_range), loop))

    def _call(self, e: Call) -> int:
        arg_costs = [self.cost(arg) for arg in e.args]
        target_cost = self.cost(e.target) if e.target is not None else 0
        call_cost, result = self._function(e, _add(*arg_costs), arg_costs)
        path = None
        if e.function == "_[_]":  # costCall tracks the field path of an index into a list or a map
            element = "@items" if self.type_of(e.args[0]).kind == "list" else "@values"
            path = (*self.paths.get(id(e.args[0]), ()), element)
        self._record(e, result, path)
        return _add(target_cost, call_cost)

    def _kinds(self, e: Call) -> list[str]:
        return [self.type_of(arg).kind for arg in e.args]

    def _function(self, e: Call, arg_sum: int, arg_costs: Sequence[int]) -> tuple[int, Decl]:
        """functionCost: the call's cost with its arguments' (the target's is added by the caller)."""
        name, args, kinds = e.function, e.args, self._kinds(e)
        one = _add(1, arg_sum)  # "O(1) functions"
        if name in ("_&&_", "_||_"):
            return arg_sum, _BOOL
        if name == "_?_:_":
            self.sizes[id(e)] = max(self.size(args[1]), self.size(args[2]))
            left, right = self.type_of(args[1]), self.type_of(args[2])
            return _add(arg_costs[0], max(arg_costs[1], arg_costs[2])), left if left.kind == right.kind else _DYN
        if name in ("!_", "@not_strictly_false"):
            return one, _BOOL
        if name == "-_":
            return one, self.type_of(args[0])
        if name in ("_==_", "_!=_"):
            return _add(self._traversal(args[0], args[1]), arg_sum), _BOOL
        if name in ("_<_", "_<=_", "_>_", "_>=_"):
            textual = all(k in ("string", "dyn") for k in kinds) or all(k in ("bytes", "dyn") for k in kinds)
            other = not (all(k == "string" for k in kinds) or all(k == "bytes" for k in kinds))
            # every overload the checker may pick for these argument types: the most expensive one counts
            candidates = ([_add(self._traversal(args[0], args[1]), arg_sum)] if textual else []) + (
                [one] if other else [])
            return max(candidates), _BOOL
        if name == "_+_":
            if kinds == ["string", "string"] or kinds == ["list", "list"]:
                joined = _add(self.size(args[0]), self.size(args[1]))
                self.sizes[id(e)] = joined
                if kinds[0] == "list":
                    return one, self.type_of(args[0])
                return _add(_by_factor(joined, _STRING_TRAVERSAL_COST_FACTOR), arg_sum), self.type_of(args[0])
            if all(k in ("int", "uint", "double", "duration", "timestamp") for k in kinds):
                return one, self.type_of(args[0])
            raise NotModelled(f"_+_ on {kinds}")
        if name in ("_-_", "_*_", "_/_", "_%_"):
            if all(k in ("int", "uint", "double", "duration", "timestamp") for k in kinds):
                return one, self.type_of(args[0])
            raise NotModelled(f"{name} on {kinds}")
        if name == "_[_]":
            container = self.type_of(args[0])
            if container.kind not in ("list", "map") or container.elem is None:
                raise NotModelled(f"indexing a {container.kind}")
            return one, container.elem
        if name == "size" and len(args) + (e.target is not None) == 1:
            return one, _INT
        if name in ("matches", "contains", "startsWith", "endsWith") and e.target is not None and len(args) == 1:
            if self.type_of(e.target).kind not in ("string", "dyn"):
                raise NotModelled(f"{name} on a {self.type_of(e.target).kind}")
            if name == "matches":  # MatchesString: O(length of the string x length of the regex)
                text = _by_factor(_add(self.size(e.target), 1), _STRING_TRAVERSAL_COST_FACTOR)
                regex = _by_factor(self.size(args[0]), _REGEX_STRING_LENGTH_COST_FACTOR)
                return _add(_multiply(text, regex), arg_sum), _BOOL
            if name == "contains":  # ContainsString
                text = _by_factor(self.size(e.target), _STRING_TRAVERSAL_COST_FACTOR)
                part = _by_factor(self.size(args[0]), _STRING_TRAVERSAL_COST_FACTOR)
                return _add(_multiply(text, part), arg_sum), _BOOL
            return _add(_by_factor(self.size(args[0]), _STRING_TRAVERSAL_COST_FACTOR), arg_sum), _BOOL
        if name == "isQuantity" and e.target is None and len(args) == 1:  # apiserver library/cost.go, 1.30+
            return _add(_by_factor(self.size(args[0]), _STRING_TRAVERSAL_COST_FACTOR), arg_sum), _BOOL
        conversions = {"type": _TYPE, "int": _INT, "double": _DOUBLE, "duration": Decl("duration"),
                       "timestamp": Decl("timestamp")}
        if name in conversions and e.target is None and len(args) == 1:
            return one, conversions[name]
        raise NotModelled(f"function {name}")

    def _traversal(self, left: Expr, right: Expr) -> int:
        """Equality and string ordering: a walk over the shorter of the two, at StringTraversalCostFactor."""
        return _by_factor(min(self.size(left), self.size(right)), _STRING_TRAVERSAL_COST_FACTOR)
