"""A cycle planned for one job's answer (the submit preview's, :mod:`scheduler.core.planning.preview`): the plan
need be right about that job only, so the cycle skips what cannot change its answer.

- Once the job is bound, the rest of the cycle is skipped: nothing later in a cycle undoes a bind. Later
  evictions take only snapshot-running work (:mod:`scheduler.core.planning.cycle`, Speed), a node bound in a
  cycle is not reconfigured in it, and a move takes only free capacity. The evictions made for the job were made
  in its own turns. The plan then holds the binds, evictions and rejections so far, and nothing else.
- Only the waiting jobs up to it are explained: a job's position, reason and ETA depend on the jobs taken before
  it (their positions, the capacity their ETAs claim in the replay) and on the cycle's end state, never on the
  jobs explained after it.
- Of the waiting jobs before it, only those whose explanation can reach its answer are explained; the others are
  counted (its position and its team position). A job reaches another's answer only through the ETA replay
  (:class:`~scheduler.core.model.explain.EtaEstimator`: the capacity its ETA claims). So none does when the job's
  own explanation asks no ETA (it waits for its quota, a node, a reconfiguration, or asks no capacity), and none
  after the replay has given all the times it gives on the job's GPU models (``PROFILE_DEPTH``): from then on
  it answers None there, whatever was claimed before. On a long queue that is all but the first hundred or so.

A cycle that asks on-demand nodes (:mod:`scheduler.core.decisions.provisioning`) explains every waiting job before
the job: each one's request takes budget and pool room, and may leave spare capacity coming that the job takes.

Exact as long as no later job's evaluation raises: the isolation (:mod:`scheduler.core.model.isolation`) would
plan the cycle again without that job, which a cycle stopped early never sees — an engine bug, not a rule.
With the speed-ups off the cycle is planned whole and every job explained; ``tests/scheduler/core/speedups/
test_focus.py`` compares the focused answers with the whole plan's.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.core.model.explain import EtaEstimator
from scheduler.core.speedups.memo import Memo


class Focus:
    """The job a cycle is planned for (None: every job, as with the speed-ups off)."""

    def __init__(self, job_id: str | None, memo: Memo, *, every_waiting: bool = False) -> None:
        self.job = job_id if memo.enabled else None
        self._taken = False
        self._every_waiting = every_waiting  # explain every waiting job before it, none merely counted

    def took(self, job_id: str) -> None:
        """``job_id`` has taken its first turn."""
        if job_id == self.job:
            self._taken = True

    def bound(self, blockers: Mapping[str, object]) -> bool:
        """Is the job bound (it took a turn and has no blocker): the rest of the cycle cannot change its answer?"""
        return self._taken and self.job not in blockers

    def passes(self, job_id: str, replay: tuple[str, ...] | None, estimator: EtaEstimator) -> bool:
        """May waiting ``job_id``, taken before the job, go unexplained (counted only)? ``replay``: the GPU models
        the job's explanation asks the ETA replay on (None: it asks none)."""
        if self.job is None or job_id == self.job or self._every_waiting:
            return False
        return replay is None or estimator.exhausted(replay)

    def last(self, job_id: str) -> bool:
        """Is ``job_id`` the last job the cycle need explain?"""
        return job_id == self.job
