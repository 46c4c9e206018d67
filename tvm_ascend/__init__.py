"""tvm-ascend: automatic operator fusion for Huawei Ascend NPUs on Apache TVM.

Example
-------
>>> import tvm_ascend
>>> lib = tvm_ascend.build("model.onnx", target="ascend")      # doctest: +SKIP
>>> outs = lib.run({"x": x})                                    # doctest: +SKIP
>>> lib.export_library("model.so")                              # doctest: +SKIP
"""
from __future__ import annotations

from . import logs, relay
from .config import CompileConfig
from .errors import (AscendError, CodegenError, DeviceRuleError, ExportError,
                     FusionConfigError, ModelLoadError, TargetError, TilingError, ToolchainError,
                     UnsupportedOpError)
from .pipeline import build
from .runtime import AscendModule, load
from .target import register_targets

__version__ = "0.1.0"

logs.install()
register_targets()


def partition_for_ascend(mod, config: CompileConfig | None = None):
    """Partition a Relax module for Ascend, in the style of TVM's other BYOC backends.

    Returns the module with NPU groups as ``Codegen="ascend"`` functions and the decisions.
    """
    from .frontend import load_model
    from .pipeline import fusion_policy, plan_fusion, precision_of

    config = (config or CompileConfig()).with_env()
    imported = load_model(mod, config.input_shape)
    policy = fusion_policy(config, imported)
    return plan_fusion(imported, policy, config.soc, precision=precision_of(config))


__all__ = ["build", "load", "relay", "CompileConfig", "AscendModule", "partition_for_ascend",
           "AscendError", "CodegenError", "DeviceRuleError", "ExportError", "FusionConfigError",
           "ModelLoadError", "TargetError", "TilingError", "ToolchainError", "UnsupportedOpError"]
