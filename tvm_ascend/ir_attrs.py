"""Attribute keys by which one stage hands its decisions to the next (data passed down)."""

from .decision import CAUSAL_ATTR, DIM_BOUNDS_ATTR

ONNX_NODES = "ascend.onnx_nodes"   # on main: binding var -> ONNX node name (frontend)
ONNX_NODE_COUNT = "ascend.onnx_node_count"  # on main: nodes of the ONNX graph (frontend)
KERNEL = "ascend.kernel"           # on a Codegen function: KernelRecord JSON (kernel_record.py):
# template, knobs and group provenance (partition), completed with the tiling (schedule)
PRIM_FUNC = "ascend.prim_func"     # the group's PrimFunc, then its scheduled form (schedule)
MODEL_OP = "ascend.model_op"       # on a copied PrimFunc: the binding it was copied for
HORIZONTAL = "ascend.horizontal"   # on main: binding vars made by merging parallel ops (prepare)
ONNX_INPUTS = "ascend.onnx_inputs"  # on main: the ONNX graph input names, in parameter order
DIM_RANGES = "ascend.dim_ranges"   # on main: JSON {dimension name: [lo, hi]} of ranged input
# dimensions (frontend), which lib.run checks
INDEX_INPUTS = "ascend.index_inputs"  # on main: JSON [{input, node, op, table, rows}] of the
# graph inputs whose values index a table (frontend/index_bounds.py), which lib.run checks
ONNX_NODE_NAMES = "ascend.onnx_node_names"  # on main: every ONNX node name (frontend), for
# checking the names flags give (no_fuse_nodes, keep_dtype)
FOLDED_BATCH_NORM = "ascend.folded_batch_norm"  # on main: convs that took a BatchNorm in, and
# the Multiplies standalone BatchNorms were lowered to (prepare)
PREPARE_REWRITES = "ascend.prepare_rewrites"  # on main: JSON records of prepare rewrites (prepare)
OP_IMPL_MODE = "ascend.op_select_implmode"  # on main: "high_performance" when float16
# normalisations keep float16 arithmetic (prepare: precision.py; partition/legalize.py reads it)
CAUSAL = CAUSAL_ATTR  # on a group's PrimFunc: JSON list of CausalOperand facts
# (decision.py) about the constants its call passes (partition/causal.py; schedules read it)
DIM_BOUNDS = DIM_BOUNDS_ATTR  # on a group's PrimFunc with symbolic shapes: JSON {dimension
# name: [lo, hi]} of the ranges its symbolic dimensions take (partition; templates plan over it)
