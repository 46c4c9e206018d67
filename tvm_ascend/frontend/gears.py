"""ATC's gears: ``--dynamic_batch_size``, ``--dynamic_image_size``, ``--dynamic_dims``.

A gear is one static shape for every ``-1`` of ``--input_shape``; the model is built once per
gear (``pipeline_gears.py``) and ``run`` picks the gear from the input shapes. The rules are
ATC's (CANN ATC parameter reference, "--dynamic_batch_size" / "--dynamic_image_size" /
"--dynamic_dims"):

* the three flags are mutually exclusive, and none may be combined with a range (``lo~hi``);
* 2 to 100 gears, no two alike;
* ``--dynamic_batch_size``: only dimension 0 (N) of an input may be -1; one value per gear;
* ``--dynamic_image_size``: only H and W of 4-D inputs (``--input_format`` NCHW, the default,
  or NHWC), both of them; two values (H,W) per gear;
* ``--dynamic_dims``: ``--input_format ND``; any dimensions may be -1, and each gear has as
  many values as there are -1s, filled in input order.

Every error names the flag, the value given and what would be accepted (ATC's E10035-style
messages name only the flag).

Example
-------
>>> spec = gear_spec({"x": (-1, 3, 224, 224)}, dynamic_batch_size="1,2,4")
>>> [g.shapes["x"] for g in spec.gears]
[(1, 3, 224, 224), (2, 3, 224, 224), (4, 3, 224, 224)]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..errors import FusionConfigError
from .onnx_loader import parse_input_shape

MIN_GEARS, MAX_GEARS = 2, 100  # ATC's limits on the number of gears
MAX_BATCH = 2048  # ATC's largest --dynamic_batch_size value
INPUT_FORMATS = ("NCHW", "NHWC", "ND")
FLAGS = ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims")


@dataclass(frozen=True)
class Gear:
    """One gear: its index, the values filling the -1s, and every input's static shape."""

    index: int
    values: tuple
    shapes: dict  # input name -> tuple of ints
    label: str  # "x:1,3,224,224" (the dynamic inputs' shapes, as --input_shape spells them)

    def to_json(self) -> dict:
        return {"index": self.index, "values": list(self.values), "label": self.label,
                "input_shape": {n: list(s) for n, s in self.shapes.items()}}


@dataclass(frozen=True)
class GearSpec:
    """The gears of a build: the flag that gave them, the input format and the dynamic
    positions ((input, axis) of each -1, in input order)."""

    flag: str
    input_format: str
    dynamic: tuple  # ((input name, axis), ...)
    gears: tuple  # Gear, ...

    def to_json(self) -> dict:
        return {"flag": self.flag, "input_format": self.input_format,
                "dynamic": [list(d) for d in self.dynamic],
                "gears": [g.to_json() for g in self.gears]}


def _flag(name: str) -> str:
    return f"--{name} (CompileConfig.{name})"


def parse_gear_values(flag: str, value, per_gear: int | None) -> tuple:
    """``value`` of ``flag`` as a tuple of gears, each a tuple of positive ints.

    ``"1,2,4"`` (one value per gear: --dynamic_batch_size) or ``"224,224;448,448"``; a
    sequence of ints or of sequences is taken as already split. ``per_gear=1`` reads commas
    as gear separators.
    """
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return ()
        parts = text.split(",") if per_gear == 1 else text.split(";")
        raw = [part.strip() if per_gear == 1 else
               [v.strip() for v in part.split(",")] for part in parts if part.strip()]
    else:
        raw = list(value)
    gears = []
    for entry in raw:
        items = entry if isinstance(entry, (list, tuple)) else [entry]
        gear = []
        for item in items:
            try:
                number = int(str(item).strip())
            except ValueError:
                raise FusionConfigError(
                    f"{_flag(flag)} {_shown(value)}: {str(item).strip()!r} is not an integer; "
                    f"give {_syntax(flag)}") from None
            if number < 1:
                raise FusionConfigError(f"{_flag(flag)} {_shown(value)}: {number} is not a "
                                        "positive size; every gear value must be >= 1")
            gear.append(number)
        gears.append(tuple(gear))
    return tuple(gears)


def _shown(value) -> str:
    return repr(value) if isinstance(value, str) else repr(tuple(value))


def _syntax(flag: str) -> str:
    return {"dynamic_batch_size": 'batch sizes separated by commas, e.g. "1,2,4,8"',
            "dynamic_image_size": 'H,W pairs separated by semicolons, e.g. "224,224;448,448"',
            "dynamic_dims": 'gears separated by semicolons, each one value per -1 of '
                            '--input_shape separated by commas, e.g. "1,128;1,256"'}[flag]


def gear_spec(input_shape: Mapping, dynamic_batch_size="", dynamic_image_size="",
              dynamic_dims="", input_format: str = "") -> GearSpec | None:
    """The gears ``input_shape`` (``{name: dims}``, -1 for dynamic) and the gear flags ask
    for, checked by ATC's rules; None when no gear flag is given.

    Raises FusionConfigError naming the flag and the value at fault.
    """
    given = {"dynamic_batch_size": dynamic_batch_size, "dynamic_image_size": dynamic_image_size,
             "dynamic_dims": dynamic_dims}
    used = [name for name, value in given.items() if _present(value)]
    fmt = (input_format or "").strip().upper()
    if fmt and fmt not in INPUT_FORMATS:
        raise FusionConfigError(f"{_flag('input_format')} {input_format!r} is not one of "
                                f"{', '.join(INPUT_FORMATS)}")
    if not used:
        return None
    if len(used) > 1:
        raise FusionConfigError(f"{' and '.join('--' + u for u in used)} are given together; "
                                "ATC's gear flags --dynamic_batch_size, --dynamic_image_size "
                                "and --dynamic_dims are mutually exclusive: give one")
    flag = used[0]
    shapes = parse_input_shape(input_shape)
    _no_ranges(flag, shapes)
    dynamic = tuple((name, axis) for name, dims in shapes.items()
                    for axis, d in enumerate(dims) if d == -1)
    if not dynamic:
        raise FusionConfigError(
            f"{_flag(flag)} needs -1 in --input_shape (CompileConfig.input_shape) where the "
            f"gears go; given {_shapes_text(shapes) or 'no --input_shape'}, e.g. "
            f"{_example(flag)}")
    if flag == "dynamic_dims" and not fmt:
        raise FusionConfigError(f"{_flag(flag)} needs --input_format ND "
                                "(CompileConfig.input_format='ND'), as ATC does")
    fmt = fmt or "NCHW"
    per_gear = {"dynamic_batch_size": 1, "dynamic_image_size": 2,
                "dynamic_dims": len(dynamic)}[flag]
    gears = parse_gear_values(flag, given[flag], per_gear if flag == "dynamic_batch_size"
                              else None)
    _check_count(flag, given[flag], gears)
    {"dynamic_batch_size": _check_batch, "dynamic_image_size": _check_image,
     "dynamic_dims": _check_dims}[flag](given[flag], shapes, dynamic, gears, fmt)
    names = tuple(dict.fromkeys(n for n, _ in dynamic))
    built = []
    for index, values in enumerate(gears):
        filled = _filled(shapes, dynamic, flag, values)
        label = ";".join(f"{n}:{','.join(map(str, filled[n]))}" for n in names)
        built.append(Gear(index, values, filled, label))
    return GearSpec(flag, fmt, dynamic, tuple(built))


def _present(value) -> bool:
    return bool(value.strip()) if isinstance(value, str) else bool(value)


def _no_ranges(flag: str, shapes: dict) -> None:
    for name, dims in shapes.items():
        for axis, d in enumerate(dims):
            if isinstance(d, tuple):
                raise FusionConfigError(
                    f"--input_shape {name}:{_dims_text(dims)}: dimension {axis} is a range "
                    f"({d[0]}~{d[1]}), which cannot be combined with {_flag(flag)}; give -1 "
                    "there for gears, or drop the gear flag for a range")


def _check_count(flag: str, value, gears: tuple) -> None:
    if not MIN_GEARS <= len(gears) <= MAX_GEARS:
        raise FusionConfigError(f"{_flag(flag)} {_shown(value)} gives {len(gears)} gear(s); "
                                f"ATC allows {MIN_GEARS} to {MAX_GEARS} (3 or 4 recommended)")
    seen = {}
    for index, gear in enumerate(gears):
        if gear in seen:
            raise FusionConfigError(f"{_flag(flag)} {_shown(value)}: gear {index + 1} "
                                    f"({','.join(map(str, gear))}) repeats gear {seen[gear] + 1}; "
                                    "every gear must be different")
        seen[gear] = index


def _check_batch(value, shapes, dynamic, gears, fmt) -> None:
    wrong = [(n, a) for n, a in dynamic if a != 0]
    if wrong:
        name, axis = wrong[0]
        raise FusionConfigError(
            f"--dynamic_batch_size: --input_shape {name}:{_dims_text(shapes[name])} has -1 at "
            f"dimension {axis}; only dimension 0 (the batch, N) may be -1 with "
            "--dynamic_batch_size (use --dynamic_image_size for H,W or --dynamic_dims with "
            "--input_format ND for other dimensions)")
    big = [g[0] for g in gears if g[0] > MAX_BATCH]
    if big:
        raise FusionConfigError(f"{_flag('dynamic_batch_size')} {_shown(value)}: batch size "
                                f"{big[0]} is above ATC's limit of {MAX_BATCH}")


def _check_image(value, shapes, dynamic, gears, fmt) -> None:
    if fmt not in ("NCHW", "NHWC"):
        raise FusionConfigError(f"--dynamic_image_size needs --input_format NCHW or NHWC (the "
                                f"H and W it sets), not {fmt}; use --dynamic_dims with ND")
    hw = (2, 3) if fmt == "NCHW" else (1, 2)
    for name in dict.fromkeys(n for n, _ in dynamic):
        dims = shapes[name]
        axes = tuple(a for n, a in dynamic if n == name)
        if len(dims) != 4 or axes != hw:
            raise FusionConfigError(
                f"--dynamic_image_size: --input_shape {name}:{_dims_text(dims)} must be 4-D "
                f"{fmt} with -1 at exactly H and W (dimensions {hw[0]} and {hw[1]}), e.g. "
                f"{name}:{'1,3,-1,-1' if fmt == 'NCHW' else '1,-1,-1,3'}")
    odd = [g for g in gears if len(g) != 2]
    if odd:
        raise FusionConfigError(f"{_flag('dynamic_image_size')} {_shown(value)}: gear "
                                f"{','.join(map(str, odd[0]))} has {len(odd[0])} value(s); each "
                                "gear is H,W (two values), gears separated by ';'")


def _check_dims(value, shapes, dynamic, gears, fmt) -> None:
    if fmt != "ND":
        raise FusionConfigError(f"--dynamic_dims needs --input_format ND (given {fmt}); "
                                "ATC takes --dynamic_dims only for ND inputs")
    for gear in gears:
        if len(gear) != len(dynamic):
            where = ", ".join(f"{n} dim {a}" for n, a in dynamic)
            raise FusionConfigError(
                f"{_flag('dynamic_dims')} {_shown(value)}: gear {','.join(map(str, gear))} has "
                f"{len(gear)} value(s), but --input_shape {_shapes_text(shapes)} has "
                f"{len(dynamic)} -1(s) ({where}); each gear gives one value per -1, in order")


def _filled(shapes: dict, dynamic: tuple, flag: str, values: tuple) -> dict:
    """Every input's static shape under one gear."""
    if flag == "dynamic_batch_size":
        fill = {pos: values[0] for pos in dynamic}
    elif flag == "dynamic_image_size":
        fill = {}
        for name in dict.fromkeys(n for n, _ in dynamic):
            axes = [a for n, a in dynamic if n == name]
            fill[(name, axes[0])], fill[(name, axes[1])] = values
    else:
        fill = dict(zip(dynamic, values))
    return {name: tuple(fill.get((name, axis), d) for axis, d in enumerate(dims))
            for name, dims in shapes.items()}


def _dims_text(dims) -> str:
    return ",".join(f"{d[0]}~{d[1]}" if isinstance(d, tuple) else str(d) for d in dims)


def _shapes_text(shapes: dict) -> str:
    return ";".join(f"{n}:{_dims_text(d)}" for n, d in shapes.items())


def _example(flag: str) -> str:
    return {"dynamic_batch_size": '--input_shape "x:-1,3,224,224" --dynamic_batch_size "1,2,4"',
            "dynamic_image_size": '--input_shape "x:1,3,-1,-1" --dynamic_image_size '
                                  '"224,224;448,448"',
            "dynamic_dims": '--input_shape "ids:-1,-1" --input_format ND --dynamic_dims '
                            '"1,128;8,512"'}[flag]


def config_gears(config) -> "GearSpec | None":
    """The ``GearSpec`` of a CompileConfig's gear fields (None without gears);
    FusionConfigError, naming the flag and value, when they break ATC's rules.

    It lives here, not on CompileConfig, because the config is ground the stages stand on and
    may not import a stage.

    >>> from tvm_ascend import CompileConfig
    >>> config_gears(CompileConfig()) is None
    True
    """
    return gear_spec(config.input_shape, config.dynamic_batch_size, config.dynamic_image_size,
                     config.dynamic_dims, config.input_format)
