"""B1 ``openb``: the FGD artifact's fragmentation replay on Alibaba's openb trace, with its baseline scorers.

Pure Python: no Django. See :mod:`scheduler.sim.openb.protocol` for the protocol steps.
"""

from scheduler.sim.openb.protocol import B1Run, run_b1, workload
from scheduler.sim.openb.scorers import SCORER_NAMES

__all__ = ["SCORER_NAMES", "B1Run", "run_b1", "workload"]
