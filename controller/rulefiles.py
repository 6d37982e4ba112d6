"""Reading QueueScaler rules from YAML files, with every problem as a line a person can act on."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from controller.spec import API_GROUP, KIND, FieldError, QueueScaler, SpecError, parse_queuescaler, rule_label


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


def load_files(paths: list[str]) -> LoadResult:
    """Every QueueScaler in every file (several documents per file allowed); other objects are kept aside."""
    result = LoadResult()
    for path in paths:
        _load_file(path, result)
    return result


def _load_file(path: str, result: LoadResult) -> None:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        result.problems.append(FileProblem(path, f"cannot read: {exc.strerror or exc}"))
        return
    except UnicodeDecodeError:
        result.problems.append(FileProblem(path, "cannot read: not UTF-8 text"))
        return
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or "not valid YAML"
        result.problems.append(FileProblem(path, f"invalid YAML{where}: {problem}"))
        return
    found = 0
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            result.problems.append(FileProblem(path, f"document {index + 1} is not an object"))
            continue
        if not is_queuescaler(doc):
            result.documents.append((path, doc))
            continue
        found += 1
        name = rule_label(doc)
        try:
            rule = parse_queuescaler(doc)
        except SpecError as exc:
            result.rules.append(LoadedRule(path, name, None, exc.errors))
        else:
            result.rules.append(LoadedRule(path, rule.name, rule))
    if found == 0:
        result.notes.append(FileProblem(path, f"no {KIND} in this file"))
