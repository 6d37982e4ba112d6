"""Reading QueueScaler rules from YAML files, with every problem as a line a person can act on."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.model.fields import FieldError, SpecError
from controller.model.rule import API_GROUP, KIND, QueueScaler, parse_queuescaler, rule_label
from controller.model.textfmt import plural


@dataclass(frozen=True)
class LoadedRule:
    """One QueueScaler document: the rule, or the errors that keep it from being one."""

    file: str
    name: str
    rule: QueueScaler | None
    errors: tuple[FieldError, ...] = ()


@dataclass(frozen=True)
class FileProblem:
    """A file that could not be read as YAML at all."""

    file: str
    message: str


@dataclass
class LoadResult:
    rules: list[LoadedRule] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)
    notes: list[FileProblem] = field(default_factory=list)  # worth saying, not an error
    documents: list[tuple[str, Mapping[str, object]]] = field(default_factory=list)  # every other object

    @property
    def ok(self) -> bool:
        return not self.problems and all(r.rule is not None for r in self.rules)

    def to_json(self) -> dict[str, object]:
        """The result for `-o json|yaml`: every rule with its errors, every file problem and note."""
        return {
            "valid": self.ok,
            "rules": [{"file": r.file, "name": r.name, "valid": r.rule is not None,
                       "errors": [{"field": e.path, "message": e.message} for e in r.errors]}
                      for r in self.rules],
            "problems": [{"file": p.file, "message": p.message} for p in self.problems],
            "notes": [{"file": n.file, "message": n.message} for n in self.notes],
        }

    def error_lines(self) -> Iterator[str]:
        """`FILE: message` and `FILE: NAME: field.path: message`, in file order."""
        for problem in self.problems:
            yield f"{problem.file}: {problem.message}"
        for loaded in self.rules:
            for error in loaded.errors:
                yield f"{loaded.file}: {loaded.name}: {error}"


def is_queuescaler(doc: Mapping[str, object]) -> bool:
    api_version = doc.get("apiVersion")
    return doc.get("kind") == KIND or (isinstance(api_version, str) and api_version.startswith(f"{API_GROUP}/"))


STDIN = "-"
_stdin_text: str | None = None


def read_input(path: str) -> str:
    """A file's text, or standard input's for `-` (read once: a second `-` gets the same text, as kubectl's
    `-f -` does not allow reading it twice but a command that needs it twice should not see it empty)."""
    global _stdin_text
    if path == STDIN:
        if _stdin_text is None:
            _stdin_text = sys.stdin.read()
        return _stdin_text
    return Path(path).read_text(encoding="utf-8")


def shown_path(path: str) -> str:
    """How a file is named in messages: `-` is standard input."""
    return "<stdin>" if path == STDIN else path


class _DuplicateKeyLoader(yaml.SafeLoader):
    """YAML that remembers a key given twice in one mapping; PyYAML keeps the last silently, a Kubernetes API
    server with strict field validation refuses it (sigs.k8s.io/yaml's strict unmarshal, goyaml's
    `key %#v already set in map`), so validate says so with both lines."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue  # `<<` merges may be overridden on purpose
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                self.duplicates.append(f'line {line}: duplicate key "{key}" (already set on line {seen[key]})')
            else:
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml_documents(text: str) -> tuple[list[object], list[str]]:
    """Every document of a YAML stream, and one line per duplicate key. Raises yaml.YAMLError."""
    loader = _DuplicateKeyLoader(text)
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]  # what yaml.load_all does
            docs.append(loader.get_data())
        return docs, loader.duplicates
    finally:
        loader.dispose()


def load_files(paths: list[str]) -> LoadResult:
    """Every QueueScaler in every file (several documents per file allowed); other objects are kept aside."""
    result = LoadResult()
    for path in paths:
        _load_file(path, result)
    return result


def _load_file(path: str, result: LoadResult) -> None:
    shown = shown_path(path)
    try:
        text = read_input(path)
    except OSError as exc:
        result.problems.append(FileProblem(shown, f"cannot read: {exc.strerror or exc}"))
        return
    except UnicodeDecodeError:
        result.problems.append(FileProblem(shown, "cannot read: not UTF-8 text"))
        return
    try:
        docs, duplicates = load_yaml_documents(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or "not valid YAML"
        result.problems.append(FileProblem(shown, f"invalid YAML{where}: {problem}"))
        return
    result.problems.extend(FileProblem(shown, line) for line in duplicates)
    if all(doc is None for doc in docs):
        result.notes.append(FileProblem(shown, "empty: no objects in this file"))
        return
    found = 0
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            result.problems.append(FileProblem(shown, f"document {index + 1} is not an object"))
            continue
        objects: list[Mapping[str, object]] = [doc]
        if _is_list(doc):
            objects = _list_items(shown, index, doc, result)
        for item in objects:
            if not is_queuescaler(item):
                result.documents.append((shown, item))
                continue
            found += 1
            _load_rule(shown, item, result)
    if found == 0:
        result.notes.append(FileProblem(shown, f"no {KIND} in this file"))


def _is_list(doc: Mapping[str, object]) -> bool:
    # kubectl flattens any `kind: List` (v1) and any `...List` kind with items into its objects
    # (k8s.io/cli-runtime/pkg/resource/visitor.go, FlattenListVisitor), so `kubectl get -o yaml` output applies.
    kind = doc.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list)


def _list_items(path: str, index: int, doc: Mapping[str, object], result: LoadResult) -> list[Mapping[str, object]]:
    items = doc.get("items")
    assert isinstance(items, list)
    result.notes.append(FileProblem(path, f"document {index + 1} is a {doc.get('kind')} of "
                                          f"{plural(len(items), 'item')}: each item is checked"))
    found = []
    for position, item in enumerate(items):
        if isinstance(item, Mapping):
            found.append(item)
        else:
            result.problems.append(FileProblem(path, f"document {index + 1} ({doc.get('kind')}): items[{position}] "
                                                     "is not an object"))
    return found


def _load_rule(path: str, doc: Mapping[str, object], result: LoadResult) -> None:
    name = rule_label(doc)
    try:
        rule = parse_queuescaler(doc)
    except SpecError as exc:
        result.rules.append(LoadedRule(path, name, None, one_per_problem(exc.errors)))
    else:
        result.rules.append(LoadedRule(path, rule.name, rule))


def one_per_problem(errors: tuple[FieldError, ...]) -> tuple[FieldError, ...]:
    """Drop the errors under a field that is itself missing: `spec.scaleTargetRef: is required` says all that
    `spec.scaleTargetRef.name: is required` would. The API server, too, reports one `Required value` for the
    missing parent: kube-openapi validates only the properties an object has (k8s.io/kube-openapi
    pkg/validation/validate/object_validator.go, Validate), so nothing below an absent one is checked."""
    missing = [e.path for e in errors if e.message == "is required"]

    def under_missing(path: str) -> bool:
        return any(path != parent and (path.startswith(parent + ".") or path.startswith(parent + "["))
                   for parent in missing)

    return tuple(e for e in errors if not under_missing(e.path))
