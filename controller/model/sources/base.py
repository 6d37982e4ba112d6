"""What every queue kind's fields share: the type and the weight."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """One queue. Queue kinds subclass this with their own fields."""

    type: str
    weight: float = 1.0

    @property
    def queue_label(self) -> str:
        """A short name for the queue, for printer columns, metrics labels and messages."""
        return self.type
