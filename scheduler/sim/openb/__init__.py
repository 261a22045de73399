"""B1 ``openb``: the FGD artifact's fragmentation replay on Alibaba's openb trace, with its baseline policies.

Pure Python: no Django. See :mod:`scheduler.sim.openb.protocol` for the protocol steps.
"""

from scheduler.sim.openb.policies import POLICY_NAMES
from scheduler.sim.openb.protocol import B1Run, run_b1, workload

__all__ = ["POLICY_NAMES", "B1Run", "run_b1", "workload"]
