"""The real AscendC API as data, read from CANN's asc-devkit headers (a support module, not a
test file), and the AscendC uses of a printed kernel, for the conformance check in
tests/test_ascendc_conformance.py.

The headers compile only with CANN's compiler, so they are read, not compiled: every
``__aicore__`` function declaration (name, parameter count range, template parameter count
range), every class/struct template, every enum and its values and every ``using`` alias, from
``include/`` (basic and advanced API, utils) plus ``impl/basic_api`` without the folders of the
other architectures. Rough C++ reading: comments and string literals dropped, balanced
brackets; good enough for what the printers emit, and a miss fails loudly, not silently.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from build_checks import REPO_ROOT

# the asc-devkit copy beside the repository (a toolkit's own is looked in first)
VENDOR_ASC_DEVKIT = os.path.join("..", "shared", "vendor", "cann", "asc-devkit")
# the architecture folder of impl/basic_api each SoC's kernels are built for
ARCH_OF_SOC = {"Ascend910B1": "dav_c220", "Ascend310P3": "dav_m200"}
# include/ folders of other programming models (SIMT, the C API, AI CPU, the tensor API)
_OTHER_MODELS = ("simt_api", "c_api", "aicpu_api", "tensor_api")
UNBOUNDED = 1 << 30  # a parameter pack


def asc_devkit_root(environ=None, root: str = REPO_ROOT) -> tuple[str | None, list[str]]:
    """(the folder holding asc-devkit's ``include/kernel_operator.h`` and ``impl/basic_api``,
    or None; the folders tried): ``$ASCEND_HOME_PATH/asc`` first, then the vendored copy."""
    environ = os.environ if environ is None else environ
    tried = []
    if environ.get("ASCEND_HOME_PATH"):
        tried.append(os.path.join(environ["ASCEND_HOME_PATH"], "asc"))
    tried.append(os.path.normpath(os.path.join(root, VENDOR_ASC_DEVKIT)))
    for folder in tried:
        if (os.path.isfile(os.path.join(folder, "include", "kernel_operator.h"))
                and os.path.isdir(os.path.join(folder, "impl", "basic_api"))):
            return folder, tried
    return None, tried


@dataclass(frozen=True)
class Arity:
    """How many arguments a declaration takes: ``low`` without defaults, ``high`` with all
    (UNBOUNDED for a pack)."""

    low: int
    high: int

    def accepts(self, count: int) -> bool:
        return self.low <= count <= self.high


@dataclass
class ApiIndex:
    """What one architecture's headers declare."""

    arch: str
    functions: dict = field(default_factory=dict)  # name -> {(template Arity, params Arity)}
    classes: dict = field(default_factory=dict)    # name -> {template Arity} (Arity(0,0): plain)
    enums: dict = field(default_factory=dict)      # name -> set of value names
    aliases: dict = field(default_factory=dict)    # name -> the aliased name's last component
    macros: set = field(default_factory=set)
    # API names the architecture's folder marks deprecated / unsupported (their NOTICE text)
    notices: dict = field(default_factory=dict)

    def enum_values(self, name: str) -> set:
        seen = set()
        while name in self.aliases and name not in seen:  # QuePosition = TPosition
            seen.add(name)
            name = self.aliases[name]
        return self.enums.get(name, set())

    def has_type(self, name: str) -> bool:
        return name in self.classes or name in self.enums or name in self.aliases


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


def strip_code(text: str) -> str:
    """C++ text without comments and with string literals emptied (kept as ``""``)."""
    return _STRING.sub('""', _COMMENT.sub(" ", text))


def _opens_angle(text: str, i: int) -> bool:
    """Whether the ``<`` at ``i`` opens template arguments: it follows a name with no space
    (``Foo<T>``; ``template <`` is handled by its caller), not ``a < b`` nor ``<<``/``<=``."""
    return (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
            and text[i + 1:i + 2] not in ("<", "="))


def balanced(text: str, start: int) -> int:
    """The index just past the bracket closing the one at ``text[start]``, or -1."""
    stack = [text[start]]
    i = start + 1
    while i < len(text) and stack:
        c = text[i]
        if c in "([{" or (c == "<" and _opens_angle(text, i)):
            stack.append(c)
        elif c in ")]}":
            while stack and stack[-1] == "<":  # a stray ``<`` was a comparison after all
                stack.pop()
            if not stack:
                return -1
            stack.pop()
        elif c == ">" and stack[-1] == "<" and text[i - 1] != "-":
            stack.pop()
        i += 1
    return i if not stack else -1


def split_top(text: str) -> list[str]:
    """``text`` split at its top-level commas (brackets and template angles balanced)."""
    parts, stack, current = [], [], []
    for i, c in enumerate(text):
        if c in "([{" or (c == "<" and _opens_angle(text, i)):
            stack.append(c)
        elif c in ")]}":
            while stack and stack[-1] == "<":
                stack.pop()
            if stack:
                stack.pop()
        elif c == ">" and stack and stack[-1] == "<" and text[i - 1] != "-":
            stack.pop()
        if c == "," and not stack:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def arity_of(params: str) -> Arity:
    """The Arity of a parameter list's text (without its brackets)."""
    parts = [p for p in split_top(params) if p != "void"]
    if any("..." in p for p in parts):
        return Arity(len([p for p in parts if "..." not in p and "=" not in p]), UNBOUNDED)
    required = [p for p in parts if not re.search(r"(?<![=!<>])=(?!=)", p)]
    return Arity(len(required), len(parts))


_DECL_NAME = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_TEMPLATE = re.compile(r"\btemplate\s*<")
_CLASS = re.compile(r"\b(?:class|struct)\s+(?:__\w+\s+|alignas\([^)]*\)\s+)*([A-Za-z_]\w*)\s*"
                    r"(?:final\s*)?[:{;<]")
_ENUM = re.compile(r"\benum\s+(?:class\s+|struct\s+)?([A-Za-z_]\w*)\s*(?::\s*[\w:]+\s*)?\{")
_TYPEDEF_ENUM = re.compile(r"\btypedef\s+enum\s*(?:[A-Za-z_]\w*)?\s*\{([^}]*)\}\s*(\w+)\s*;")
_USING = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*([^;]+);")
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)
# ``[[deprecated("NOTICE: Name ...")]]`` before a declaration: the notice's API name and the
# declared function's (they differ: SetSysWorkSpace's notice is on SetSysWorkspace)
_NOTICE = re.compile(r'\[\[deprecated\("NOTICE: (\w+) ([^"]*)"[^\]]*\]\]\s*'
                     r'(?:template\s*<[^>]*>\s*)?[^;{(]*?\b(\w+)\s*\(')
_NOT_SUPPORTED = re.compile(r'ASCENDC_REPORT_NOT_SUPPORT\(\s*false\s*,\s*"(\w+)"\s*\)')


def _template_before(text: str, name_at: int) -> Arity:
    """The template parameter Arity of the declaration whose name starts at ``name_at``:
    the nearest ``template <...>`` after the previous statement boundary (Arity(0, 0) if
    none)."""
    start = max(text.rfind(";", 0, name_at), text.rfind("}", 0, name_at),
                text.rfind("{", 0, name_at))
    prefix_start = start + 1
    found = None
    for m in _TEMPLATE.finditer(text, prefix_start, name_at):
        found = m
    if found is None:
        return Arity(0, 0)
    end = balanced(text, found.end() - 1)
    if end < 0 or end > name_at:
        return Arity(0, 0)
    return arity_of(text[found.end():end - 1])


def _declarations(text: str, index: ApiIndex) -> None:
    """Functions (``__aicore__`` in their prefix, or members of a class), classes, enums and
    aliases of one header's stripped text, into ``index``."""
    for m in _DECL_NAME.finditer(text):
        name = m.group(1)
        if name in ("if", "for", "while", "switch", "return", "sizeof", "decltype",
                    "static_assert", "defined", "alignas", "__attribute__"):
            continue
        # (not ")": ``__aicore__ inline __inout_pipe__(S) T GetValue(...)`` is a declaration)
        boundary = max(text.rfind(";", 0, m.start()), text.rfind("}", 0, m.start()),
                       text.rfind("{", 0, m.start()))
        prefix = text[boundary + 1:m.start()]
        if "__aicore__" not in prefix and not re.search(r"\b(?:inline|void|auto|static)\b",
                                                        prefix):
            continue
        if "=" in prefix.split(">")[-1] or "return" in prefix.split():
            continue  # an initialiser or a call, not a declaration
        close = balanced(text, m.end() - 1)
        if close < 0:
            continue
        after = text[close:close + 40].lstrip()
        if not re.match(r"(?:const\b|noexcept\b|->|override\b|\{|;|=\s*(?:default|delete)|"
                        r"__attribute__|\[\[|:(?!:)|__aicore__)", after):
            # ``:`` a constructor's inits; ``__aicore__``: the other branch of an #if
            continue
        params = arity_of(text[m.end():close - 1])
        index.functions.setdefault(name, set()).add((_template_before(text, m.start()),
                                                     params))
    for m in _CLASS.finditer(text):
        name = m.group(1)
        # the template header right before ``class`` (not one of an earlier declaration)
        arity = _template_before(text, m.start())
        index.classes.setdefault(name, set()).add(arity)
    for m in _ENUM.finditer(text):
        end = balanced(text, m.end() - 1)
        body = text[m.end():end - 1] if end > 0 else ""
        body = re.sub(r"^\s*#.*$", "", body, flags=re.M)  # values under #if: all kept
        values = {part.split("=")[0].strip() for part in split_top(body)}
        index.enums.setdefault(m.group(1), set()).update(v for v in values if v)
    for m in _TYPEDEF_ENUM.finditer(text):
        values = {part.split("=")[0].strip() for part in split_top(m.group(1))}
        index.enums.setdefault(m.group(2), set()).update(v for v in values if v)
    for m in _USING.finditer(text):
        target = re.sub(r"<.*", "", m.group(2)).strip().split("::")[-1]
        index.aliases[m.group(1)] = target
        index.classes.setdefault(m.group(1), set()).add(_template_before(text, m.start()))


def header_files(devkit: str, arch: str) -> list[Path]:
    """The headers one architecture's kernels see: include/ (but other programming models)
    and impl/basic_api without the other architectures' folders."""
    root = Path(devkit)
    files = [p for p in (root / "include").rglob("*.h")
             if p.relative_to(root / "include").parts[0] not in _OTHER_MODELS]
    for p in (root / "impl" / "basic_api").rglob("*.h"):
        part = p.relative_to(root / "impl" / "basic_api").parts[0]
        if not part.startswith("dav_") or part == arch:
            files.append(p)
    return sorted(files)


@functools.lru_cache(maxsize=None)
def _file_index(path: Path) -> ApiIndex:
    """The declarations and macros of one header (shared by the architectures that see it)."""
    index = ApiIndex("")
    raw = path.read_text(errors="replace")
    index.macros.update(_DEFINE.findall(raw))
    # directives (and macro bodies) out: both branches of an #if are read as declarations
    _declarations(_DIRECTIVE.sub("", strip_code(raw)), index)
    return index


@functools.lru_cache(maxsize=None)
def api_index(devkit: str, arch: str) -> ApiIndex:
    """The ApiIndex of ``arch`` (``dav_c220``, ``dav_m200``) from the asc-devkit at ``devkit``:
    the notices are those of include/ and of the architecture's own folder."""
    index = ApiIndex(arch)
    arch_folder = Path(devkit) / "impl" / "basic_api" / arch
    for path in header_files(devkit, arch):
        part = _file_index(path)
        for name, decls in part.functions.items():
            index.functions.setdefault(name, set()).update(decls)
        for name, arities in part.classes.items():
            index.classes.setdefault(name, set()).update(arities)
        for name, values in part.enums.items():
            index.enums.setdefault(name, set()).update(values)
        index.aliases.update(part.aliases)
        index.macros.update(part.macros)
        in_arch = arch_folder in path.parents
        if in_arch or path.relative_to(devkit).parts[0] == "include":
            raw = path.read_text(errors="replace")
            for named, text, declared in _NOTICE.findall(re.sub(r'"\s*\n\s*"', "", raw)):
                kind = "unsupported" if "unsupported API" in text else "deprecated"
                for name in {named, declared}:
                    index.notices.setdefault(name, set()).add(kind)
            if in_arch:
                for name in _not_supported_outside_core_guards(raw):
                    index.notices.setdefault(name, set()).add("unsupported")
    return index


def _not_supported_outside_core_guards(raw: str) -> list[str]:
    """Bare API names ``ASCENDC_REPORT_NOT_SUPPORT(false, "Name")`` reports, except where a
    ``#if`` picks one kind of core (``__DAV_M200_VEC__``: a cube API on the vector core)."""
    names, guards = [], []
    for line in raw.splitlines():
        directive = line.strip()
        if directive.startswith("#if"):
            guards.append(directive)
        elif directive.startswith("#endif") and guards:
            guards.pop()
        elif directive.startswith(("#else", "#elif")) and guards:
            guards[-1] = guards[-1] + " " + directive
        m = _NOT_SUPPORTED.search(line)
        if m and not any(re.search(r"_(VEC|CUBE)__", g) for g in guards):
            names.append(m.group(1))
    return names


# ---- what a printed kernel uses -----------------------------------------------------------------
@dataclass(frozen=True)
class Use:
    """One AscendC use in printed code: ``kind`` is "call" (a qualified free function),
    "member" (``.Name(`` on an AscendC object), "type", "construct" (``Name x{...}``, its
    ``args`` the values), "enum" or "macro"; ``template_args`` None when none were written."""

    kind: str
    name: str
    template_args: int | None = None
    args: int | None = None
    scope: str = ""  # an enum's type name


_QUALIFIED = re.compile(r"\b(?:AscendC|matmul)::((?:[A-Za-z_]\w*::)*)([A-Za-z_]\w*)")
_MEMBER = re.compile(r"(?<=[\w\])])\.([A-Z][A-Za-z0-9_]*)\s*(?=[<(])")
_OWN = re.compile(r"__aicore__\s+inline\s+[\w:<>*&, ]*?\b([A-Z]\w*)\s*\(")
_MACROS = ("REGIST_MATMUL_OBJ", "KERNEL_TASK_TYPE_DEFAULT")


def _call_after(text: str, at: int) -> tuple[int | None, int | None, int]:
    """(template argument count or None, call argument count or None, end) of what follows
    a name ending at ``at``."""
    template_args = None
    i = at
    if text[i:i + 1] == "<":
        end = balanced(text, i)
        if end < 0:
            return None, None, at
        template_args = len(split_top(text[i + 1:end - 1]))
        i = end
    j = i
    while j < len(text) and text[j] == " ":
        j += 1
    if text[j:j + 1] == "(":
        end = balanced(text, j)
        if end > 0:
            return template_args, len(split_top(text[j + 1:end - 1])), end
    return template_args, None, i


def uses_in(source: str) -> set[Use]:
    """Every AscendC (and ``matmul::``) call, member call, type, enum value and macro of a
    printed kernel's ``source``; member calls of the kernel's own classes are left out, and
    so is the emulator's own ``AscendC::emu`` namespace (CPU-build launchers only)."""
    text = strip_code(source)
    own = set(_OWN.findall(text))
    uses = set()
    for m in _QUALIFIED.finditer(text):
        scopes, name = m.group(1), m.group(2)
        if scopes.startswith("emu::"):
            continue
        if scopes:
            uses.add(Use("enum", name, scope=scopes.rstrip(":").split("::")[-1]))
            continue
        template_args, args, end = _call_after(text, m.end())
        # ``Name<...>(`` / ``Name(`` is a call; ``Name<...> x`` / ``Name x{...}`` a type
        uses.add(Use("call", name, template_args, args) if args is not None
                 else Use("type", name, template_args))
        braced = re.match(r"\s*[A-Za-z_]\w*\s*\{", text[end:end + 80])
        if args is None and braced:  # ``Name x{a, b}``: a constructor call (or an aggregate)
            close = balanced(text, end + braced.end() - 1)
            if close > 0:
                uses.add(Use("construct", name, template_args,
                             len(split_top(text[end + braced.end():close - 1]))))
    for m in _MEMBER.finditer(text):
        if m.group(1) in own:
            continue
        template_args, args, _ = _call_after(text, m.end())
        if args is not None:
            uses.add(Use("member", m.group(1), template_args, args))
    for name in _MACROS:
        if re.search(rf"\b{name}\s*\(", text):
            uses.add(Use("macro", name))
    return uses


def check_use(use: Use, index: ApiIndex) -> str | None:
    """Why ``use`` does not conform to ``index`` (None when it does)."""
    if use.kind == "macro":
        return None if use.name in index.macros else f"macro {use.name} is not defined"
    if use.kind == "enum":
        values = index.enum_values(use.scope)
        if not values:
            return f"no enum {use.scope} (for {use.scope}::{use.name})"
        return None if use.name in values else f"enum {use.scope} has no value {use.name}"
    if use.kind == "type":
        if not index.has_type(use.name):
            return f"no class, struct, enum or alias {use.name}"
        if use.template_args is None:
            return None
        arities = index.classes.get(use.name, set())
        if any(a.accepts(use.template_args) for a in arities):
            return None
        return (f"{use.name}<...> takes {sorted((a.low, a.high) for a in arities)} template "
                f"arguments, printed with {use.template_args}")
    declared = index.functions.get(use.name)
    if use.kind == "construct":
        if not declared:  # no constructor: an aggregate, any prefix of its fields
            return None
        if any(p.accepts(use.args) for _, p in declared):
            return None
        shapes = sorted({(p.low, p.high) for _, p in declared})
        return (f"{use.name}{{...}}: no constructor takes {use.args} values (declared: "
                f"{shapes})")
    if not declared:
        return f"no function {use.name}"
    for template, params in declared:
        explicit_ok = use.template_args is None or use.template_args <= template.high
        if explicit_ok and params.accepts(use.args):
            return None
    shapes = sorted({(t.high, p.low, p.high if p.high != UNBOUNDED else "...")
                     for t, p in declared})
    return (f"{use.name}: no overload takes {use.template_args or 0} template and {use.args} "
            f"call arguments (declared: (template params, min args, max args) {shapes})")
