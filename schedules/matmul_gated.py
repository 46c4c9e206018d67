"""GatedMatmulSchedule: two MatMuls of one input and their join (SwiGLU) as one kernel.

LLaMA's MLP is ``down(silu(x @ Wg) * (x @ Wu))``: gate and up read the same ``x`` through
weights of one shape, and their results meet in one elementwise op. Merged into one MatMul by
the concatenated weights (HorizontalFusion), the join reads two column ranges of the product,
which no epilogue of the matmul template reads; kept apart, the second MatMul takes the join
into its epilogue and the first is a kernel of its own that writes ``x @ Wu`` to GM for it.

This template takes the group whose first two blocks are those two products (the same A, the
same ``batch x m x n x k``, each its own B of weights shared by the batch) and whose blocks
after them are elementwise over ``[batch * m, n]``: each core walks the output tiles as the
matmul template does, with one Matmul object per product (``mm`` for the first block's
weights, ``mm2`` for the second's) on the same TCubeTiling, both iterated in step; each base
tile fetches a C tile of each product into the UB, the epilogue (``silu(gate) * up``) reads
both, and the output is written once. The plan is the matmul template's (``_plan`` with
``products=2``): two C tiles in the UB, half the L1 per object, each object's operand
reads and, on split chips, each product's workspace round trip; it runs synchronously
(``MatmulPlan.pipeline`` says so).

Example
-------
>>> GatedMatmulSchedule.applies(func)                                    # doctest: +SKIP
Decision(ok=True, reason='two matmuls 38x64 @ 64x80 of one A with a joint epilogue')
>>> _, tiling = GatedMatmulSchedule.schedule(func, get_soc("Ascend910B1"))  # doctest: +SKIP
>>> tiling.work.cube_macs == 2 * 48 * 80 * 64                            # doctest: +SKIP
True
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import tvm

from tvm_ascend.decision import Decision
from tvm_ascend.errors import TilingError

from .analysis.epilogue_checks import epilogue_refusal
from .analysis.row_program import RowAccessKind, row_program
from .analysis.tir_walk import cached_by_identity, root_blocks, schedule_blocks
from .matmul import MatmulKnobs, MatmulPlan, MatmulShape, _plan, block_matmul_shape
from .template import Template, mark_core_loop
from .tiling import SUPPORTED_DTYPES, Tiling

PRODUCTS = 2  # gate and up


@dataclass(frozen=True)
class GatedMatmulPlan(MatmulPlan, template="matmul_gated"):
    """The matmul template's plan of the gated kernel (``MatmulPlan``: its tiles, walk, L1
    depths per Matmul object, epilogue rows), ``products`` C tiles a base tile."""

    products: int = PRODUCTS


@dataclass(frozen=True)
class GatedProducts:
    """The two products of a gated group: their shape (sizes, A and the first B), the second
    product's B buffer name, and the C buffers of the two in block order."""

    shape: MatmulShape
    second_b: str
    c_buffers: tuple


@cached_by_identity
def gated_products(func) -> GatedProducts | None:
    """The group's two products of one A (``GatedProducts``), or None where its first two
    blocks are not two MatMuls of one A by two weights of one shape."""
    blocks = root_blocks(func)
    if len(blocks) < 3:
        return None
    first, second = block_matmul_shape(blocks[0]), block_matmul_shape(blocks[1])
    if first is None or second is None:
        return None
    same = (first.batch, first.m, first.n, first.k, first.a_batched, first.dtype) == \
        (second.batch, second.m, second.n, second.k, second.a_batched, second.dtype)
    if not same or first.a_name != second.a_name or first.b_name == second.b_name \
            or first.b_batched or second.b_batched:
        return None
    # block_matmul_shape checked that each reads A[(batch,) i, k] at its own iteration
    # variables: equal shapes read A alike
    return GatedProducts(first, second.b_name, (blocks[0].body.buffer, blocks[1].body.buffer))


def gated_program(blocks, func, products: GatedProducts):
    """The epilogue (the blocks after the two products, inlined into one) as a row program
    over C's rows, both products given in the UB; it must read both."""
    shape = products.shape
    given = [blocks[0].body.buffer, blocks[1].body.buffer]  # the two C tiles, in block order
    program = row_program(blocks[2:], func, shape.batch * shape.m, shape.n, given=given)
    # by identity: the two products' buffers may share a name ("matmul")
    read = [buffer for kind, buffer, step in program.loads.values()
            if kind is RowAccessKind.INTERMEDIATE and step == -1]
    if not all(any(b.same_as(c) for b in read) for c in given):
        raise TilingError("the gated epilogue reads only one of its two products: not a join")
    for kind in program.inputs.values():
        if kind not in (RowAccessKind.ROWS, RowAccessKind.COLUMN, RowAccessKind.SCALAR,
                        RowAccessKind.ROW_SCALAR):
            raise TilingError(f"gated matmul epilogue input read as {kind.value}: not printed")
    return program


@dataclass(frozen=True)
class GatedMatmulAnalysis:
    """The group's two products, the epilogue's row program and the group with its epilogue
    inlined into one block (what ``apply`` schedules and the printer reads)."""

    products: GatedProducts
    program: object
    prepared: tvm.tirx.PrimFunc


class GatedMatmulSchedule(Template):
    """Template for two MatMuls of one input joined by an elementwise epilogue (SwiGLU)."""

    name = "matmul_gated"
    Knobs = MatmulKnobs  # the matmul template's; split-K is refused (the join is not affine)

    @staticmethod
    def applies(func) -> Decision:
        return _applies(func)

    @staticmethod
    def analyse(func) -> GatedMatmulAnalysis:
        """The products, the epilogue program and the prepared function; TilingError where
        the template does not take the group."""
        return _analyse(func)

    @staticmethod
    def plan(analysis: GatedMatmulAnalysis, soc, knobs: MatmulKnobs | None = None) -> Tiling:
        """The matmul template's Tiling with two products a tile (``_plan(products=2)``),
        its plan a ``GatedMatmulPlan``."""
        tiling = _plan(analysis.products.shape, analysis.program, soc, knobs or MatmulKnobs(),
                       (None, "a gated epilogue (the product of two products) is not affine"), products=PRODUCTS)
        plan = GatedMatmulPlan(**{f.name: getattr(tiling.plan, f.name)
                                  for f in dataclasses.fields(MatmulPlan)})
        return dataclasses.replace(tiling, template="matmul_gated", plan=plan)

    @staticmethod
    def apply(analysis: GatedMatmulAnalysis, tiling: Tiling):
        """The prepared function with the first product's outer loop as the core loop."""
        return mark_core_loop(analysis.prepared)

    @staticmethod
    def variants(func, soc) -> list[MatmulKnobs]:
        """The default and, on 910B, the 1:2 mix (twice the vector units for the epilogue)."""
        return [MatmulKnobs()] + ([MatmulKnobs(aiv_ratio=2)] if soc.npu_arch == 2201 else [])

    @staticmethod
    def knob_space(func, soc) -> list[MatmulKnobs]:
        """The variants, plus base tiles of 32..128 along M and N."""
        space = GatedMatmulSchedule.variants(func, soc)
        for base_m in (32, 64, 128):
            for base_n in (32, 64, 128):
                if MatmulKnobs(base_m, base_n) not in space:
                    space.append(MatmulKnobs(base_m, base_n))
        return space


@cached_by_identity
def _applies(func) -> Decision:
    products = gated_products(func)
    if products is None:
        return Decision.no("not two matmuls of one A by two weights of one shape")
    shape = products.shape
    if shape.dtype not in SUPPORTED_DTYPES:
        return Decision.no(f"matmul in {shape.dtype}; the cube kernel takes float16/float32")
    refusal = epilogue_refusal(func, root_blocks(func)[2:], "two matmuls", "matmul_gated",
                               shape.dtype)
    if refusal is not None:
        return refusal
    return Decision.yes(f"two matmuls {shape.m}x{shape.k} @ {shape.k}x{shape.n} of one A "
                        "with a joint epilogue")


@cached_by_identity
def _analyse(func) -> GatedMatmulAnalysis:
    decision = _applies(func)
    if not decision:
        raise TilingError(f"matmul_gated template does not apply: {decision.reason}")
    products = gated_products(func)
    sch = tvm.s_tir.Schedule(func)
    for block_rv in sch.get_child_blocks(sch.get_sblock("root"))[2:-1]:
        sch.compute_inline(block_rv)
    blocks = schedule_blocks(sch)
    return GatedMatmulAnalysis(products, gated_program(blocks, func, products), sch.mod["main"])


__all__ = ["GatedMatmulSchedule", "GatedMatmulPlan", "GatedProducts", "gated_products",
           "gated_program"]
