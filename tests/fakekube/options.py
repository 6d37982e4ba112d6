"""The write options of a request (dryRun, fieldManager, force, fieldValidation), checked as the real handlers do.

Upstream: k8s.io/apiserver `pkg/endpoints/handlers/{create,update,patch,delete}.go` decode the query into
Create/Update/Patch/DeleteOptions and refuse invalid ones with a 422 built by `errors.NewInvalid` for the group kind
`<Kind>Options.meta.k8s.io` and the name ""; the checks are k8s.io/apimachinery
`pkg/apis/meta/v1/validation/validation.go` (`ValidateDryRun`, `ValidatePatchOptions`, `ValidateFieldManager`,
`ValidateFieldValidation`). The manager of a write without `fieldManager` is the User-Agent up to its first "/"
(`managerOrUserAgent` / `prefixFromUserAgent` in `handlers/rest.go`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakekube.validation import FORBIDDEN, INVALID, NOT_SUPPORTED, REQUIRED, TOO_LONG, FieldError, invalid_status

APPLY = "application/apply-patch+yaml"
_OPTIONS_KIND = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions", "DELETE": "DeleteOptions"}
FIELD_MANAGER_MAX_LENGTH = 128


@dataclass(frozen=True)
class WriteOptions:
    dry_run: bool
    manager: str
    force: bool
    strict: bool


class OptionsError(Exception):
    """Invalid write options: the 422 Status to answer with."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__(status["message"])
        self.status = status


def _go_bool(value: str) -> bool | None:
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    return None


def _go_string_list(values: list[str]) -> str:
    return "[]string{" + ", ".join(f'"{v}"' for v in values) + "}"


def parse(method: str, query: dict[str, list[str]], content_type: str, user_agent: str,
          delete_body: dict[str, Any] | None = None) -> WriteOptions:
    """The options of a write; raises OptionsError (422) as the real handler does for invalid ones."""
    errors: list[FieldError] = []
    dry_run = list(query.get("dryRun", []))
    if method == "DELETE" and isinstance(delete_body, dict) and isinstance(delete_body.get("dryRun"), list):
        dry_run += [str(v) for v in delete_body["dryRun"]]
    if any(value != "All" for value in dry_run):
        # The bad value is the whole list, printed with Go's %#v.
        errors.append(FieldError(NOT_SUPPORTED, "dryRun", _GoRepr(_go_string_list(dry_run)), 'supported values: "All"'))
    manager = (query.get("fieldManager") or [""])[-1]
    force_text = query["force"][-1] if query.get("force") else None
    is_apply = content_type.split(";")[0].strip().lower() == APPLY
    if method == "PATCH":
        if not is_apply and force_text is not None:
            errors.append(FieldError(FORBIDDEN, "force", None, "may not be specified for non-apply patch"))
        if is_apply and not manager:
            errors.append(FieldError(REQUIRED, "fieldManager", None, "is required for apply patch"))
    if method != "DELETE":
        if len(manager) > FIELD_MANAGER_MAX_LENGTH:
            errors.append(FieldError(TOO_LONG, "fieldManager", None,
                                     f"may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes"))
        for position, character in enumerate(manager):
            if not character.isprintable():
                errors.append(FieldError(INVALID, "fieldManager", manager,
                                         f"invalid character {_go_rune(character)} (at position {position})"))
        validation = (query.get("fieldValidation") or [""])[-1]
        if validation not in ("", "Ignore", "Warn", "Strict"):
            errors.append(FieldError(NOT_SUPPORTED, "fieldValidation", validation,
                                     'supported values: "", "Ignore", "Strict", "Warn"'))
    if errors:
        status = invalid_status(_OPTIONS_KIND.get(method, "Options"), "meta.k8s.io", "", errors)
        raise OptionsError(status)
    if not manager:
        manager = "".join(c for c in user_agent.split("/")[0] if c.isprintable())[:FIELD_MANAGER_MAX_LENGTH]
    return WriteOptions(dry_run=bool(dry_run), manager=manager, force=_go_bool(force_text or "") is True,
                        strict=(query.get("fieldValidation") or [""])[-1] == "Strict")


def _go_rune(character: str) -> str:
    return f"U+{ord(character):04X}"


class _GoRepr:
    """A value ErrorBody prints as it is (Go's %#v of a []string is not a JSON value)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text
