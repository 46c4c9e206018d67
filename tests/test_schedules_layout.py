"""The floor plan of ``schedules/``: no import circle, nothing from the stages above, and one
registry per template (its knobs on the class, its printer under its name).

Templates and TIR readers (``schedules/analysis/``) sit below the partitioner, codegen and the
timing model, which all read them; a circle among them, or an import of a later stage, is how
the house's conv circle (conv2d <-> conv_img2col, conv_traffic) and the pool reader's arrow into
the conv template came about. The import checks read the source (every import, lazy and
TYPE_CHECKING ones included), so they hold without importing anything.
"""
import dataclasses
import inspect
from pathlib import Path

import pytest

from source_imports import imported_modules, module_name

ROOT = Path(__file__).resolve().parent.parent / "schedules"
PACKAGE = "tvm_ascend.schedules"
# the ground modules a template may stand on; everything else in tvm_ascend is a later stage
GROUND = {"tvm_ascend.decision", "tvm_ascend.errors", "tvm_ascend.soc"}


def _modules() -> dict:
    """{dotted module name: path} of every Python file under ``schedules/``."""
    return {module_name(path, ROOT, PACKAGE): path for path in sorted(ROOT.rglob("*.py"))}


def _graph() -> dict:
    """{module: the modules it imports} (the submodule where ``from M import x`` names one)."""
    modules = _modules()
    return {name: imported_modules(path, name, modules.__contains__)
            for name, path in modules.items()}


def _cycle(graph: dict) -> list | None:
    """One import circle among ``graph``'s own modules as a list of names, or None."""
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for dep in sorted(graph[node]):
            if dep not in graph or dep == node:
                continue
            if state.get(dep) == "open":
                return trail[trail.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep, trail + [dep])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_the_check_reads_the_tree():
    graph = _graph()
    assert f"{PACKAGE}.analysis.tir_walk" in graph
    assert f"{PACKAGE}.analysis.tir_walk" in graph[f"{PACKAGE}.elementwise"]


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_schedules_has_no_import_circle():
    circle = _cycle(_graph())
    assert circle is None, "import circle in schedules/: " + " -> ".join(circle)


@pytest.mark.parametrize("name", sorted(_modules()))
def test_schedules_imports_only_the_ground_of_tvm_ascend(name):
    above = sorted(dep for dep in _graph()[name] if dep.startswith("tvm_ascend.")
                   and not dep.startswith(PACKAGE) and dep not in GROUND)
    assert not above, f"{name} imports {above}: only {sorted(GROUND)} lie below the templates"


def test_the_readers_import_no_template():
    """``schedules/analysis/`` is what templates, printers and the timing model share; a
    reader that imports a template makes that template everybody's."""
    graph = _graph()
    shared = (f"{PACKAGE}.analysis", f"{PACKAGE}.tiling")
    for name, deps in graph.items():
        if name.startswith(f"{PACKAGE}.analysis"):
            bad = sorted(d for d in deps if d.startswith(PACKAGE + ".")
                         and not d.startswith(shared))
            assert not bad, f"{name} imports the templates {bad}"


# ---- one registry per template --------------------------------------------------------------
def _templates():
    from tvm_ascend.schedules import TEMPLATES

    return TEMPLATES


@pytest.mark.parametrize("template", _templates(), ids=lambda t: t.name)
def test_every_template_keeps_the_contract(template):
    """Every template is a ``Template`` that defines its own ``analyse``, ``plan`` and
    ``apply`` (the planner calls them apart: one analysis per group, one plan per candidate,
    one apply for the kept plan) and leaves ``schedule``, the three in a row, to the base."""
    from tvm_ascend.schedules.template import Template

    assert issubclass(template, Template), f"{template.__name__} is no Template"
    for method in ("analyse", "plan", "apply"):
        assert method in vars(template), f"{template.__name__} does not define {method}"
    assert "schedule" not in vars(template), f"{template.__name__} defines its own schedule"


@pytest.mark.parametrize("template", _templates(), ids=lambda t: t.name)
def test_every_template_names_the_knobs_its_plan_takes(template):
    """``Template.Knobs`` is what the tuning records are read into (``knobs_from_json``) and
    what the partitioner's choice is written from; a template without it cannot be tuned."""
    from tvm_ascend.schedules import knobs_from_json

    knobs = template.Knobs
    assert dataclasses.is_dataclass(knobs) and knobs.__dataclass_params__.frozen
    annotation = inspect.signature(template.plan).parameters["knobs"].annotation
    assert knobs.__name__ in str(annotation), f"{template.name}.plan takes {annotation}"
    default = knobs()
    assert knobs_from_json(template.name, dataclasses.asdict(default)) == default
    with pytest.raises(TypeError, match="unknown"):
        knobs_from_json(template.name, {"no_such_knob": 1})


def test_every_template_has_a_printer_and_every_printer_a_template():
    from tvm_ascend.codegen.ascendc_printer import KERNEL_PRINTERS

    assert set(KERNEL_PRINTERS) == {t.name for t in _templates()}
