"""The import directions of the package's floor plan, read from the source (lazy imports too).

The flow runs frontend -> prepare -> partition -> schedules -> codegen -> runtime; the ground
(config, errors, decision, soc, ir_attrs, kernel_record) and the cost model stand below every
stage, the tuner and the command line above the pipeline. An import that runs back up (the tuner's search
imported by the cost model, a stage imported by the config) is how the import loops this
package once had came about, so these tests read every ``import`` statement, inside functions
included, and fail naming the file and the module at fault.
"""
from __future__ import annotations

import ast
from pathlib import Path

import tvm_ascend

PACKAGE = Path(tvm_ascend.__file__).resolve().parent
ROOT = "tvm_ascend"
GROUND = ("config", "errors", "decision", "soc", "ir_attrs", "kernel_record")


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((ROOT,) + parts)


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` (``tvm_ascend.x.y``) names a module or package of this package."""
    where = PACKAGE.joinpath(*dotted.split(".")[1:])
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def package_imports(path: Path) -> set[str]:
    """The modules of this package that the file at ``path`` imports, anywhere in it:
    ``tvm_ascend`` itself for a name taken from the package face (``from .. import build``),
    the submodule for ``from .. import ir_attrs``."""
    name = _dotted(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if module.startswith(ROOT) and _is_module(sub) else module)
    return {m for m in found if m == ROOT or m.startswith(ROOT + ".")}


def _files(*names: str) -> list[Path]:
    files = []
    for name in names:
        where = PACKAGE / name
        files += sorted(where.rglob("*.py")) if where.is_dir() else [where.with_suffix(".py")]
    return files


def _within(module: str, *rooms: str) -> bool:
    return any(module == f"{ROOT}.{room}" or module.startswith(f"{ROOT}.{room}.")
               for room in rooms)


def test_the_reader_sees_lazy_imports_and_names_from_the_face():
    """A control: the reader finds an import made inside a function and tells a name from the
    package face apart from a submodule, so the direction tests below cannot pass by seeing
    nothing."""
    search = package_imports(PACKAGE / "tuning" / "search.py")
    assert "tvm_ascend.pipeline" in search and "tvm_ascend.ir_attrs" in search, search
    assert "tvm_ascend.cost_model.xgb_model" in search, search  # imported in tune_model
    assert package_imports(PACKAGE / "__init__.py") >= {"tvm_ascend.pipeline",
                                                          "tvm_ascend.config"}


def test_the_ground_imports_no_stage():
    for path in _files(*GROUND):
        upward = sorted(m for m in package_imports(path) if not _within(m, *GROUND))
        assert not upward, f"{path.relative_to(PACKAGE)} imports {upward}: the ground " \
                           f"({', '.join(GROUND)}) may import only itself"


def test_the_cost_model_imports_no_tuner_pipeline_or_face():
    for path in _files("cost_model"):
        upward = sorted(m for m in package_imports(path)
                        if m == ROOT or _within(m, "tuning", "pipeline", "cli"))
        assert not upward, f"{path.relative_to(PACKAGE)} imports {upward}: the cost model " \
                           "stands below the pipeline and the tuner that drives it"


def test_only_the_command_line_imports_the_tuner():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "tuning" or path.name == "cli.py":
            continue
        tuner = sorted(m for m in package_imports(path) if _within(m, "tuning"))
        assert not tuner, f"{path.relative_to(PACKAGE)} imports {tuner}: the tuner stands " \
                          "above the pipeline, beside cli.py"


def test_every_package_folder_is_in_pyproject():
    """pyproject lists its packages by name (two of them live outside tvm_ascend/), so a new
    folder left out of the list is missing from every wheel, while the editable install the
    tests use still finds it: only a user's ``pip install .`` would show it."""
    import tomllib

    repo = PACKAGE.parent
    setup = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {package: (repo / folder).resolve() for package, folder in setup["package-dir"].items()}
    found = set()
    for package, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            name = ".".join((package,) + parts)
            # a folder mapped from elsewhere (a worktree's tvm_ascend/schedules link) is its own root
            if not any(name.startswith(other + ".") or name == other for other in roots
                       if other != package and other.startswith(package + ".")):
                found.add(name)
    missing = sorted(found - set(setup["packages"]))
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}"
