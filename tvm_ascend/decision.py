"""Decisions that explain themselves (XLA's FusionDecision): never a bare bool."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """Whether something is allowed, and why, in words a user can act on."""

    ok: bool
    reason: str = ""
    summary: str = ""  # the one part of ``reason`` that decided, for one-line summaries

    def __bool__(self) -> bool:
        return self.ok

    @property
    def short(self) -> str:
        """The deciding reason in one line: ``summary`` if set, else ``reason``'s first line."""
        return self.summary or (self.reason.strip().splitlines() or [""])[0]

    @staticmethod
    def yes(reason: str = "") -> "Decision":
        return Decision(True, reason)

    @staticmethod
    def no(reason: str, summary: str = "") -> "Decision":
        return Decision(False, reason, summary)
