"""The trial placement of a preemption on GPUs with MIG off, and the exact shortcuts that spare its trials.

A MIG demand for the profile that takes every compute slice of the GPU (``7g.80gb``, ``7g.40gb``) holds the
whole GPU either way, so a GPU with MIG off serves it (:func:`~scheduler.core.placement.fallback.whole_gpu_slots`).
Production asks a preemption search (:func:`scheduler.core.decisions.preemption.find_victims`) for such a GPU
before any reconfiguration; :class:`WholeGpuTrial` is that search's ``try_place``: slots on idle MIG-off GPUs for
every replica, when the quota admits what they hold (counted at :func:`~scheduler.core.rules.limits.placement_units`,
as :func:`~scheduler.core.placement.fallback.whole_gpu_slots`' own step counts it), else None. Nothing else — no
MIG instance, no larger one — is accepted: the job's other placements are the other preemption steps'.

Its shortcuts (:class:`~scheduler.core.decisions.preemption.Shortcuts`), for a job that states no CPU or host
memory — then only the free MIG-off GPUs of its options decide whether slots exist, and only its team's usage
whether the quota admits them:

1. :meth:`WholeGpuTrial.keeps`: a victim of another team whose every slot is a MIG instance is put back on GPUs
   with MIG on, which the trial never uses, and leaves the team's usage as it was: the trial still accepts a
   placement.
2. :meth:`WholeGpuTrial.fails_for_less`: when the last trial found no idle MIG-off GPUs, putting victims back
   frees none: every later trial finds none either.

With the speed-ups off, or for a job with host needs (a victim on a MIG instance of the node still holds its
CPU), there are none, and every trial runs.
"""

from __future__ import annotations

from scheduler.core.decisions.preemption import NO_SHORTCUTS, Shortcuts
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Slots
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.fallback import whole_gpu_slots
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.rules.limits import placement_units
from scheduler.core.speedups.memo import current_memo


class WholeGpuTrial:
    """``trial()``: slots on idle MIG-off GPUs for ``job`` its quota admits, or None (module doc)."""

    def __init__(self, state: IndexedClusterState, fairness: FairShare, job: Job, policy: Policy) -> None:
        self.state = state
        self.fairness = fairness
        self.job = job
        self.policy = policy
        self._found: Slots | None = None  # what whole_gpu_slots gave in the last trial

    def __call__(self) -> Slots | None:
        self._found = whole_gpu_slots(self.state, self.job, self.policy)
        if self._found is None or not self.fairness.admit(self.job, placement_units(self.state, self._found)).ok:
            return None
        return self._found

    def shortcuts(self) -> Shortcuts:
        """The shortcuts a preemption search may take with this trial (module doc); none when the cycle's
        speed-ups are off or the job has host needs."""
        if not current_memo().enabled or self.job.cpu_milli or self.job.memory_mib:
            return NO_SHORTCUTS
        return Shortcuts(keeps=self.keeps, fails_for_less=self.fails_for_less)

    def keeps(self, victim: Job, victim_slots: Slots, slots: Slots) -> bool:
        """``victim`` has just been put back on ``victim_slots`` and the trial accepted a placement just before:
        True promises that it still would (module doc, 1)."""
        on_mig = all(slot.mig_profile is not None for replica in victim_slots for slot in replica)
        return on_mig and victim.team != self.job.team

    def fails_for_less(self) -> bool:
        """Asked right after the trial returned None: True promises that it returns None in every state reached
        from this one by putting victims back (module doc, 2)."""
        return self._found is None
