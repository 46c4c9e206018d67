"""Weights beside the compiled code, not inside it.

A built model's large constants (weight tables, projection matrices) become trailing
parameters of ``main`` before ``tvm.compile``, so the library holds code only and the weights
travel as one section appended to the library file, after its ELF image and before the
trailer whose sha256 covers both (``artifacts.append_trailer``).

Why: TVM's ``export_library`` packs a VM executable's constants into the library by
serialising them and wrapping the bytes in an LLVM object (``ModulePackImportsToLLVM``), which
the linker then copies again; every build paid that for every byte of weights. The section is
the tensors' bytes written once, straight from their buffers (``save_param_dict`` would copy
them into one string first: 0.8 s for BERT-base's 440 MB).

The file: ``[ELF image][section][header size: u64][section size: u64][WEIGHTS_MAGIC]
[trailer]``; the section is a JSON header (each tensor's dtype, shape and offset) and the
tensors' bytes, each at a 64-byte aligned offset. dlopen reads only the image; a library
without ``WEIGHTS_MAGIC`` before its trailer (built before this layout, or with no large
constants) has its constants inside the image and no trailing parameters.

Example
-------
>>> mod, weights = lift_weights(lowered)                  # doctest: +SKIP
>>> [w.shape for w in weights][:2]                        # doctest: +SKIP
[(30522, 768), (512, 768)]
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..errors import ModelLoadError
from .artifacts import TRAILER_BYTES

# Constants below this size stay in the code (scalars, shapes, small tables): passing them as
# parameters would cost a VM argument each and save nothing measurable.
WEIGHT_MIN_BYTES = 4096
WEIGHTS_MAGIC = b"tvm-ascend-wts1\0"
_SECTION = struct.Struct("<QQ16s")  # header size, section size, WEIGHTS_MAGIC
_ALIGN = 64
# dtypes whose bytes numpy views and reads back as they are (a bfloat16 table stays in the code)
_NUMPY_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                 "uint16", "uint32", "uint64", "bool"}
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
        if not isinstance(data, tvm.runtime.Tensor) or str(data.dtype) not in _NUMPY_DTYPES \
                or _nbytes(data) < WEIGHT_MIN_BYTES:
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
    """Append ``weights`` (in parameter order) as the section to the library at ``path``
    (before its trailer is written); the section's size, 0 (and nothing written) for none."""
    if not weights:
        return 0
    arrays = [np.from_dlpack(w) for w in weights]  # views of the tensors' own buffers
    entries, offset = [], 0
    for array in arrays:
        entries.append({"dtype": str(array.dtype), "shape": list(array.shape), "offset": offset})
        offset = _aligned(offset + array.nbytes)
    header = json.dumps(entries).encode()
    base = _aligned(len(header))
    with open(path, "ab") as handle:
        handle.write(header + b"\0" * (base - len(header)))
        written = 0
        for entry, array in zip(entries, arrays):
            handle.write(b"\0" * (entry["offset"] - written))
            handle.write(memoryview(np.ascontiguousarray(array)).cast("B"))
            written = entry["offset"] + array.nbytes
        size = base + written
        handle.write(_SECTION.pack(len(header), size, WEIGHTS_MAGIC))
    return size


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def read_weights(path) -> list:
    """The weights a sealed library carries, in parameter order ([] for a library whose
    constants are inside its image). The file is checked whole beforehand
    (``verify_library``)."""
    path = Path(path)
    end = os.path.getsize(path) - TRAILER_BYTES
    if end < _SECTION.size:
        return []
    with open(path, "rb") as handle:
        handle.seek(end - _SECTION.size)
        header_size, size, magic = _SECTION.unpack(handle.read(_SECTION.size))
        if magic != WEIGHTS_MAGIC:
            return []
        start = end - _SECTION.size - size
        if start < 0 or header_size > size:
            raise ModelLoadError(f"library '{path}': its weights section claims {size} bytes, "
                                 "more than the file holds; export it again")
        handle.seek(start)
        entries = json.loads(handle.read(header_size))
        base = start + _aligned(header_size)
        weights = []
        for entry in entries:
            dtype = np.dtype(entry["dtype"])
            count = int(np.prod(entry["shape"], dtype=np.int64))
            handle.seek(base + entry["offset"])
            array = np.fromfile(handle, dtype=dtype, count=count).reshape(entry["shape"])
            weights.append(tvm.runtime.tensor(array))
    return weights
