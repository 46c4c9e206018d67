"""An indenting code buffer: the printer writes lines, the buffer keeps the layout."""
from __future__ import annotations

import contextlib


class CodeBuffer:
    """Lines of C++ with indentation managed by ``indent()`` blocks."""

    def __init__(self, indent_text: str = "  "):
        self._lines: list[str] = []
        self._depth = 0
        self._indent_text = indent_text

    def line(self, text: str = "") -> None:
        self._lines.append(self._indent_text * self._depth + text if text else "")

    def label(self, text: str) -> None:
        """A line one level out, as C++ access specifiers are written."""
        self._lines.append(self._indent_text * max(self._depth - 1, 0) + " " + text)

    def lines(self, text: str) -> None:
        for item in text.splitlines():
            self.line(item)

    @contextlib.contextmanager
    def indent(self, opener: str | None = None, closer: str | None = "}"):
        """``with buf.indent("void f() {"):`` prints the opener, indents, prints the closer."""
        if opener is not None:
            self.line(opener)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if closer is not None:
                self.line(closer)

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"
