"""CompileConfig: the one configuration object, passed down the flow.

Environment variables only override it; they are declared here, once, with type, default and help.

Example
-------
>>> from tvm_ascend import CompileConfig
>>> cfg = CompileConfig(fusion_level="aggressive", soc_version="Ascend310P3")
>>> cfg.with_env({"AUTOFUSION_ENABLE": "0"}).autofusion
False
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Mapping

from .errors import FusionConfigError
from .soc import get_soc

RULE_SETS = ("tvm_ascend", "atc_style", "tvm_fuseops")

FUSION_LEVELS = ("off", "conservative", "aggressive")
CACHE_MODES = ("enable", "force", "disable")  # ATC's --op_compiler_cache_mode
PRECISION_MODES = ("force_fp16", "allow_fp32_to_fp16", "allow_mix_precision",
                   "must_keep_origin_dtype", "force_fp32")
IMPL_MODES = ("high_precision", "high_performance")  # ATC's --op_select_implmode
# what picks a group's tiling among its template's variants (cost_model/planner_model.py)
PLANNER_MODELS = ("xgboost", "timing")
# what the kernels are built for: the C++ CPU emulator, or the NPU with a CANN toolkit
DEVICES = ("emulator", "npu")


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if name == "DUMP_GE_GRAPH" and lowered in ("2", "3"):
        return True  # ATC's levels (without weights / nodes only): every dump here is light
    if lowered in ("1", "true", "on", "yes"):
        return True
    if lowered in ("0", "false", "off", "no", ""):
        return False
    raise FusionConfigError(f"environment variable {name}={text!r} is not a boolean (use 1 or 0)")


@dataclass(frozen=True)
class EnvOverride:
    """An environment variable that overrides one CompileConfig field."""

    variable: str
    field: str
    kind: type
    help: str


ENV_OVERRIDES = (
    EnvOverride("AUTOFUSION_ENABLE", "autofusion", bool,
                "1/0: turn automatic fusion on or off (as CANN's Graph-Autofusion switch)"),
    EnvOverride("DUMP_GRAPH", "dump_graph", bool, "1: write numbered graph dumps"),
    EnvOverride("DUMP_GE_GRAPH", "dump_graph", bool, "ATC's spelling of DUMP_GRAPH (1, 2 or 3)"),
    EnvOverride("DUMP_GRAPH_PATH", "dump_path", str, "folder for graph dumps and kernel sources"),
    EnvOverride("TVM_ASCEND_SOC_VERSION", "soc_version", str,
                "SoC to compile for, e.g. Ascend910B1"),
    EnvOverride("TVM_ASCEND_CACHE_DIR", "cache_dir", str, "folder of the compiled-kernel cache"),
    EnvOverride("TVM_ASCEND_BUILD_CACHE", "build_cache", bool,
                "1/0: reuse (or not) a whole earlier build of the same model and configuration"),
    EnvOverride("TVM_ASCEND_STRICT", "strict", bool,
                "1: a kernel that fails to schedule, print or compile fails the build (tests)"),
)


@dataclass(frozen=True)
class CompileConfig:
    """Everything that steers one compilation.

    Parameters
    ----------
    autofusion : bool
        Fuse neighbouring operators into one kernel. ``False`` gives one kernel per operator.
    fusion_level : str
        ``"off"``, ``"conservative"`` (only rules whose gain is certain) or ``"aggressive"``
        (adds the rules whose gain the cost model has to judge: attention as one kernel,
        HorizontalFusion, recomputing shared results); ``tvm-ascend explain --rules`` lists
        which rule belongs to which level.
    dump_graph : bool
        Write graph dumps and kernel sources into ``dump_path``.
    dump_path : str
        Folder for dumps (default ``./tvm_ascend_dump``).
    fusion_switch_file : str or None
        ATC-style fusion switch file (``RuleName:off`` lines or ATC's JSON ``{"Switch": ...}``),
        applied on top of the fusion level; ``ALL: off`` turns every rule off. It is read by
        ``partition/policy.py::enabled_rules``; ``build`` reads it first, so a bad file is an
        error before any work starts.
    rule_set : str
        ``"tvm_ascend"`` (every rule, cost-checked), ``"atc_style"`` (only the rules ATC applies
        by default, as fixed patterns: an emulation of ATC for comparisons) or ``"tvm_fuseops"``
        (TVM's FuseOps groups unchanged).
    no_fuse_nodes : tuple of str
        ONNX node names never fused with anything (to fence off a region with precision trouble).
    fusion_plan_file : str or None
        A fusion plan exported from an earlier build (``fusion_plan.json``): its groups are
        rebuilt exactly, for a reproducible build.
    tuning_database : str or None
        Folder of a tuning database (``tvm-ascend tune``); kernels found there use the best
        recorded tiling knobs.
    soc_version : str
        Target SoC in ATC spelling (``Ascend910B1``, ``Ascend310P3``, ...).
    precision_mode : str
        ATC precision mode: ``must_keep_origin_dtype`` (default), ``allow_fp32_to_fp16``,
        ``force_fp16``, ``allow_mix_precision``, ``force_fp32`` (tvm_ascend/prepare/precision.py).
    keep_dtype : tuple of str
        ONNX node names computed in their original dtype whatever the precision mode.
    op_select_implmode : str
        ATC's ``--op_select_implmode``: ``"high_precision"`` (default) computes float16
        Softmax, LogSoftmax, LayerNorm, ReduceSum and ReduceMean in float32 inside their
        kernels, as onnxruntime does; ``"high_performance"`` keeps them in float16 (half the UB
        per row, results an ulp or more away): ``tvm_ascend/partition/legalize.py``.
    cache_dir : str or None
        Folder of the compile cache (default ``~/.cache/tvm_ascend``).
    build_cache : bool
        Return an earlier build of the same ONNX model with the same configuration by the same
        compiler from the compile cache, without planning it again
        (``tvm_ascend/runtime/build_cache.py`` says what the key covers). Builds that write
        dumps are never cached.
    search_width : int
        Beam width of the grouping search over each region of mergeable kernels (partitions
        kept per step; 1 merges pairwise greedily). Wider explores more partitions for more
        compile time; the result is never worse than greedy merging under the same estimates.
    planner_model : str
        What picks a group's tiling among its template's variants: ``"timing"`` (default:
        the analytic timing model estimates every variant), ``"xgboost"`` (the learned model
        shipped in the package, ``cost_model/planner_model.ubj``, ranks the variants by their
        plans and the timing model estimates only the ``planner_top_k`` best-ranked, as
        MetaSchedule prunes before it measures) or the path of a ``.json``/``.ubj`` model
        ``tvm_ascend.tuning.retrain_planner_model`` wrote. A model that cannot be loaded is a
        warning, and the timing model alone decides. The report's
        ``groups[*].estimate.decided_by`` says which did. The ranking saves no compile time
        here: the timing model's estimates are about 0.6% of the partition stage
        (``benchmarks/planner_model.py``), which goes to FuseOps, FuseTIR and the templates'
        analyses; pruning with a model pays only where each estimate is a dear measurement
        (a board through the RPC runner). Hence the default ``"timing"``.
    planner_top_k : int or None
        How many of the best-ranked distinct variants the timing model estimates under a
        learned ``planner_model`` (0 or None: all of them, i.e. the timing model alone). The
        default is 3, the smallest k that forms the timing model's partitions, with the same
        estimates, on every configuration ``benchmarks/planner_model.py`` measures (BERT-base
        b1 s128, ResNet-50 b1 224 and GPT-2 medium b1 s512 on 910B1, the first two on 310P3;
        none of them among the shipped model's training data); top 2 keeps a ResNet-50 conv
        tiling estimated 0.4% slower on 910B1, top 1 up to 1.3%.
    input_shape : dict
        Input shapes, ``{"x": (1, 3, 224, 224)}``; a dimension may be -1 or a range
        ``"1~8"`` (ATC's spellings): dynamic dimensions run on the host, with a warning.
    strict : bool
        A kernel that fails to schedule, print or compile fails the build (for tests and for
        reporting a bug). By default such a kernel's group is split into single-op kernels, a
        single op that still fails runs on the host, and the report's ``kernel_failures`` and
        a warning say so (``tvm_ascend/fallback.py``).
    dynamic_batch_size, dynamic_image_size, dynamic_dims : str or tuple
        ATC's gears (mutually exclusive): ``"1,2,4,8"`` batch sizes for the -1 at dimension 0
        of ``input_shape``; ``"224,224;448,448"`` H,W pairs for -1 H and W; ``"1,128;8,512"``
        one value per -1 of ``input_shape`` (with ``input_format="ND"``); or the same as
        tuples (``(1, 2, 4)``, ``((224, 224), (448, 448))``). One static build per gear goes
        into one library, kernels equal across gears once; ``run`` picks the gear from the
        input shapes (``tvm_ascend/frontend/gears.py`` has ATC's rules; ``config_gears`` reads them).
    input_format : str
        ATC's ``--input_format``: ``"NCHW"`` (default for image gears), ``"NHWC"`` or
        ``"ND"`` (needed by ``dynamic_dims``).
    device : str
        What the kernels are built for: ``"emulator"`` (default: the C++ CPU emulator,
        ``contrib/ascendc_emu``, with estimated times) or ``"npu"`` (CANN's device compiler
        and the ACL runtime). ``"npu"`` needs a CANN toolkit (``ASCEND_HOME_PATH``); without
        one ``build`` stops before any work with an error naming what is missing
        (``runtime/cann.py::probe``).
    op_compiler_cache_mode : str
        ATC's ``--op_compiler_cache_mode`` for the compile cache in ``cache_dir`` (compiled
        libraries and whole builds): ``"enable"`` (default) reads and writes it, ``"force"``
        compiles again and overwrites the entries, ``"disable"`` neither reads nor writes
        them (the emulator's runtime object, part of the toolchain, is kept either way).
    """

    autofusion: bool = True
    fusion_level: str = "conservative"
    dump_graph: bool = False
    dump_path: str = "tvm_ascend_dump"
    fusion_switch_file: str | None = None
    soc_version: str = "Ascend910B1"
    precision_mode: str = "must_keep_origin_dtype"
    cache_dir: str | None = None
    input_shape: Mapping[str, tuple] = field(default_factory=dict)
    rule_set: str = "tvm_ascend"
    no_fuse_nodes: tuple = ()
    fusion_plan_file: str | None = None
    tuning_database: str | None = None
    keep_dtype: tuple = ()
    op_select_implmode: str = "high_precision"
    search_width: int = 4
    planner_model: str = "timing"
    planner_top_k: int | None = 3
    build_cache: bool = True
    strict: bool = False
    op_compiler_cache_mode: str = "enable"
    dynamic_batch_size: str | tuple = ""
    dynamic_image_size: str | tuple = ""
    dynamic_dims: str | tuple = ""
    input_format: str = ""
    device: str = "emulator"

    def __post_init__(self):
        if not isinstance(self.search_width, int) or isinstance(self.search_width, bool) \
                or self.search_width < 1:
            raise FusionConfigError(f"search_width={self.search_width!r} must be an integer >= 1 "
                                    "(1 merges pairwise greedily)")
        if not isinstance(self.planner_model, str) or not (
                self.planner_model in PLANNER_MODELS
                or self.planner_model.endswith((".json", ".ubj"))):
            raise FusionConfigError(
                f"planner_model={self.planner_model!r} is not one of "
                f"{', '.join(PLANNER_MODELS)} or the path of a .json/.ubj XGBoost model")
        if self.planner_top_k is not None and (
                not isinstance(self.planner_top_k, int) or isinstance(self.planner_top_k, bool)
                or self.planner_top_k < 0):
            raise FusionConfigError(f"planner_top_k={self.planner_top_k!r} must be None or an "
                                    "integer >= 0 (0 or None: every variant estimated)")
        if self.fusion_level not in FUSION_LEVELS:
            raise FusionConfigError(
                f"fusion_level={self.fusion_level!r} is not one of {', '.join(FUSION_LEVELS)}")
        if self.precision_mode not in PRECISION_MODES:
            raise FusionConfigError(
                f"precision_mode={self.precision_mode!r} is not one of "
                f"{', '.join(PRECISION_MODES)}")
        if self.op_select_implmode not in IMPL_MODES:
            raise FusionConfigError(
                f"op_select_implmode={self.op_select_implmode!r} is not one of "
                f"{', '.join(IMPL_MODES)}")
        if isinstance(self.keep_dtype, str):
            object.__setattr__(self, "keep_dtype", tuple(
                n.strip() for n in self.keep_dtype.split(",") if n.strip()))
        if self.op_compiler_cache_mode not in CACHE_MODES:
            raise FusionConfigError(
                f"op_compiler_cache_mode={self.op_compiler_cache_mode!r} is not one of "
                f"{', '.join(CACHE_MODES)}")
        if self.device not in DEVICES:
            raise FusionConfigError(
                f"device={self.device!r} is not one of {', '.join(DEVICES)}")
        if self.rule_set not in RULE_SETS:
            raise FusionConfigError(
                f"rule_set={self.rule_set!r} is not one of {', '.join(RULE_SETS)}")
        if isinstance(self.no_fuse_nodes, str):
            object.__setattr__(self, "no_fuse_nodes", tuple(
                n.strip() for n in self.no_fuse_nodes.split(",") if n.strip()))
        for name in ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims"):
            value = getattr(self, name)
            if isinstance(value, list):  # hashable, as the build key wants every field
                object.__setattr__(self, name, tuple(
                    tuple(v) if isinstance(v, list) else v for v in value))
        get_soc(self.soc_version)  # raises TargetError naming the known SoCs

    @property
    def fusion_enabled(self) -> bool:
        """Whether any operator may be grouped with another."""
        return self.autofusion and self.fusion_level != "off"

    @property
    def soc(self):
        """The SocProfile of ``soc_version``."""
        return get_soc(self.soc_version)

    def replace(self, **changes) -> "CompileConfig":
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def with_env(self, environ: Mapping[str, str] | None = None) -> "CompileConfig":
        """A copy with the declared environment variables applied on top."""
        environ = os.environ if environ is None else environ
        changes = {}
        for override in ENV_OVERRIDES:
            if override.variable in environ:
                text = environ[override.variable]
                changes[override.field] = (_parse_bool(override.variable, text)
                                           if override.kind is bool else text)
        return self.replace(**changes) if changes else self
