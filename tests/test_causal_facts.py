"""partition/causal.py reads a group's constant arguments for causal facts: only those its
type allows to be one (a Where's one-element fill, a bool or float constant of leading axes 1
and square-ish last two); weights are ruled out without a copy of their values."""
from __future__ import annotations

import numpy as np
import tvm

import tvm_ascend.partition.causal as causal
from build_checks import fused_prim_func
from onnx_models import attention_model
from tvm_ascend import ir_attrs
from tvm_ascend.decision import causal_facts_from_json


def test_weights_are_not_copied_and_the_causal_constant_is_found(monkeypatch):
    """A group's call with a weight-shaped constant ([768, 2304], an attention projection's),
    one of leading axis 2 and a causal bias ([1, 1, s, s] bool) among its arguments: only the
    bias is copied to numpy, and its fact lands on the PrimFunc."""
    copied = []
    real_numpy = tvm.runtime.Tensor.numpy

    def numpy(self):
        copied.append(tuple(self.shape))
        return real_numpy(self)
    seq = 40
    prim = fused_prim_func(attention_model(seq=seq, proj=False).model())  # q, k, v, mask
    names = [p.name for p in prim.params]
    tri = np.tri(seq, seq, 0, dtype=bool)[None, None]
    bound = {0: tvm.relax.const(np.ones((768, 2304), "float32")),  # a weight's shape
             1: tvm.relax.const(np.ones((2, 1, seq, seq), "float32")),  # leading axis 2
             3: tvm.relax.const(tri)}
    args = [bound.get(i, tvm.relax.Var(name, tvm.relax.TensorType((1,), "float32")))
            for i, name in enumerate(names)]
    monkeypatch.setattr(tvm.runtime.Tensor, "numpy", numpy)
    found = causal.with_causal_facts(prim, args)
    assert copied == [(1, 1, seq, seq)]  # neither the weight nor the other constant
    facts, _ = causal_facts_from_json(str(found.attrs[ir_attrs.CAUSAL]))
    assert [(f.param, f.offset, f.width) for f in facts] == [(names[3], 0, seq)]


def test_the_type_check_takes_fills_and_causal_shapes_only():
    """One-element floats (a Where's fill) and [1, .., s, s'] bool/float constants with
    s <= s' <= 2 s pass; a weight's shape, an integer tensor or leading axes of 2 do not."""
    def const(shape, dtype="float32"):
        return tvm.relax.const(np.zeros(shape, dtype))
    assert causal._worth_reading(const(()))
    assert causal._worth_reading(const((1, 1, 40, 40), "bool"))
    assert causal._worth_reading(const((40, 48)))
    assert not causal._worth_reading(const((), "int64"))
    assert not causal._worth_reading(const((768, 2304)))
    assert not causal._worth_reading(const((2, 1, 40, 40), "bool"))
    assert not causal._worth_reading(const((1, 1, 40, 40), "int32"))
    assert not causal._worth_reading(const((48, 40)))  # more queries than keys
