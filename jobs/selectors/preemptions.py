"""Who preempted a job, as its page may say it: the preempting job's team and kind, never more.

A victim is often another team's job, and the preempting job is then one its viewers cannot open (its page is
a 404 to them, its name and spec are that team's business). So the ``preempted`` event stores, when it is
recorded (:func:`jobs.services.loop.job_requeue`), the preempting job's team, kind and priority
(:func:`preemptor_details`): a victim's page reads "preempted by a production inference job of team Vision"
and links the job only for a viewer who may see it (:func:`preemptors_for_user`, team-scoped like every read).
Events recorded before the details existed name the job by id alone; the page looks it up then, and says
"another job" when it no longer exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jobs.models import Job, JobEvent
from jobs.selectors.jobs import MAX_ID, jobs_for_user_by_ids
from scheduler.core.model.vocabulary import EventType
from teams.roles import AnyUser


@dataclass(frozen=True)
class Preemptor:
    """The job that preempted a victim, as a viewer of the victim may read it. ``name`` only when ``visible``."""

    job_id: int
    team: str  # the team's name
    kind: str
    priority: str
    visible: bool = False
    name: str = ""

    def words(self) -> str:
        """ "a production inference job of team Vision": what any viewer of the victim may read."""
        return f"a {self.priority} {self.kind} job of team {self.team}"


def preemptor_details(by: str | None) -> dict[str, str]:
    """What a ``preempted`` event records of job ``by`` (an id), besides the id: its team's slug and name, its
    kind and priority; empty when there is no such job."""
    job = _job_id(by)
    if job is None:
        return {}
    row = Job.objects.filter(pk=job).values("team__slug", "team__name", "kind", "priority").first()
    if row is None:
        return {}
    return {
        "by_team": row["team__slug"],
        "by_team_name": row["team__name"],
        "by_kind": row["kind"],
        "by_priority": row["priority"],
    }


def preempted_words(details: Mapping[str, Any]) -> str | None:
    """ "a production inference job of team Vision" from an event's own details; None when it has none."""
    team, kind, priority = details.get("by_team_name"), details.get("by_kind"), details.get("by_priority")
    if not (team and kind and priority):
        return None
    return f"a {priority} {kind} job of team {team}"


def preemptors_for_user(*, user: AnyUser, events: Iterable[JobEvent]) -> dict[int, Preemptor]:
    """The preemptor of each ``preempted`` event among ``events`` that names one (event id → preemptor), with
    ``visible`` and the job's name only where ``user`` may open that job. Events whose details lack the team and
    kind (recorded before they were stored) are completed from the job row when it still exists."""
    named: dict[int, tuple[int, Mapping[str, Any]]] = {}
    for event in events:
        details = event.details if isinstance(event.details, dict) else {}
        job = _job_id(details.get("by")) if event.type == EventType.PREEMPTED else None
        if job is not None:
            named[event.pk] = (job, details)
    ids = {job for job, _ in named.values()}
    if not ids:
        return {}
    rows = {
        row["pk"]: row
        for row in Job.objects.filter(pk__in=ids).values("pk", "team__name", "kind", "priority")
        if any(not d.get("by_team_name") for j, d in named.values() if j == row["pk"])
    }
    seen = {job.pk: job.name for job in jobs_for_user_by_ids(user=user, job_ids=ids)}
    result = {}
    for event_id, (job, given) in named.items():
        stored = (given.get("by_team_name"), given.get("by_kind"), given.get("by_priority"))
        if all(stored):
            team, kind, priority = (str(v) for v in stored)
        elif job in rows:
            team, kind, priority = rows[job]["team__name"], rows[job]["kind"], rows[job]["priority"]
        else:
            continue  # an old event whose preempting job is gone: "another job"
        result[event_id] = Preemptor(
            job_id=job, team=team, kind=kind, priority=priority, visible=job in seen, name=seen.get(job, "")
        )
    return result


def _job_id(value: object) -> int | None:
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit()):
        return None
    pk = int(text)
    return pk if 0 < pk <= MAX_ID else None
