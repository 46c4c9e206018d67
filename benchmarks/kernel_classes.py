"""Per-kernel efficiency of a build: each launch's estimate over its own bound, by kernel class.

Issue #19 sets targets per class of kernel (large matmuls within 1.25x of their cube time,
fused attention at s512 within 2x, 3x3 convs within 1.5x). The classes, read off a fusion
report's group (its tiling's template and plan):

- ``large_matmul``: a matmul (``matmul``, ``matmul_rows`` or ``matmul_gated``, whose cube time
  counts both its products) whose M, N and K are all at
  least ``LARGE_MATMUL`` (M: the rows of C one product has, a batch over shared weights
  folded in, as the cube sees it);
- ``matmul``: every other matmul;
- ``attention``: the fused attention template;
- ``conv3x3``: a 3x3 convolution (``conv2d``, either method); ``conv``: every other one;
- ``vector``: every other NPU kernel (elementwise, reductions, data movement, pooling).

The bound of a cube class is its cube time (``cost_model.timing.cube_bound_us``: the
kernel's multiply-adds on every AI core's cube at the calibrated peak); of a vector kernel,
its roofline (the timing model's max of HBM/L2 bytes at their rates and vector work at its
peak). The estimate is the launch's ``time_us`` with its start-up. A class's ratio is its
kernels' estimates summed over their bounds summed (so the long kernels weigh most);
``worst`` is the highest single kernel's ratio. Host groups are not NPU kernels and count in
no class. ESTIMATE throughout: the timing model's figures, no device measurement.

Example
-------
>>> group = {"on_npu": True, "estimate": {"time_us": 30.0, "roofline_us": 10.0},
...          "tiling": {"template": "elementwise", "work": {"cube_macs": 0}}}
>>> kernel_class(group)
'vector'
>>> efficiency([group], "Ascend910B1")["vector"]["ratio"]
3.0
"""
from __future__ import annotations

from tvm_ascend.cost_model.timing import cube_bound_us
from tvm_ascend.soc import get_soc

LARGE_MATMUL = 2048  # issue #19: "large matmuls (M, N, K >= 2048)"
CLASSES = ("large_matmul", "matmul", "attention", "conv3x3", "conv", "vector")
CLASS_LABELS = {"large_matmul": "large matmul", "matmul": "other matmul",
                "attention": "fused attention", "conv3x3": "3x3 conv", "conv": "other conv",
                "vector": "vector"}
_MATMULS = ("matmul", "matmul_rows", "matmul_gated")
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int8": 1}


def _plan_shape(group: dict) -> dict:
    return ((group.get("tiling") or {}).get("plan") or {}).get("shape") or {}


def matmul_dims(shape: dict) -> tuple[int, int, int]:
    """(M, N, K) of a matmul plan's shape as the cube computes one product: the batch folds
    into M where B is shared by every batch (the weights of a linear layer)."""
    rows = shape["m"] * (1 if shape.get("b_batched") else shape.get("batch", 1))
    return rows, shape["n"], shape["k"]


def kernel_class(group: dict) -> str | None:
    """The class (``CLASSES``) of a fusion report's group; None for a host group or one
    without a tiling (no NPU kernel)."""
    tiling = group.get("tiling")
    if not group.get("on_npu") or not tiling:
        return None
    template = tiling.get("template")
    if template in _MATMULS:
        dims = matmul_dims(_plan_shape(group))
        return "large_matmul" if min(dims) >= LARGE_MATMUL else "matmul"
    if template == "attention":
        return "attention"
    if template == "conv2d":
        shape = _plan_shape(group)
        return "conv3x3" if (shape.get("kh"), shape.get("kw")) == (3, 3) else "conv"
    return "vector"


def kernel_bound_us(group: dict, soc) -> float:
    """The group's own bound (us): cube time for a cube class, the roofline for a vector
    kernel (see the module docstring)."""
    cls = kernel_class(group)
    if cls is None:
        raise ValueError(f"group {group.get('id')} is no NPU kernel")
    if cls == "vector":
        return float(group["estimate"]["roofline_us"])
    dtype = _plan_shape(group).get("dtype", "float16")
    macs = group["tiling"]["work"]["cube_macs"]
    return cube_bound_us(macs, _DTYPE_BYTES.get(dtype, 2), soc)


def efficiency(groups: list, soc_name: str) -> dict:
    """Per class present in ``groups`` (a fusion report's ``groups``, built for
    ``soc_name``): ``kernels`` (launches), ``est_us`` and ``bound_us`` (summed), ``ratio``
    (est_us / bound_us) and ``worst`` (the highest single launch's ratio), rounded."""
    soc = get_soc(soc_name)
    found: dict = {}
    for group in groups:
        cls = kernel_class(group)
        if cls is None or not group.get("launch", True):
            continue
        est, bound = float(group["estimate"]["time_us"]), kernel_bound_us(group, soc)
        entry = found.setdefault(cls, {"kernels": 0, "est_us": 0.0, "bound_us": 0.0,
                                       "worst": 0.0})
        entry["kernels"] += 1
        entry["est_us"] += est
        entry["bound_us"] += bound
        if bound > 0:
            entry["worst"] = max(entry["worst"], est / bound)
    return {cls: {"kernels": e["kernels"], "est_us": round(e["est_us"], 3),
                  "bound_us": round(e["bound_us"], 3),
                  "ratio": round(e["est_us"] / e["bound_us"], 3) if e["bound_us"] > 0 else None,
                  "worst": round(e["worst"], 3) if e["bound_us"] > 0 else None}
            for cls, e in ((c, found[c]) for c in CLASSES if c in found)}


def report_efficiency(report: dict) -> dict | None:
    """``efficiency`` of a fusion report's groups on the report's SoC; None for a report
    that carries no groups or no SoC."""
    groups, soc = report.get("groups"), report.get("soc_version")
    if not groups or not soc:
        return None
    return efficiency(groups, soc)


def efficiency_cell(entry: dict | None) -> str:
    """A table cell for one class of a record: ``ratio x (n)``, worst kernel in brackets
    where it differs; ``-`` where the record has no kernel of the class."""
    if not entry:
        return "-"
    if entry.get("ratio") is None:
        return f"n/a ({entry['kernels']})"
    text = f"{entry['ratio']:.2f}x ({entry['kernels']})"
    if entry["kernels"] > 1 and entry.get("worst") and abs(entry["worst"] - entry["ratio"]) >= 0.005:
        text += f" [worst {entry['worst']:.2f}x]"
    return text
