"""``tvm-ascend compare``: one model built several ways, side by side, and where precision goes.

For each variant (fusion off, the ATC-style emulation, conservative, aggressive) it reports the
launches, HBM and L2 bytes and estimated latency (with its band) of the build and, against
onnxruntime (or the fusion-off build when onnxruntime is not installed), the error of every model output and of
every fused group: each group's output tensor is made a model output for that check, so the
group that introduces an error is named, not just the model that shows it.

With a dimension given as a range (``--input_shape "input_ids:2,1~512"``) each variant is
built once for the range and run at the range's ends and midpoint, a row each
(``"<variant> [seq=1]"``), with the estimate at that point (each kernel tiled at run time at
its estimate there).

With ``atc`` (``--atc``) it also puts a real ATC run of the model beside the build, per fusion
rule and per ONNX op (``atc_side``; the run is ``atc_run.py``, the files' reader
``partition/atc_result.py``, the table ``atc_compare.py``).

Example
-------
>>> from tvm_ascend.compare import compare_model
>>> rows = compare_model("model.onnx")                    # doctest: +SKIP
>>> print(format_comparison(rows))                        # doctest: +SKIP
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from .config import CompileConfig
from .errors import ModelLoadError
from .frontend.gears import config_gears

# Where CANN installs put ATC, relative to the toolkit root (ASCEND_HOME_PATH), first match wins.
ATC_CANDIDATES = ("bin/atc", "compiler/bin/atc", "atc/bin/atc")

VARIANTS = {
    "off": dict(fusion_level="off"),
    "atc_style": dict(rule_set="atc_style"),
    "conservative": dict(fusion_level="conservative"),
    "aggressive": dict(fusion_level="aggressive"),
}


@dataclass
class VariantResult:
    """One build of the model and its errors."""

    name: str
    launches: int
    gm_bytes: int
    est_latency_us: float
    hbm_bytes: int = 0   # of gm_bytes, those HBM moves (the rest L2 serves; estimates)
    l2_bytes: int = 0
    est_band_us: tuple = (0.0, 0.0)  # fastest and slowest time the calibration allows
    # end to end with the host's submissions, at the low and the high end of their range
    est_end_to_end_us: tuple = (0.0, 0.0)
    output_errors: dict = field(default_factory=dict)  # output name -> (max abs, max rel)
    group_errors: list = field(default_factory=list)   # (group id, rule, tensor, abs, rel)


def _onnx(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    try:
        return onnx.load(str(model))
    except Exception as err:  # noqa: BLE001 - protobuf raises several kinds
        raise ModelLoadError(f"cannot read ONNX model {model!r}: {err}") from err


def random_inputs(model, input_shape=None, seed: int = 0) -> dict:
    """Seeded inputs for every graph input (unit normal floats, small ints, booleans)."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    given = dict(input_shape or {})
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        shape = tuple(given.get(value.name, dims))
        if any(not isinstance(d, int) or d <= 0 for d in shape):
            raise ModelLoadError(f"input {value.name!r} has a dynamic shape {shape}; give "
                                 "--input_shape to compare")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            feeds[value.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feeds


def _errors(actual, expected) -> tuple[float, float]:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    diff = np.abs(a - e)
    finite = np.isfinite(diff)
    if not finite.all():
        return float("inf"), float("inf")
    abs_err = float(diff.max()) if diff.size else 0.0
    return abs_err, abs_err / (float(np.abs(e).max()) + 1e-12) if e.size else 0.0


def _group_outputs(model, report) -> dict:
    """Group id -> an ONNX tensor the group writes and something outside it reads."""
    names = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]
    by_name = dict(zip(names, model.graph.node))
    readers: dict = {}
    for name, node in zip(names, model.graph.node):
        for tensor in node.input:
            readers.setdefault(tensor, set()).add(name)
    graph_outputs = {o.name for o in model.graph.output}
    out = {}
    for group in report["groups"]:
        members = set(group["nodes"])
        if len(members) < 2 or not group["on_npu"]:
            continue
        for name in group["nodes"]:
            node = by_name.get(name)
            for tensor in node.output if node is not None else []:
                if tensor in graph_outputs or readers.get(tensor, set()) - members:
                    out[group["id"]] = (group["rule"], tensor)
    return out


def _with_outputs(model, tensors):
    """``model`` with ``tensors`` added as graph outputs (types left to inference)."""
    from onnx import helper

    exposed = copy.deepcopy(model)
    present = {o.name for o in exposed.graph.output}
    for tensor in tensors:
        if tensor not in present:
            exposed.graph.output.append(helper.make_empty_tensor_value_info(tensor))
    try:
        from onnx import shape_inference
        exposed = shape_inference.infer_shapes(exposed)
        typed = {v.name: v for v in exposed.graph.value_info}
        for index, value in enumerate(exposed.graph.output):
            if not value.type.HasField("tensor_type") and value.name in typed:
                exposed.graph.output[index].CopyFrom(typed[value.name])
    except Exception:  # noqa: BLE001 - without inferred types the importer still tries
        pass
    return exposed


def _reference(model, feeds, fallback_config):
    """Reference outputs by name: onnxruntime, else the fusion-off build (said in the table)."""
    names = [o.name for o in model.graph.output]
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return dict(zip(names, session.run(None, feeds))), "onnxruntime"
    except ImportError:
        from .pipeline import build
        lib = build(model, config=fallback_config.replace(fusion_level="off"))
        return dict(zip(names, lib.run(feeds))), "tvm-ascend with fusion off"


def compare_model(model, config: CompileConfig | None = None, variants=None, seed: int = 0,
                  groups: bool = True, atc=None, atc_timeout_s: float | None = None) -> tuple:
    """Build ``model`` once per variant and measure its outputs' and fused groups' errors.

    With gears (``config.dynamic_batch_size`` ...) each variant is one geared library, and
    each of its gears is a row (``"<variant> [<gear>]"``), run on inputs of that gear's shapes
    and measured with that gear's section of the report.

    ``atc`` adds the side-by-side with a real ATC (``atc_side``): ``True`` finds ``atc`` and
    runs it with ``config``'s flags; a folder is a recorded ATC run (its
    ``fusion_result.json`` and ``ge_onnx_*.pbtxt`` dump); another path is the ``atc`` to run.

    Returns (one VariantResult per variant and gear, the name of the reference), and with
    ``atc`` a third item: the side-by-side (a dict, ``atc_compare.side_by_side``) or, when no
    ``atc`` is installed, the one line that says so.
    """
    from .pipeline import build

    config = config or CompileConfig()
    given, model = model, _onnx(model)  # a path goes to atc as it is (external weights stay)
    spec = config_gears(config)
    points = range_points(model, config.input_shape) if spec is None else None
    if spec is not None:
        shapes = [(gear, gear.shapes) for gear in spec.gears]
    elif points:
        shapes = list(points)
    else:
        shapes = [(None, config.input_shape)]
    cases = []
    for gear, shape in shapes:
        feeds = random_inputs(model, shape, seed)
        cases.append((gear, feeds) + _reference(model, feeds, _static(config, shape)))
    results, reports = [], []  # (config, report): configs hold dicts, so no dict keys
    for name in variants or VARIANTS:
        cfg = config.replace(**VARIANTS[name])
        lib = build(model, config=cfg)
        report = lib.fusion_report()
        reports.append((cfg, report))
        shared = []  # a range's points: one build of the exposed model serves them all
        for gear, feeds, reference, _ in cases:
            if isinstance(gear, RangePoint):
                section, label = at_point(report, gear.sizes), f"{name} [{gear}]"
                check = (feeds, cfg, shared)
            else:
                section = report if gear is None else report["gears"][gear.index]
                label = name if gear is None else f"{name} [{gear.label}]"
                check = (feeds, cfg if gear is None else _static(cfg, gear.shapes))
            results.append(_variant_result(label, model, lib.run(feeds), section, reference,
                                           check if groups else None))
    if atc is None or atc is False:
        return results, cases[0][3]
    # the variant built with the config as given, if one is, stands for it beside ATC
    same = next((report for cfg, report in reports if cfg == config), None)
    return results, cases[0][3], atc_side(given, config, atc, atc_timeout_s, same)


def atc_side(model, config: CompileConfig, atc=True, timeout_s: float | None = None,
             report: dict | None = None):
    """The side-by-side of a real ATC build of ``model`` and tvm-ascend's build with ``config``
    (a dict, ``atc_compare.side_by_side``), or the one line saying no ``atc`` is installed.

    ``atc``: ``True`` (find it: ``find_atc``), the path of an ``atc`` to run, a folder holding
    a recorded ATC run, or a ``partition.atc_result.AtcRun``. ``report`` is the fusion report
    of ``config``'s build when the caller has it (else ``model`` is built here).
    """
    from pathlib import Path

    from .atc_compare import side_by_side
    from .atc_run import DEFAULT_TIMEOUT_S, run_atc
    from .partition.atc_result import AtcRun, read_atc_output
    from .pipeline import build

    given, model = model, _onnx(model)
    if isinstance(atc, AtcRun):
        run = atc
    elif atc is not True and Path(atc).is_dir():
        run = read_atc_output(atc)
    else:
        path, reason = find_atc() if atc is True else (str(atc), "")
        if path is None:
            return reason  # before any build: nothing to put beside it
        run = run_atc(given, config, path, timeout_s or DEFAULT_TIMEOUT_S)
    if report is None:
        report = build(model, config=config).fusion_report()
    if "groups" not in report:  # geared: the first gear's partition stands for the model's
        report = report["gears"][0]
    return side_by_side(run, report, model)


@dataclass(frozen=True)
class RangePoint:
    """One point of the ranged dimensions a comparison runs at: {dimension: size}."""

    sizes: tuple  # ((name, size), ...)

    def __str__(self) -> str:
        return ", ".join(f"{name}={size}" for name, size in self.sizes)


def range_points(model, input_shape) -> list[tuple[RangePoint, dict]] | None:
    """(point, static input shapes) at the lower end, the midpoint and the upper end of every
    ranged dimension of ``input_shape`` (a dimension is the ONNX ``dim_param`` its inputs
    share, so ``input_ids`` and ``attention_mask`` over ``seq`` get one length); None when no
    dimension is given as a range."""
    from .frontend.onnx_loader import parse_input_shape

    parsed = parse_input_shape(input_shape)
    ranges, where = {}, {}  # dimension -> (lo, hi); (input, axis) -> dimension
    for value in model.graph.input:
        declared = value.type.tensor_type.shape.dim
        for axis, dim in enumerate(parsed.get(value.name, ())):
            if isinstance(dim, tuple):
                param = declared[axis].dim_param if axis < len(declared) else ""
                key = param or f"{value.name}[{axis}]"
                low, high = ranges.get(key, dim)
                ranges[key] = (max(low, dim[0]), min(high, dim[1]))
                where[(value.name, axis)] = key
    if not ranges:
        return None
    points = []
    for pick in (lambda lo, hi: lo, lambda lo, hi: (lo + hi) // 2, lambda lo, hi: hi):
        sizes = {key: pick(*bounds) for key, bounds in ranges.items()}
        point = RangePoint(tuple(sizes.items()))
        if any(point == seen for seen, _ in points):
            continue
        shapes = {name: tuple(sizes[where[(name, axis)]] if (name, axis) in where else d
                              for axis, d in enumerate(shape)) for name, shape in parsed.items()}
        points.append((point, shapes))
    return points


def at_point(report: dict, sizes: tuple) -> dict:
    """``report`` with every kernel tiled at run time at its estimate for ``sizes`` (its band
    taken there too) and the model estimate summed again from them (the report's own is over
    the range's means). Bytes stay the report's: counted at the range's upper bound."""
    from .partition.report import model_estimate, with_band

    wanted = dict(sizes)
    groups = []
    for group in report["groups"]:
        estimate = group.get("estimate", {})
        for entry in estimate.get("range_us", []):
            if all(wanted.get(k) == v for k, v in entry["sizes"].items()):
                at = with_band({**estimate, "time_us": entry["time_us"]},
                               (group.get("tiling") or {}).get("template"))
                group = {**group, "estimate": at}
                break
        groups.append(group)
    return {**report, "groups": groups,
            "estimate": model_estimate(groups, report["estimate"]["soc"])}


def _static(config: CompileConfig, shapes) -> CompileConfig:
    """``config`` for one static shape: gears dropped (a gear's kernels built alone)."""
    return config.replace(input_shape=shapes, dynamic_batch_size="", dynamic_image_size="",
                          dynamic_dims="")


def _variant_result(name: str, model, outputs: list, report: dict, reference: dict,
                    group_check) -> VariantResult:
    """One row: ``report``'s launches, bytes and estimate, the ``outputs``' errors and, when
    ``group_check`` = (feeds, config[, cache]) is given, each fused group's."""
    estimate = report["estimate"]
    result = VariantResult(name, report["kernels"]["ascend"] + report["kernels"]["host"],
                           sum(g.get("gm_bytes", 0) for g in report["groups"]),
                           estimate["latency_us"], estimate["hbm_bytes"],
                           estimate["l2_bytes"], tuple(estimate["latency_band_us"]),
                           (estimate["latency_us_low"], estimate["latency_us_high"]))
    named = dict(zip([o.name for o in model.graph.output], outputs))
    result.output_errors = {k: _errors(v, reference[k]) for k, v in named.items()}
    if group_check is not None:
        result.group_errors = _group_errors(model, report, *group_check)
    return result


def _group_errors(model, report, feeds, cfg, cache=None) -> list:
    """Each fused group's output against onnxruntime's value of the same tensor; ``cache``
    (a list) keeps the build of the model with the groups' outputs exposed for the next call
    (a range's points share one build with ``cfg``)."""
    from .pipeline import build

    wanted = _group_outputs(model, report)
    if not wanted:
        return []
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    exposed = _with_outputs(model, [tensor for _, tensor in wanted.values()])
    names = [o.name for o in exposed.graph.output]
    session = ort.InferenceSession(exposed.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    expected = dict(zip(names, session.run(None, feeds)))
    built = cache[0] if cache else build(exposed, config=cfg)
    if cache is not None and not cache:
        cache.append(built)
    actual = dict(zip(names, built.run(feeds)))
    rows = []
    for group_id, (rule, tensor) in wanted.items():
        rows.append((group_id, rule, tensor) + _errors(actual[tensor], expected[tensor]))
    return sorted(rows, key=lambda row: -row[4])


def find_atc(environ=None) -> tuple:
    """A real ATC: (its path, "") when one is on PATH or under the CANN toolkit root
    (``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME``), else (None, a one-line reason).

    Example
    -------
    >>> find_atc({"PATH": ""})
    (None, 'real atc: not installed (not on PATH; ASCEND_HOME_PATH is not set)')
    """
    import os
    import shutil
    from pathlib import Path

    env = os.environ if environ is None else environ
    found = shutil.which("atc", path=env.get("PATH", ""))
    if found:
        return found, ""
    home = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    for relative in ATC_CANDIDATES if home else ():
        candidate = Path(home) / relative
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate), ""
    where = f"none under {home}" if home else "ASCEND_HOME_PATH is not set"
    return None, f"real atc: not installed (not on PATH; {where})"


def format_comparison(results: list[VariantResult], source: str) -> str:
    """The comparison as plain-text tables (latencies are labelled estimates)."""
    width = max([14] + [len(r.name) + 2 for r in results])  # gears: "<variant> [<gear>]"
    lines = [f"{'variant':<{width}}{'launches':>9}{'HBM bytes':>14}{'L2 bytes':>14}{'est. us':>10}"
             f"{'band us':>20}{'end to end us':>20}  max rel err per output (vs {source})"]
    for r in results:
        errs = ", ".join(f"{k}: {v[1]:.2e}" for k, v in r.output_errors.items())
        band = f"{r.est_band_us[0]:.1f}-{r.est_band_us[1]:.1f}"
        host = f"{r.est_end_to_end_us[0]:.1f}-{r.est_end_to_end_us[1]:.1f}"
        lines.append(f"{r.name:<{width}}{r.launches:>9}{r.hbm_bytes:>14}{r.l2_bytes:>14}"
                     f"{r.est_latency_us:>10.1f}{band:>20}{host:>20}  {errs}")
    lines.append("(est. us: ESTIMATE from the timing model, the launches' device times summed; "
                 "band: the times the calibration rows of each kernel's class allow, "
                 "benchmarks/calibration.json; end to end: the launches submitted one by one "
                 "from the host, at the low and the high end of the measured submission time; "
                 "HBM / L2 bytes: estimates of where the GM bytes are served)")
    for r in results:
        if r.group_errors:
            lines += ["", f"{r.name}: fused groups by error (their output tensor vs {source})"]
            for group_id, rule, tensor, abs_err, rel_err in r.group_errors[:10]:
                lines.append(f"  {group_id:<6}{rule:<40} {tensor:<24} abs {abs_err:.2e}  "
                             f"rel {rel_err:.2e}")
    return "\n".join(lines)


__all__ = ["VARIANTS", "VariantResult", "atc_side", "compare_model", "find_atc",
           "format_comparison", "random_inputs"]
