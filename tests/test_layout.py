"""The import directions of the package's floor plan, read from the source (lazy imports too).

The flow runs frontend -> prepare -> partition -> schedules -> codegen -> runtime; the ground
(config, errors, decision, soc, ir_attrs, kernel_record) and the cost model stand below every
stage, the tuner and the command line above the pipeline. An import that runs back up (the tuner's search
imported by the cost model, a stage imported by the config) is how the import loops this
package once had came about, so these tests read every ``import`` statement, inside functions
included, and fail naming the file and the module at fault.
"""
from __future__ import annotations

from pathlib import Path

import tvm_ascend
from source_imports import imported_modules, module_name

PACKAGE = Path(tvm_ascend.__file__).resolve().parent
ROOT = "tvm_ascend"
GROUND = ("config", "errors", "decision", "soc", "ir_attrs", "kernel_record")


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` (``tvm_ascend.x.y``) names a module or package of this package."""
    if not dotted.startswith(ROOT + "."):
        return False
    where = PACKAGE.joinpath(*dotted.split(".")[1:])
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def package_imports(path: Path) -> set[str]:
    """The modules of this package that the file at ``path`` imports, anywhere in it:
    ``tvm_ascend`` itself for a name taken from the package face (``from .. import build``),
    the submodule for ``from .. import ir_attrs``."""
    found = imported_modules(path, module_name(path, PACKAGE, ROOT), _is_module)
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


# ---- the test house -------------------------------------------------------------------------
TESTS = Path(__file__).resolve().parent


def _test_modules_imported(path: Path, root: Path, test_modules: set[str]) -> list[str]:
    """The test modules (``test_*.py`` files) that the file at ``path`` under ``root`` (a
    folder on ``sys.path``, as tests/ is under pytest) imports."""
    def is_test(dotted: str) -> bool:
        return dotted.rpartition(".")[2] in test_modules

    name = module_name(path, root)
    return sorted(m for m in imported_modules(path, name, is_test) if is_test(m))


def test_the_test_reader_sees_an_import_of_a_test_file(tmp_path):
    """A control: each way of importing another test file is seen, in a function too."""
    source = tmp_path / "test_sample.py"
    source.write_text("from test_row_reduce import x\nimport test_attention as a\n"
                      "def f():\n    from tests import test_conv\n    from .test_pool import y\n"
                      "from onnx_models import ModelBuilder\n")
    tests = {"test_row_reduce", "test_attention", "test_conv", "test_pool", "test_sample"}
    found = _test_modules_imported(source, tmp_path, tests)
    assert found == ["test_attention", "test_pool", "test_row_reduce", "tests.test_conv"]


def test_no_file_in_tests_imports_a_test_file():
    """Helpers that several test files share live in support modules (conftest.py,
    onnx_models.py, build_checks.py, source_imports.py): a test file imported by another ties
    the two together, runs the first one's module code again, and a helper's home is then found
    only by grepping."""
    files = sorted(TESTS.rglob("*.py"))
    test_modules = {p.stem for p in files if p.stem.startswith("test_")}
    found = {str(p.relative_to(TESTS)): _test_modules_imported(p, TESTS, test_modules)
             for p in files}
    bad = {path: modules for path, modules in found.items() if modules}
    assert not bad, f"files in tests/ import test files {bad}: move the helpers they take into " \
                    "a support module (onnx_models.py for model builders, build_checks.py " \
                    "for checks of a build) and import them from there"
