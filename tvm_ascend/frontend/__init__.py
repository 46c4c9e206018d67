"""Frontend: models in, Relax IRModule with static shapes out."""
from .gears import Gear, GearSpec, config_gears, gear_spec
from .onnx_loader import describe_inputs, load_model, parse_input_shape, read_model

__all__ = ["Gear", "GearSpec", "config_gears", "gear_spec", "describe_inputs", "load_model",
           "parse_input_shape", "read_model"]
