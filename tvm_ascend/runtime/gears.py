"""GearedModule: one library holding one static build per gear; ``run`` picks the gear.

The library's VM has one entry per gear (``metadata["gears"][i]["function"]``), each taking
the model's inputs and then its weights: the indices (``"weights"``) into the one weights
section, where a tensor equal in several gears is stored once. The gear is the one whose
input shapes equal the arrays' shapes; an array that fits no gear is a ValueError naming the
input, the dimension and the gears compiled.

Example
-------
>>> lib = tvm_ascend.build("resnet.onnx", config=CompileConfig(
...     input_shape={"x": (-1, 3, 224, 224)}, dynamic_batch_size="1,8"))  # doctest: +SKIP
>>> lib.gear_of({"x": x8})["label"]                                      # doctest: +SKIP
'x:8,3,224,224'
"""
from __future__ import annotations

import numpy as np

from .module import AscendModule


class GearedModule(AscendModule):
    """An AscendModule whose ``run`` dispatches to the gear of the inputs' shapes."""

    @property
    def gears(self) -> list[dict]:
        """Each gear: ``index``, ``label``, ``input_shape``, ``function``, ``weights``."""
        return list(self.metadata["gears"])

    def _check_signature(self, arrays: list[np.ndarray]) -> None:
        self._gear_of_arrays(arrays)

    def gear_of(self, inputs) -> dict:
        """The gear ``inputs`` ({name: array} or a list in input order) run on."""
        values = [inputs[n] for n in self.input_names] if isinstance(inputs, dict) \
            else list(inputs)
        return self._gear_of_arrays([np.asarray(v) for v in values])

    def _gear_of_arrays(self, arrays: list[np.ndarray]) -> dict:
        gears = self.metadata["gears"]
        for gear in gears:
            if all(_fits(spec["shape"], array.shape)
                   for spec, array in zip(gear["input_specs"], arrays)):
                _check_dtypes(gear, arrays)
                return gear
        raise ValueError(_no_gear(gears, self.input_names, arrays,
                                  self.metadata.get("gear_spec", {})))

    def _profile_report(self) -> dict:
        """Every gear's groups (a kernel shared by gears is described by its first gear's):
        the launches of one profile may come from several gears."""
        report = self.fusion_report()
        groups = [g for section in reversed(report["gears"]) for g in section["groups"]]
        return {**report, "groups": groups}

    def _entry(self, args: list) -> tuple[str, list]:
        gear = self._gear_of_arrays([np.broadcast_to(np.empty((), str(a.dtype)),
                                                     tuple(int(d) for d in a.shape))
                                     for a in args])  # views with the shapes: no copies
        return gear["function"], [self._weights[i] for i in gear["weights"]]


def _fits(shape, got) -> bool:
    """Whether an array of shape ``got`` fits a gear's input ``shape`` (None: unchecked; a
    dimension that is not an integer is left to the VM)."""
    return shape is None or (len(shape) == len(got) and all(
        not isinstance(want, int) or want == size for want, size in zip(shape, got)))


def _check_dtypes(gear: dict, arrays: list) -> None:
    for spec, array in zip(gear.get("input_specs", []), arrays):
        if spec.get("dtype") and str(array.dtype) != spec["dtype"]:
            raise ValueError(f"input {spec['name']!r} has dtype {array.dtype}; the model "
                             f"expects {spec['dtype']} (convert it with "
                             f".astype({spec['dtype']!r}))")


def _no_gear(gears: list, names: list, arrays: list, spec: dict) -> str:
    """Why no gear fits: the first input and dimension whose size no gear has (or, each size
    being some gear's, that no gear has them together), and the gears."""
    listed = "; ".join(f"gear {g['index']}: {g['label']}" for g in gears)
    flag = spec.get("flag", "gears")
    for index, (name, array) in enumerate(zip(names, arrays)):
        shapes = [g["input_specs"][index]["shape"] for g in gears]
        if any(shape is None for shape in shapes):
            continue
        if array.ndim != len(shapes[0]):
            return (f"input {name!r} has shape {tuple(array.shape)} ({array.ndim}-D); every gear "
                    f"of the model is {len(shapes[0])}-D (--{flag}: {listed})")
        for axis, size in enumerate(array.shape):
            allowed = sorted({s[axis] for s in shapes if isinstance(s[axis], int)})
            if allowed and size not in allowed:
                kind = "a dynamic dimension" if len(allowed) > 1 else "a static dimension"
                return (f"input {name!r} dimension {axis} is {size}, which matches no gear: "
                        f"{kind} the model was compiled for {'/'.join(map(str, allowed))} "
                        f"(--{flag}: {listed}); pad the input to a gear or rebuild with a "
                        "gear of this size")
    got = "; ".join(f"{n}:{','.join(map(str, a.shape))}" for n, a in zip(names, arrays))
    return (f"inputs {got} match no gear together (each size belongs to some gear, but no gear "
            f"has them all; --{flag}: {listed})")
