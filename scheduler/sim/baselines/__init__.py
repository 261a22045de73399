"""Baseline planners for the benchmarks (spec/benchmarks.md, "Policies every benchmark runs").

Each has the engine's signature, ``(snapshot, policy, now) -> Plan``, and documents its rules in its module:
:mod:`.naive`, :mod:`.k8s_default`, :mod:`.binpack`, :mod:`.fgd`; the rules they share are in :mod:`.common`.
"""

from scheduler.sim.baselines.binpack import binpack
from scheduler.sim.baselines.fgd import fgd
from scheduler.sim.baselines.k8s_default import k8s_default
from scheduler.sim.baselines.naive import naive

BASELINES = {"naive": naive, "k8s-default": k8s_default, "binpack": binpack, "fgd": fgd}

__all__ = ["BASELINES", "binpack", "fgd", "k8s_default", "naive"]
