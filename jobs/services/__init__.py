"""Writes to jobs. Every change records a :class:`~jobs.models.JobEvent` with its actor (None: the system).

- :mod:`jobs.services.submit`: ``job_submit`` validates a spec whole and creates a pending job (``job_submit_bulk``:
  many at once, with the same checks);
- :mod:`jobs.services.changes`: ``job_cancel``, ``job_set_priority``, ``job_set_rank``, ``job_move`` (one
  place up or down, by the rank rule of :mod:`jobs.services.ranks`) and, for many jobs of a team at once,
  ``job_list_reorder``, ``job_cancel_bulk``, ``job_set_priority_bulk`` and ``job_requeue_bulk`` (each one
  transaction);
- :mod:`jobs.services.loop`: the transitions the scheduling loop records (bind, requeue, finish, and a
  running job's move to its right-sized capacity: ``job_move_start``, ``job_move_complete``, ``job_move_abandon``);
- :mod:`jobs.services.binds`: ``job_bind_record_many``, a cycle's binds recorded in a fixed number of statements
  (the loop's record step; ``job_bind_record`` is one of them);
- :mod:`jobs.services.queue_fields`: ``job_queue_fields_write_bulk``, pending jobs' queue positions, start
  estimates and reasons, many rows in one statement (the loop's record step, an order change);
- :mod:`jobs.services.checkpoints`: ``checkpoint_record``, the checkpoints a job reports;
- :mod:`jobs.services.restarts`: ``job_fail_or_restart``, the restart budget an application failure spends.

Permissions (``actor``) are enforced here, by the rules of :mod:`jobs.access`: a member submits at ``normal``
or ``low`` priority and cancels the jobs they submitted; a team's lead manages every job of the team; a
platform admin everything; finance, outsiders and deactivated accounts nothing (``JobPermissionDenied``).
Above every role, the team's priority grant (``teams.grants``): a priority, or production for a job kind, the
team is not granted is refused to everyone, the system included (``PriorityNotGranted``).
``actor=None`` is the system (an operator's command, the demo feed, the loop). The edges check the same rules
first to answer with the right HTTP status; these checks are the guarantee.
"""

from jobs.services.binds import Bound, job_bind_record_many
from jobs.services.changes import (
    job_cancel,
    job_cancel_bulk,
    job_list_reorder,
    job_move,
    job_requeue_bulk,
    job_set_priority,
    job_set_priority_bulk,
    job_set_rank,
    team_order_key,
)
from jobs.services.checkpoints import CheckpointReport, checkpoint_latest, checkpoint_record
from jobs.services.loop import (
    MoveOutcome,
    job_bind_record,
    job_finish,
    job_move_abandon,
    job_move_complete,
    job_move_start,
    job_requeue,
)
from jobs.services.restarts import RestartOutcome, job_fail_or_restart
from jobs.services.submit import JobSubmission, job_submit, job_submit_bulk

__all__ = [
    "Bound",
    "CheckpointReport",
    "JobSubmission",
    "MoveOutcome",
    "RestartOutcome",
    "checkpoint_latest",
    "checkpoint_record",
    "job_bind_record",
    "job_bind_record_many",
    "job_cancel",
    "job_cancel_bulk",
    "job_fail_or_restart",
    "job_finish",
    "job_list_reorder",
    "job_move",
    "job_move_abandon",
    "job_move_complete",
    "job_move_start",
    "job_requeue",
    "job_requeue_bulk",
    "job_set_priority",
    "job_set_priority_bulk",
    "job_set_rank",
    "job_submit",
    "job_submit_bulk",
    "team_order_key",
]
