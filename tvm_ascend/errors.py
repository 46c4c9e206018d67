"""One exception hierarchy for everything a user of tvm-ascend can hit.

Every message names the thing at fault (node, flag, file, kernel) and what to do about it.
"""
from __future__ import annotations


class AscendError(Exception):
    """Base class of all tvm-ascend errors."""


class ModelLoadError(AscendError):
    """The model file or object could not be read or imported (names the file)."""


class TargetError(AscendError):
    """An unknown target name or SoC version."""


class UnsupportedOpError(AscendError):
    """An operator cannot run on the NPU and no host fallback applies."""


class FusionConfigError(AscendError):
    """A bad fusion switch file, fusion level or configuration value."""


class TilingError(AscendError):
    """No tiling of a kernel fits the SoC (UB capacity, alignment, cores)."""


class CodegenError(AscendError):
    """The AscendC printer met a TIR construct it cannot print (names the kernel)."""


class ToolchainError(AscendError):
    """A compiler or toolchain command failed; carries the command and the tail of its output."""

    def __init__(self, message: str, command: list[str] | None = None, output: str = ""):
        self.command = list(command or [])
        self.output = output
        tail = "\n".join(output.strip().splitlines()[-30:])
        text = message
        if self.command:
            text += "\n  command: " + " ".join(self.command)
        if tail:
            text += "\n  output (tail):\n" + tail
        super().__init__(text)


class DeviceRuleError(AscendError):
    """The AscendC emulator caught a kernel breaking a device rule (UB overflow, queue misuse)."""


class ExportError(AscendError):
    """A library could not be written where asked (names the path and why)."""


def check_known_names(flag: str, names, known, what: str = "node") -> None:
    """Raise FusionConfigError when ``names`` (given with ``flag``) holds names not in
    ``known``: each unknown one with the closest known names (a typo was accepted silently
    and fenced, or kept, nothing)."""
    import difflib

    known = sorted(set(known))
    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        parts.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    listed = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    verb = f"is not a {what}" if len(unknown) == 1 else f"are not {what}s"
    raise FusionConfigError(f"{flag} names {', '.join(parts)}, which {verb} of the model "
                            f"(its {what}s: {listed})")
