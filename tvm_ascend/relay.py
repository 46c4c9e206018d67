"""Relay-era spelling: ``tvm_ascend.relay.build(mod, target="ascend", params=...)``.

Relay was removed from TVM (0.20+); scripts written for it keep working: the call takes the
same arguments and gives the same module as ``tvm_ascend.build``.

Example
-------
>>> lib = tvm_ascend.relay.build(mod, target="ascend", params=params)   # doctest: +SKIP
"""
from __future__ import annotations

from .pipeline import build as _build


def build(mod, target="ascend", target_host=None, params=None, mod_name="default", config=None):
    """Relay-compatible ``build``; ``target_host`` and ``mod_name`` are accepted and ignored."""
    del target_host, mod_name  # host code always runs on llvm; the module has one entry, main
    return _build(mod, target=target, params=params, config=config)
