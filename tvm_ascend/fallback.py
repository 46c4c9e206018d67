"""Graceful degradation: a kernel that fails to schedule, print or compile never fails a build.

A valid model whose ops the host can run always builds. When a group's kernel fails at one of
the stages below the partitioner, the build plans again with that group taken apart (each of
its ops its own kernel), and a single-op kernel that still fails runs on the host. Every such
failure is a bug in tvm-ascend, so it is a warning, a line in the fusion report
(``kernel_failures``: group, kernel, stage, error, what was done) and, with
``CompileConfig(strict=True)`` / ``--strict``, an error instead.

The decisions are data passed down: ``FusionPolicy.split_ops`` (ops that may not share a kernel)
and ``FusionPolicy.host_ops`` (ops refused for the NPU, with the reason), keyed by the Relax
binding names of ``main``, which the frontend and prepare stage give the same on every plan.

Example
-------
>>> failure = KernelFailure("ascend_k0_add", "fused_add", "compile", "g++: ...",
...                         ("lv", "lv1"), ("add", "relu"))
>>> failure.action
'split'
"""
from __future__ import annotations

import re
from dataclasses import dataclass

STAGES = ("schedule", "print", "compile")

# g++ names a line of the unit as `<file>.cc:<line>:<column>:`, in the error itself or in the
# "required from here" lines of a template instantiated from it
_UNIT_LINE = re.compile(r"\.(?:cc|cpp|cxx):(\d+):\d+:")
_KERNEL_MARK = re.compile(r"^// tvm-ascend kernel (\S+)$")


@dataclass(frozen=True)
class KernelFailure:
    """One kernel that failed below the partitioner, and the ops of its group."""

    symbol: str
    group: str
    stage: str      # one of STAGES
    error: str      # the error's first lines
    members: tuple  # Relax binding names of the group's ops
    nodes: tuple    # their ONNX nodes

    @property
    def action(self) -> str:
        """``split`` (its ops become kernels of their own) or ``host`` (one op: the host)."""
        return "split" if len(self.members) > 1 else "host"

    def to_json(self) -> dict:
        return {"group": self.group, "kernel": self.symbol, "stage": self.stage,
                "error": self.error, "onnx_nodes": list(self.nodes), "action": self.action,
                "note": "this is a bug in tvm-ascend: please report it with the model"}

    def describe(self) -> str:
        where = ("its ops were planned as kernels of their own" if self.action == "split"
                 else "it runs on the host")
        nodes = ", ".join(self.nodes) or ", ".join(self.members)
        return (f"kernel {self.symbol} (group {self.group}: {nodes}) failed to {self.stage}: "
                f"{self.error}; {where} (a bug in tvm-ascend: please report it)")


def short_error(err: BaseException, lines: int = 3) -> str:
    """An exception as a few report lines: its type, then its first non-empty lines (for a
    compiler's failure, its first ``error:`` line, not the command)."""
    output = getattr(err, "output", "")
    errors = [line.strip() for line in output.splitlines() if ": error:" in line]
    if errors:  # the unit's temporary path says nothing: its line number does
        first = re.sub(r"^\S+\.(?:cc|cpp|cxx):(\d+):\d+: ", r"unit line \1: ", errors[0])
        return f"{type(err).__name__}: {first}"[:600]
    text = [line.strip() for line in str(err).splitlines() if line.strip()][:lines]
    return f"{type(err).__name__}: {' / '.join(text)}"[:600]


def compile_error_kernels(source: str, output: str) -> list[str]:
    """The kernels of the unit ``source`` whose lines the compiler output ``output`` names.

    Every kernel's code starts with a ``// tvm-ascend kernel <symbol>`` line (the printer's
    provenance comment), so a line number maps to the last such mark above it.

    >>> compile_error_kernels("x\\n// tvm-ascend kernel k0\\nbad;\\n", "lib0.cc:3:1: error: y")
    ['k0']
    """
    marks = []  # (first line, symbol)
    for number, line in enumerate(source.splitlines(), start=1):
        found = _KERNEL_MARK.match(line.strip())
        if found:
            marks.append((number, found.group(1)))
    named = []
    for match in _UNIT_LINE.finditer(output):
        line = int(match.group(1))
        owner = next((symbol for first, symbol in reversed(marks) if first <= line), None)
        if owner is not None and owner not in named:
            named.append(owner)
    return named


def failure_of(group, stage: str, err: BaseException) -> KernelFailure:
    """The KernelFailure of a partition group (``KernelGroup``) whose kernel failed."""
    nodes = tuple(dict.fromkeys(n for m in group.members for n in m.nodes))
    return KernelFailure(group.symbol, group.name, stage, short_error(err),
                         tuple(m.var for m in group.members), nodes)


def policy_after(policy, failures) -> object:
    """``policy`` with the ops of failed groups split apart, and failed single ops on the host."""
    import dataclasses

    split = set(policy.split_ops)
    host = dict(policy.host_ops)
    for failure in failures:
        if failure.action == "split":
            split.update(failure.members)
        else:
            host.update({var: failure.describe() for var in failure.members})
    return dataclasses.replace(policy, split_ops=frozenset(split),
                               host_ops=tuple(sorted(host.items())))


__all__ = ["KernelFailure", "STAGES", "compile_error_kernels", "failure_of", "policy_after",
           "short_error"]
