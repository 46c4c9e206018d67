"""Frontend: models in, Relax IRModule with static shapes out."""
from .onnx_loader import describe_inputs, load_model, parse_input_shape, read_model

__all__ = ["describe_inputs", "load_model", "parse_input_shape", "read_model"]
