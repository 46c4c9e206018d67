"""FusionPolicy: what the planner may do, decided once from CompileConfig and passed down.

The config's fusion level, rule set and switch file are resolved into rule names here
(``enabled_rules``, ``switches_of``), not in ``config.py``, which stands below every stage.

Example
-------
>>> from tvm_ascend import CompileConfig
>>> from tvm_ascend.partition.policy import FusionPolicy
>>> policy = FusionPolicy.from_config(CompileConfig(rule_set="tvm_fuseops"))
>>> policy.merge, policy.cost_checked
(False, False)
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir_attrs
from ..errors import check_known_names
from .rules import rules_for_level
from .switch_file import load_switch_file


@dataclass(frozen=True)
class FusionPolicy:
    """The inputs of the fusion decisions that come from the user.

    ``rules``: names of the rules switched on (partition/rules.py); ``merge``: whether the Ascend
    merge rules run after TVM's FuseOps (off for the plain-TVM rule set); ``cost_checked``:
    whether a merge must also be estimated faster than the split (off for the fixed-pattern
    rule sets, which emulate compilers that do not ask a cost model); ``no_fuse_nodes``: ONNX
    nodes fenced off from every group; ``plan``: an imported fusion plan (groups to rebuild);
    ``search_width``: beam width of the region search (1: pairwise greedy merging only);
    ``split_ops`` / ``host_ops``: Relax bindings of ``main`` whose fused kernel failed below
    the partitioner (each is then a kernel of its own), and ``(binding, reason)`` pairs of
    single-op kernels that failed (they run on the host): ``tvm_ascend/fallback.py``.
    """

    rules: frozenset = frozenset()
    merge: bool = True
    cost_checked: bool = True
    no_fuse_nodes: frozenset = frozenset()
    plan: object = None
    rule_set: str = "tvm_ascend"
    level: str = "conservative"
    search_width: int = 4
    split_ops: frozenset = frozenset()
    host_ops: tuple = ()

    @property
    def fuse(self) -> bool:
        """Whether any two ops may share a kernel."""
        return bool(self.rules)

    @property
    def recompute(self) -> bool:
        """Whether a shared producer may be recomputed inside each consumer."""
        return "RecomputeFusion" in self.rules

    @property
    def export(self) -> bool:
        """Whether a shared producer may be merged into one reader that also writes it."""
        return "MultiOutputFusion" in self.rules

    def switched_off(self, rules) -> list[str]:
        """The rules of ``rules`` that are off."""
        return [rule for rule in rules if rule not in self.rules]

    @staticmethod
    def from_config(config, plan=None, mod=None) -> "FusionPolicy":
        """The policy of a CompileConfig (its level, rule set, switch file and fences);
        ``mod``, the imported model, is what the fenced node names are checked against."""
        names = onnx_node_names(mod) if mod is not None else None
        if names is not None:
            check_known_names("--no_fuse_nodes", config.no_fuse_nodes, names)
        # An imported plan is the person's (or an earlier build's) decision: no estimate
        # overrides it; the rules switched on still apply.
        return FusionPolicy(rules=enabled_rules(config), merge=config.rule_set != "tvm_fuseops",
                            cost_checked=config.rule_set == "tvm_ascend" and plan is None,
                            no_fuse_nodes=frozenset(config.no_fuse_nodes), plan=plan,
                            rule_set=config.rule_set,
                            level=config.fusion_level if config.autofusion else "off",
                            search_width=config.search_width)

    @staticmethod
    def default(fuse: bool = True) -> "FusionPolicy":
        """The default policy (conservative rules, cost-checked), or fusion off."""
        return FusionPolicy(rules=rules_for_level("conservative") if fuse else frozenset(),
                            merge=fuse, level="conservative" if fuse else "off")


def switches_of(config):
    """The parsed fusion switch file of a CompileConfig (None when there is none)."""
    if config.fusion_switch_file is None:
        return None
    return load_switch_file(config.fusion_switch_file)


def enabled_rules(config) -> frozenset:
    """Names of the fusion rules a CompileConfig switches on: the level's rules in the rule
    set, then the switch file's overrides."""
    if not config.autofusion:
        return frozenset()
    rules = rules_for_level(config.fusion_level, config.rule_set)
    switches = switches_of(config)
    return switches.apply(rules) if switches is not None else rules


def onnx_node_names(mod) -> list[str] | None:
    """Every ONNX node name of an imported model (None for a module not imported from ONNX)."""
    attrs = mod["main"].attrs
    if attrs and ir_attrs.ONNX_NODE_NAMES in attrs:
        return [str(name) for name in attrs[ir_attrs.ONNX_NODE_NAMES]]
    return None


__all__ = ["FusionPolicy", "enabled_rules", "onnx_node_names", "switches_of"]
