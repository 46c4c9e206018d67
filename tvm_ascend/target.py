"""The ``ascend`` target and its SoC tags (``ascend/910b1``, ``ascend/310p3`` ...).

TVM 0.27 has no ``ascend`` target kind; host code runs on llvm, so the tags are llvm targets with
the key ``ascend`` and the SoC in ``model``. Kernels for the NPU are produced by our own codegen.

Example
-------
>>> import tvm, tvm_ascend
>>> tvm.target.Target("ascend/310p3").attrs["model"]
'Ascend310P3'
"""
from __future__ import annotations

import tvm

from .errors import TargetError
from .soc import get_soc, soc_profiles

DEFAULT_SOC = "Ascend910B1"


def _tag_name(soc_name: str) -> str:
    return "ascend/" + soc_name.lower().replace("ascend", "", 1)


def register_targets() -> None:
    """Register ``ascend`` and one ``ascend/<soc>`` tag per SoC profile (idempotent)."""
    for name in soc_profiles():
        tvm.target.tag.register_tag(_tag_name(name), _config(name), override=True)
    tvm.target.tag.register_tag("ascend", _config(DEFAULT_SOC), override=True)


def _config(soc_name: str) -> dict:
    return {"kind": "llvm", "keys": ["ascend", "cpu"], "model": soc_name}


def resolve_target(target) -> tuple[tvm.target.Target, str]:
    """(host target, SoC name) for a user's target: a name, a tag or a tvm Target.

    Raises TargetError for anything that is not an Ascend target.
    """
    if isinstance(target, tvm.target.Target):
        keys = list(target.keys)
        if "ascend" not in keys:
            raise TargetError(f"target {target} is not an Ascend target; use 'ascend' or "
                              "'ascend/<soc>' such as 'ascend/910b1'")
        return target, str(target.attrs.get("model", DEFAULT_SOC))
    text = str(target).strip()
    if text.lower() == "ascend" or text.lower().startswith("ascend/"):
        try:
            resolved = tvm.target.Target(text.lower())
        except Exception as err:  # noqa: BLE001 - TVM raises several kinds here
            known = ", ".join(["ascend"] + sorted(_tag_name(n) for n in soc_profiles()))
            raise TargetError(f"unknown target {text!r}; known: {known}") from err
        return resolved, str(resolved.attrs["model"])
    if text.lower().startswith("ascend"):  # an ATC soc_version passed as target
        soc = get_soc(text)
        return tvm.target.Target(_tag_name(soc.name)), soc.name
    known = ", ".join(["ascend"] + sorted(_tag_name(n) for n in soc_profiles()))
    raise TargetError(f"unknown target {text!r}: tvm-ascend compiles for Ascend NPUs only; "
                      f"known targets: {known}")
