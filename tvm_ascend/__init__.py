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
from .pipeline import build, partition_for_ascend
from .runtime import AscendModule, load
from .target import register_targets

__version__ = "0.1.0"

logs.install()
register_targets()

__all__ = ["build", "load", "relay", "CompileConfig", "AscendModule", "partition_for_ascend",
           "AscendError", "CodegenError", "DeviceRuleError", "ExportError", "FusionConfigError",
           "ModelLoadError", "TargetError", "TilingError", "ToolchainError", "UnsupportedOpError"]
