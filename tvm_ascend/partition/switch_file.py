"""ATC fusion switch files: which fusion rules to turn on or off on top of the fusion level.

Both of ATC's formats are read (``--fusion_switch_file``):

* text, one ``RuleName:on`` or ``RuleName:off`` per line; ``#`` starts a comment; ``ALL:off``
  (or ``ALL:on``) covers every rule::

      # keep softmax separate while we chase a precision problem
      SoftmaxFusionPass:off

* JSON, rules grouped by ATC's two sections; ``ALL`` covers the rules of its section::

      {"Switch": {"GraphFusion": {"ALL": "off", "SoftmaxFusionPass": "on"},
                  "UBFusion": {"ALL": "on"}}}

Rule names may be ours (``SoftmaxFusion``) or ATC's (``SoftmaxFusionPass``), see
partition/rules.py. A rule may sit in either JSON section: several ATC passes (graph and UB
ones) map onto one of our rules, so the section only decides what its ``ALL`` covers. As in
ATC, an explicit rule entry wins over ``ALL`` wherever it stands. Unlike ATC, ``ALL: off``
really turns every rule off, and ``on`` can turn on a rule that the fusion level leaves off.

Every mistake is a FusionConfigError naming the file, the line (and column for JSON syntax
errors) and the word at fault; nothing falls back to defaults silently.

Example
-------
>>> from tvm_ascend.partition.switch_file import load_switch_file
>>> switches = load_switch_file("fusion_switch.cfg")          # doctest: +SKIP
>>> sorted(switches.apply(frozenset({"SoftmaxFusion", "ElementwiseFusion"})))  # doctest: +SKIP
['ElementwiseFusion']
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from ..errors import FusionConfigError
from .rules import RULES, rule_by_name

SECTIONS = ("GraphFusion", "UBFusion")
ALL = "ALL"
_VALUES = {"on": True, "off": False}


@dataclass(frozen=True)
class FusionSwitches:
    """The parsed switch file: ``ALL`` per section and the explicit rule entries.

    ``section_all`` holds ``(section, on)`` pairs (a text file's ``ALL`` covers both sections);
    ``rules`` holds ``(our rule name, on)`` pairs, sorted by name; ``source`` is the file.
    """

    source: str
    section_all: tuple[tuple[str, bool], ...] = ()
    rules: tuple[tuple[str, bool], ...] = ()

    def apply(self, enabled: frozenset[str]) -> frozenset[str]:
        """The rules on after this file: ``ALL`` of each section first, then explicit entries.

        Parameters
        ----------
        enabled : frozenset of str
            The rules the fusion level (and rule set) turns on.

        Returns
        -------
        frozenset of str

        Example
        -------
        >>> FusionSwitches("f.cfg", (("GraphFusion", False),), (("SoftmaxFusion", True),)).apply(
        ...     frozenset({"LayerNormFusion", "ElementwiseFusion"})) == frozenset(
        ...     {"ElementwiseFusion", "SoftmaxFusion"})
        True
        """
        result = set(enabled)
        for section, on in self.section_all:
            names = {rule.name for rule in RULES if rule.section == section}
            result = result | names if on else result - names
        for name, on in self.rules:
            if on:
                result.add(name)
            else:
                result.discard(name)
        return frozenset(result)

    def to_json(self) -> dict:
        """``{"source", "ALL": {section: "on"|"off"}, "rules": {rule: "on"|"off"}}``."""
        word = {True: "on", False: "off"}
        return {"source": self.source,
                "ALL": {section: word[on] for section, on in self.section_all},
                "rules": {name: word[on] for name, on in self.rules}}


def load_switch_file(path: str) -> FusionSwitches:
    """Read an ATC fusion switch file (text or JSON format, told apart by a leading ``{``).

    Parameters
    ----------
    path : str
        The file (``CompileConfig.fusion_switch_file``, ``--fusion_switch_file``).

    Returns
    -------
    FusionSwitches

    Raises
    ------
    FusionConfigError
        Missing or unreadable file, a malformed line, an unknown rule (with the closest names),
        an unknown JSON section, a value that is not on/off, a rule given two values, or a
        file that names no rule at all.

    Example
    -------
    >>> load_switch_file("fusion_switch.cfg").to_json()["rules"]       # doctest: +SKIP
    {'SoftmaxFusion': 'off'}
    """
    text = _read(path)
    if text.lstrip().startswith("{"):
        entries = _parse_json(path, text)
    else:
        entries = _parse_text(path, text)
    if not entries:
        raise FusionConfigError(
            f"fusion switch file {path}: names no rule (expected lines like "
            "'SoftmaxFusionPass:off' or ATC's JSON {\"Switch\": {...}}); drop "
            "--fusion_switch_file to use the fusion level's rules")
    return _collect(path, entries)


@dataclass(frozen=True)
class _Entry:
    """One ``name: value`` entry of the file; ``key`` is the rule or ``ALL@section``."""

    key: str
    on: bool
    where: str
    word: str


def _read(path: str) -> str:
    if not os.path.exists(path):
        raise FusionConfigError(f"fusion switch file {path!r} does not exist "
                                "(fusion_switch_file / --fusion_switch_file)")
    if os.path.isdir(path):
        raise FusionConfigError(f"fusion switch file {path!r} is a directory, not a file")
    try:
        with open(path, encoding="utf-8-sig") as handle:  # a BOM is not part of a name
            return handle.read()
    except UnicodeDecodeError as exc:
        raise FusionConfigError(f"fusion switch file {path}: not UTF-8 text ({exc.reason} at "
                                f"byte {exc.start})") from exc
    except OSError as exc:
        raise FusionConfigError(f"fusion switch file {path}: cannot be read "
                                f"({exc.strerror})") from exc


def _value(word: str, where: str, name: str) -> bool:
    key = word.strip().lower()
    if key not in _VALUES:
        raise FusionConfigError(f"{where}: value {word.strip()!r} of {name!r} is not 'on' or "
                                "'off'")
    return _VALUES[key]


def _rule_entry(name: str, on: bool, where: str) -> _Entry:
    return _Entry(rule_by_name(name, where).name, on, where, name)


def _parse_text(path: str, text: str) -> list[_Entry]:
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{number}"
        if ":" not in line:
            raise FusionConfigError(f"{where}: {line!r} is not 'RuleName:on' or 'RuleName:off' "
                                    "(no colon)")
        name, word = (part.strip() for part in line.split(":", 1))
        if not name:
            raise FusionConfigError(f"{where}: {line!r} has no rule name before the colon")
        on = _value(word, where, name)
        if name.upper() == ALL:
            entries += [_Entry(f"{ALL}@{section}", on, where, name) for section in SECTIONS]
        else:
            entries.append(_rule_entry(name, on, where))
    return entries


def _line_of(text: str, key: str, start: int) -> tuple[int, int]:
    """Line of the first ``"key":`` at or after ``start`` and the offset just past it."""
    match = re.compile(r'"' + re.escape(key) + r'"\s*:').search(text, start)
    if match is None:  # the key was written with JSON escapes: point at where we are
        return text.count("\n", 0, start) + 1, start
    return text.count("\n", 0, match.start()) + 1, match.end()


class _Object(list):
    """A JSON object as its ``(key, value)`` pairs: json's dict would drop a repeated key."""


def _parse_json(path: str, text: str) -> list[_Entry]:
    try:
        document = json.loads(text, object_pairs_hook=_Object)
    except json.JSONDecodeError as exc:
        raise FusionConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}) "
                                f"near {text[exc.pos:exc.pos + 20]!r}") from exc
    if not isinstance(document, _Object) or not document:
        raise FusionConfigError(f"{path}:1: the JSON switch file must be an object "
                                "{\"Switch\": {...}}")
    keys = [key for key, _ in document]
    if keys != ["Switch"]:
        bad = next((key for key in keys if key != "Switch"), "Switch")
        line, _ = _line_of(text, bad, 0)
        raise FusionConfigError(f"{path}:{line}: unexpected top-level key {bad!r}; the file must "
                                "hold exactly one key, \"Switch\"")
    switch = document[0][1]
    line, offset = _line_of(text, "Switch", 0)
    if not isinstance(switch, _Object):
        raise FusionConfigError(f"{path}:{line}: \"Switch\" must be an object of sections "
                                f"({', '.join(SECTIONS)}), not {_kind(switch)}")
    entries = []
    for section, body in switch:
        line, offset = _line_of(text, section, offset)
        where = f"{path}:{line}"
        if section not in SECTIONS:
            raise FusionConfigError(f"{where}: unknown section {section!r}; ATC's sections are "
                                    f"{', '.join(SECTIONS)}")
        if not isinstance(body, _Object):
            raise FusionConfigError(f"{where}: section {section!r} must be an object of "
                                    f"\"Rule\": \"on\"|\"off\", not {_kind(body)}")
        for name, word in body:
            line, offset = _line_of(text, name, offset)
            where = f"{path}:{line}"
            if not isinstance(word, str):
                raise FusionConfigError(f"{where}: value of {name!r} must be the string \"on\" or "
                                        f"\"off\", not {_kind(word)}")
            on = _value(word, where, name)
            if name.upper() == ALL:
                entries.append(_Entry(f"{ALL}@{section}", on, where, name))
            else:
                entries.append(_rule_entry(name, on, where))
    return entries


def _kind(value) -> str:
    if isinstance(value, _Object):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return {str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _collect(path: str, entries: list[_Entry]) -> FusionSwitches:
    """Merge entries, refusing one rule (or one section's ALL) given two different values."""
    seen: dict[str, _Entry] = {}
    for entry in entries:
        first = seen.get(entry.key)
        if first is not None and first.on != entry.on:
            what = (f"ALL of {entry.key.split('@')[1]}" if entry.key.startswith(ALL + "@")
                    else f"rule {entry.key}")
            raise FusionConfigError(
                f"{entry.where}: {entry.word!r} sets {what} "
                f"{'on' if entry.on else 'off'}, but {first.where} ({first.word!r}) set it "
                f"{'on' if first.on else 'off'}; keep one of them")
        seen.setdefault(entry.key, entry)
    section_all = tuple((key.split("@")[1], e.on) for key, e in seen.items()
                        if key.startswith(ALL + "@"))
    rules = tuple(sorted((key, e.on) for key, e in seen.items()
                         if not key.startswith(ALL + "@")))
    return FusionSwitches(source=path, section_all=section_all, rules=rules)


__all__ = ["FusionSwitches", "load_switch_file", "SECTIONS"]
