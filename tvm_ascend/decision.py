"""Decisions that explain themselves (XLA's FusionDecision): never a bare bool."""
from __future__ import annotations

import json
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


# The IR attribute on a group's PrimFunc that carries ``causal_facts_json`` (partition/causal.py
# writes it, the attention template reads it). Kept here, beside the fact it holds, because the
# templates may import only the ground modules; ``ir_attrs.CAUSAL`` is this key.
CAUSAL_ATTR = "ascend.causal_operands"


@dataclass(frozen=True)
class CausalOperand:
    """A fact the partitioner found in a group's call: parameter ``param`` is bound to a
    constant whose last two axes ``[i, j]`` (``width`` columns a row; its leading axes of
    extent 1) keep key ``j`` for query ``i`` iff ``j <= i + offset``: a bool condition true
    there (a Where's keep), or an additive mask 0 there and at most ``masked_below``
    elsewhere. Found from the constant's values, not from the ops' names; the attention
    template uses it to visit only the key blocks a query block sees."""

    param: str
    offset: int
    width: int
    additive: bool = False
    masked_below: float = 0.0  # additive masks: the largest value of a masked element

    def to_json(self) -> list:
        """The fact as the IR attribute ``ir_attrs.CAUSAL`` holds it (one list per operand)."""
        return [self.param, self.offset, self.width, int(self.additive), self.masked_below]

    @staticmethod
    def from_json(values) -> "CausalOperand":
        """The fact back from ``to_json``'s list (as an IR attribute returns it)."""
        param, offset, width, additive, below = values
        return CausalOperand(str(param), int(offset), int(width), bool(int(additive)),
                             float(below))


def causal_facts_json(facts: list[CausalOperand], scalars: dict[str, float]) -> str:
    """The IR attribute ``ir_attrs.CAUSAL``: the call's causal facts and the values of its
    one-element float constants (a Where's fill), by parameter."""
    return json.dumps({"causal": [f.to_json() for f in facts],
                       "scalars": sorted(scalars.items())})


def causal_facts_from_json(text: str) -> tuple[tuple[CausalOperand, ...], dict[str, float]]:
    """``causal_facts_json``'s facts and scalars back."""
    found = json.loads(text)
    return (tuple(CausalOperand.from_json(v) for v in found["causal"]),
            {str(name): float(value) for name, value in found["scalars"]})


# The IR attribute on a group's PrimFunc that carries the ranges of its symbolic dimensions,
# JSON {name: [lo, hi]} (partition/grouping.py copies them from main's ``ir_attrs.DIM_RANGES``;
# the templates plan over them). Kept here, beside CAUSAL_ATTR, for the same reason: the
# templates may import only the ground modules; ``ir_attrs.DIM_BOUNDS`` is this key.
DIM_BOUNDS_ATTR = "ascend.dim_bounds"
