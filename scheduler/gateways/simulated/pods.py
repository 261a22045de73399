"""The simulated fleet's pods as its observation reads them: value tuples, not model instances.

Every observation reads every pod (thousands on a 1,000-node fleet, every cycle), and a model instance with its
node costs several times a tuple to load. The fleet's other steps (a bind, an eviction) work on the few
:class:`~scheduler.models.SimulatedPod` instances they lock; what both read of a pod's run is typed as
:data:`Pod`, either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from scheduler.kept_rows import KeptRows
from scheduler.models import SimulatedPod


class PodRow(NamedTuple):
    """A pod's columns the observation reads, its node's name with them."""

    job_id: int
    replica: int
    generation: int
    node_id: int
    node_name: str
    devices: list[list[Any]]  # [[gpu, mig_profile or None, mig_start or None], ...]
    namespace: str
    bound_at: datetime
    work_start_s: float
    duration_s: float | None
    checkpoint_interval_s: float | None
    checkpoint_dir: str
    stop_requested_at: datetime | None


Pod = SimulatedPod | PodRow

# The columns of PodRow, in its order: the node's name through its relation.
_COLUMNS = tuple("node__name" if name == "node_name" else name for name in PodRow._fields)


# Every observation reads every pod, most unchanged since the last: those are not converted again.
_kept = KeptRows(PodRow._make)


def pod_rows() -> list[PodRow]:
    """Every pod, by job and replica (the order the observation has always read them in). A pod unchanged since
    the last call is the same :class:`PodRow` (:class:`~scheduler.kept_rows.KeptRows`): treat it as read-only."""
    return _kept.read(SimulatedPod.objects.order_by("job_id", "replica").values_list(*_COLUMNS))
