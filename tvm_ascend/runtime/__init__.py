"""Runtime: building, loading, running, profiling and exporting compiled models."""
from .module import AscendModule, load
from .toolchain import emulator_compile_options

__all__ = ["AscendModule", "load", "emulator_compile_options"]
