"""How a source reads a Secret's key without knowing Kubernetes: the resolver the operator hands it, and its error."""

from __future__ import annotations

from typing import Literal, Protocol


class SecretUnavailable(Exception):
    """A secret a rule names cannot be read. `code` is machine-readable (SecretNotFound, KeyNotFound, Forbidden).

    The message names the secret and key, never a value.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SecretResolver(Protocol):
    """Reads one key of a Secret in the rule's namespace."""

    async def __call__(self, name: str, key: str) -> str: ...


SecretAccess = Literal["annotated", "namespace"]


SECRET_ACCESS_MODES: tuple[SecretAccess, ...] = ("annotated", "namespace")
