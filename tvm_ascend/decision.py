"""Decisions that explain themselves (XLA's FusionDecision): never a bare bool."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """Whether something is allowed, and why, in words a user can act on."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @staticmethod
    def yes(reason: str = "") -> "Decision":
        return Decision(True, reason)

    @staticmethod
    def no(reason: str) -> "Decision":
        return Decision(False, reason)
