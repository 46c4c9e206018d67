"""A Python file's imports read from its source: every ``import`` statement, those inside
functions and under ``TYPE_CHECKING`` included, without importing anything.

The floor-plan tests (test_layout.py for the package, test_schedules_layout.py for the
templates) and the test house's own check (no test file imports another) read imports with it;
a lazy import is how an upward arrow hides, so none of them may import the module to find out.

Example
-------
>>> from pathlib import Path
>>> path = Path("tvm_ascend/tuning/search.py")
>>> "tvm_ascend.pipeline" in imported_modules(path, "tvm_ascend.tuning.search",
...                                           lambda dotted: False)  # doctest: +SKIP
True
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable


def module_name(path: Path, root: Path, package: str = "") -> str:
    """The dotted name of the module at ``path``, which lies under the folder ``root`` of the
    package ``package`` (``""``: ``root`` is a folder on ``sys.path``, as ``tests/`` is)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(([package] if package else []) + parts)


def imported_modules(path: Path, name: str, is_module: Callable[[str], bool]) -> set[str]:
    """The dotted names of the modules that the file at ``path`` (the module ``name``) imports,
    anywhere in it, relative imports resolved.

    ``from M import x`` counts as importing ``M.x`` where ``is_module("M.x")`` says that is a
    module (``from .. import ir_attrs``), else as importing ``M`` (a name taken from ``M``, such
    as ``from tvm_ascend import build``: the package face).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(package, node.level, node.module)
            for alias in node.names:
                sub = f"{module}.{alias.name}" if module else alias.name
                found.add(sub if is_module(sub) else module)
    found.discard("")
    return found


def _absolute(package: str, level: int, module: str | None) -> str:
    """The module that ``from <level dots><module> import ...`` in ``package`` names."""
    if not level:
        return module or ""
    parts = package.split(".") if package else []
    base = parts[:len(parts) - level + 1]
    return ".".join(base + ([module] if module else []))
