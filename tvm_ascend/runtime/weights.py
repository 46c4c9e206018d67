"""Weights beside the compiled code, not inside it.

A built model's large constants (weight tables, projection matrices) become trailing
parameters of ``main`` before ``tvm.compile``, so the library holds code only and the weights
travel as one blob in TVM's own parameter format (``save_param_dict``) appended to the
library file, after its ELF image and before the trailer that covers both
(``artifacts.append_trailer``).

Why: TVM's ``export_library`` packs a VM executable's constants into the library by
serialising them and wrapping the bytes in an LLVM object (``ModulePackImportsToLLVM``), which
the linker then copies; for BERT-base's 440 MB of float16 weights that is ~3 s of CPU of a
~20 s cold build, spent again by every build. The blob is written once, with one copy.

The file: ``[ELF image][weights blob][blob size: u64][WEIGHTS_MAGIC][trailer]``. dlopen reads
only the image; a library without ``WEIGHTS_MAGIC`` before its trailer (built before this
layout, or with no large constants) has its constants inside the image and no trailing
parameters.

Example
-------
>>> mod, weights = lift_weights(lowered)                  # doctest: +SKIP
>>> [w.shape for w in weights][:2]                        # doctest: +SKIP
[(30522, 768), (512, 768)]
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..errors import ModelLoadError
from .artifacts import TRAILER_BYTES

# Constants below this size stay in the code (scalars, shapes, small tables): passing them as
# parameters would cost a VM argument each and save nothing measurable.
WEIGHT_MIN_BYTES = 4096
WEIGHTS_MAGIC = b"tvm-ascend-wts1\0"
_SECTION = struct.Struct("<Q16s")  # blob size, WEIGHTS_MAGIC
PREFIX = "ascend_w"


@mutator
class _ConstantsToParams(PyExprMutator):
    """Replaces every constant of at least WEIGHT_MIN_BYTES with a new parameter variable; one
    variable per distinct constant object (a constant used twice is passed once)."""

    def __init__(self, mod):
        super().__init__(mod)
        self.params: list = []
        self.tensors: list = []
        self._consts: list = []  # the constants lifted, beside self.params

    def visit_generic_const_(self, const):
        data = const.value
        if not isinstance(data, tvm.runtime.Tensor) or _nbytes(data) < WEIGHT_MIN_BYTES:
            return const
        for seen, var in zip(self._consts, self.params):
            if seen.same_as(const):
                return var
        var = relax.Var(f"{PREFIX}{len(self.params)}", const.ty)
        self._consts.append(const)
        self.params.append(var)
        self.tensors.append(data)
        return var


def _nbytes(tensor) -> int:
    size = tvm.runtime.DataType(str(tensor.dtype)).bits // 8
    for dim in tensor.shape:
        size *= int(dim)
    return size


def lift_weights(mod: tvm.IRModule) -> tuple[tvm.IRModule, list]:
    """(``mod`` with ``main``'s large constants as its trailing parameters, their tensors in
    parameter order). ``run`` passes the tensors after the model's inputs.

    Only ``main`` is rewritten: the partitioned kernels take their weights as ``main``'s
    arguments, and the host's own Relax functions are called from it.
    """
    main_gv = mod.get_global_var("main")
    func = mod[main_gv]
    lifter = _ConstantsToParams(mod)
    body = lifter.visit_expr(func.body)
    if not lifter.params:
        return mod, []
    lifted = relax.Function(list(func.params) + lifter.params, body, func.ret_ty, func.is_pure,
                            func.attrs, func.span)
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    out[main_gv] = lifted
    return out, list(lifter.tensors)


def append_weights(path: Path, weights: list) -> int:
    """Append ``weights`` (in parameter order) as the blob section to the library at ``path``
    (before its trailer is written); the blob's size, 0 (and nothing written) for none."""
    if not weights:
        return 0
    blob = tvm.runtime.save_param_dict({f"{PREFIX}{i}": w for i, w in enumerate(weights)})
    with open(path, "ab") as handle:
        handle.write(blob)
        handle.write(_SECTION.pack(len(blob), WEIGHTS_MAGIC))
    return len(blob)


def read_weights(path) -> list:
    """The weights a sealed library carries, in parameter order ([] for a library whose
    constants are inside its image). The file is checked whole beforehand
    (``verify_library``)."""
    path = Path(path)
    size = os.path.getsize(path)
    end = size - TRAILER_BYTES
    with open(path, "rb") as handle:
        if end < _SECTION.size:
            return []
        handle.seek(end - _SECTION.size)
        blob_size, magic = _SECTION.unpack(handle.read(_SECTION.size))
        if magic != WEIGHTS_MAGIC:
            return []
        start = end - _SECTION.size - blob_size
        if start < 0:
            raise ModelLoadError(f"library '{path}': its weights section claims {blob_size} "
                                 f"bytes, more than the file holds")
        handle.seek(start)
        blob = handle.read(blob_size)
    params = tvm.runtime.load_param_dict(bytearray(blob))
    try:
        return [params[f"{PREFIX}{i}"] for i in range(len(params))]
    except KeyError as err:
        raise ModelLoadError(f"library '{path}': its weights section lacks {err}") from err
