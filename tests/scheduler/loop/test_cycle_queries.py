"""A whole cycle's queries (:func:`scheduler.loop.cycle.cycle_run` on the simulated fleet, with a fencing token as
the worker passes one), pinned so that they cannot grow unnoticed:

- a steady cycle (nothing starts or ends, the fleet's clock one cycle on) makes the same number of queries whatever
  the number of pending and running jobs, every running job reporting a new checkpoint or none of them, and that
  number is pinned;
- the first cycle on an empty cluster makes the same pinned number of queries whatever the number of binds, of GPUs
  a bind takes and of nodes bound on (its binds are recorded and applied set-based).

Counted with ``CaptureQueriesContext``: every statement Django sends, savepoints included (the test runs in a
transaction, so each ``atomic`` block of the cycle is a savepoint and its release; outside a test the outermost ones
are a BEGIN and a COMMIT instead, which Django logs as well: ``debug_transaction`` in Django's
``django.db.backends.utils``, called by ``set_autocommit`` and ``_commit`` in ``django.db.backends.base.base``; the
same counts, checked on SQLite
with ``django_db(transaction=True)``). An ``executemany`` is one statement. SQLite and PostgreSQL send as many
statements here (SQLite leaves out ``FOR UPDATE``; the queue fields' write differs in form, one statement on both),
so one figure holds for both; run with ``DATABASE_URL=postgres://…`` for the second.

A change that adds a query must say why in the comments below and raise the figure; the failure message lists the
statements sent."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import count

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.services import JobSubmission, job_submit_bulk
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import CycleReport, cycle_run
from scheduler.services.fleet import gpu_models_sync, node_register
from teams.models import Team
from tests.scheduler.loop_helpers import Clock, fleet, team_seed

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
GPUS_PER_NODE = 8
# Virtual seconds: at the test fleet's 60× speed, 46 hours of wall clock; nothing ends while the test runs.
LONG_S = 10_000_000
CHECKPOINT_S = 60  # one real second: every cycle, every checkpointing job has saved since the last

# A steady cycle, by phase:
# - on-demand capacity, 2: the loop reads the autoscaled pools (scheduler.bridge.provisioning; with none
#   enabled nothing else of node requests is read or written), and the simulated fleet reads the node requests its
#   autoscaler holds (scheduler.gateways.simulated.autoscaler, as a cluster lists its ProvisioningRequests);
# - observe, 8: the fleet's advance (a savepoint, exited pods deleted, node states locked, nodes, release), then
#   its view from the rows the advance read (the GPUs' MIG layouts, pods, saved progress); 10 before the view reused
#   the advance's node states and nodes instead of reading them again. A spot node's interruption draw would add
#   one statement for all of them (its time written), not one per node: these nodes are reserved;
# - reconcile, 11: a savepoint, the fence locked and raised to the cycle's token (2), reconcile's own savepoint,
#   running jobs, open allocations, drains (the running jobs' draining events; the last binds of the jobs they name
#   only when there are any: 12 before, when every running job's last bind was read each cycle), held nodes, the
#   last checkpoint of each running job (its id, then the rows), both releases; and 6 more when running jobs report
#   new checkpoints (by step): when each was last recorded, and the checkpoint service's savepoint, the jobs'
#   states, the steps recorded, one insert of all the new ones, release (SQLite takes at most 999 parameters a
#   statement, so Django inserts at most 199 events at once there:
#   django.db.backends.sqlite3.operations.bulk_batch_size; the sizes here stay under it);
# - snapshot, 9: nodes, jobs, pending jobs' events, running jobs' recent events, allocations, quotas, recent
#   finishes per team, teams, recent preemptions;
# - record, 4: a savepoint, the fence, the waiting jobs' queue fields (read, not locked), release; and one
#   statement more when any waiting job's position, ETA or reason changed (all of them written at once);
# - apply, 0: nothing to apply, nothing refused (6 before: three empty transactions, the fleet's apply batch, binds
#   refused, moves refused);
# - stats, 6: a savepoint, the stats row locked, pending jobs' ETAs, ETA histories, the stats row written, release;
#   and one statement more when any pending job's ETA changed (all the changed histories written at once).
STEADY_QUERIES = {False: 40, True: 46}  # by whether the running jobs report checkpoints

# The first cycle on an empty cluster, whatever it binds (its binds recorded and applied set-based), by phase (and the
# 2 of on-demand capacity, as in a steady cycle):
# - observe, 8: as in a steady cycle, less the saved progress (no pod to ask for), plus the simulated node states
#   created, every node's in one insert (13 before: one insert per node, and the states and nodes read again);
# - reconcile, 13: as in a steady cycle, less the checkpoints (nothing runs), plus the fence row created (a
#   savepoint, insert, release);
# - snapshot, 7: as in a steady cycle, less the running jobs' events and allocations;
# - record, 9: a savepoint, the fence, the jobs to bind locked, their nodes, then all the binds at once
#   (jobs.services.binds: which jobs were requeued, one insert of every allocation, one update of every job's
#   state, one insert of every ``bound`` event), release;
# - apply, 16: the batch's savepoint, the fleet's advance again at the batch's instant (5), then every bind in one
#   call (scheduler.gateways.simulated.binds: a savepoint, the nodes bound on, their GPUs and their simulated
#   states, the jobs' pods locked, their saved progress, the pods on those nodes, one insert of every pod, release),
#   the batch's release (20 before: and two empty transactions, binds refused and moves refused, now left out when
#   nothing was refused);
# - stats, 9: as in a steady cycle, with its row created (a savepoint, insert, release);
# - the cycle's log line, 1: the bound jobs' teams.
# One bind at a time, the record took 4 statements a bind and one more for each GPU beyond a bind's first, the apply
# 6 a bind and 3 for each node bound on. SQLite takes at most 999 parameters a statement, so Django splits an insert
# of more rows than that allows (some 90 allocations, 199 events, 76 pods: bulk_batch_size in
# django.db.backends.sqlite3.operations) into several; these cases stay under it, and PostgreSQL inserts every row
# in one statement.
FIRST_QUERIES = 65
# The queue fields' write, as logged: "N times: UPDATE … = %s" (SQLite's executemany) or "UPDATE … AS j SET … =
# v.…" (PostgreSQL); a bind's own UPDATE sets them to NULL and does not match.
QUEUE_FIELDS_WRITE = re.compile(r'UPDATE "jobs_job" (AS j )?SET "queue_position" = (%s|v\.)')


class _Loop:
    """The simulated fleet on the test's clock, cycled as the worker cycles it: each cycle a new fencing token."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.gateway: SimulatedFleet = fleet(clock)
        self.tokens: Iterator[int] = count(1)

    def cycle(self) -> tuple[CycleReport, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            report = cycle_run(gateway=self.gateway, fence_token=next(self.tokens), retry=NO_WAIT)
        return report, [query["sql"] for query in queries.captured_queries]

    def steady_cycle(self) -> tuple[CycleReport, list[str]]:
        self.clock.advance(float(settings.SCHEDULER["cycle_s"]))
        return self.cycle()


def _nodes_seed(nodes: int) -> None:
    gpu_models_sync()
    for i in range(nodes):
        node_register(
            name=f"n-{i:02d}",
            gpu_model="A100-SXM4-80GB",
            gpu_count=GPUS_PER_NODE,
            interconnect="nvswitch",
            leaf_switch="leaf-1",
            spine="spine-1",
            tier="reserved",
            price_per_gpu_hour="2.2295",
        )


def _team() -> Team:
    """One team whose guarantee covers every GPU: nothing it runs is preempted for what it waits for."""
    return team_seed(guaranteed=1000, burst=1000)


def _submit(team: Team, clock: Clock, jobs: int, *, prefix: str, gpus: int = 1, checkpoints: bool = False) -> None:
    spec = {"kind": "training", "gpus": gpus, "duration_s": LONG_S}
    if checkpoints:
        spec["checkpoint_interval_s"] = CHECKPOINT_S
    job_submit_bulk(
        submissions=[JobSubmission(team=team, spec={**spec, "name": f"{prefix}-{i}"}) for i in range(jobs)],
        actor=None,
        now=clock.now,
    )


def _listing(queries: list[str]) -> str:
    return "\n".join(f"{i:3d} {sql[:160]}" for i, sql in enumerate(queries, 1))


def _waiting_writes(queries: list[str]) -> int:
    """Statements writing waiting jobs' queue fields (:mod:`jobs.services.queue_fields`: an ``executemany`` on
    SQLite, one ``UPDATE … FROM jsonb_array_elements(…)`` on PostgreSQL): a steady cycle writes none, or all changed
    rows in one."""
    return sum(1 for sql in queries if QUEUE_FIELDS_WRITE.search(sql))


@pytest.mark.parametrize(
    ("nodes", "pending", "checkpoints"),
    [(2, 10, False), (2, 60, False), (8, 60, False), (2, 10, True), (8, 60, True)],
)
def test_a_steady_cycle_makes_the_same_pinned_queries_whatever_waits_and_runs(
    clock, nodes, pending, checkpoints
) -> None:
    loop = _Loop(clock)
    _nodes_seed(nodes)
    team = _team()
    # One job a GPU: the cluster is full.
    _submit(team, clock, nodes * GPUS_PER_NODE, prefix="run", checkpoints=checkpoints)
    loop.cycle()
    _submit(team, clock, pending, prefix="wait")
    loop.steady_cycle()  # the waiting jobs' positions, ETAs and reasons first written

    for _ in range(2):  # the reasons say "in about 46 h 18 min": now and then a minute ticks over
        report, queries = loop.steady_cycle()

        assert (report.pending, report.running) == (pending, nodes * GPUS_PER_NODE)
        checkpointed = report.repairs.pop("checkpointed")
        assert len(checkpointed) == (report.running if checkpoints else 0)
        assert report.applied == [] and not any(report.repairs.values())
        assert [report.decisions[kind] for kind in ("binds", "evictions", "moves", "reconfigurations")] == [[]] * 4
        writes = _waiting_writes(queries)
        assert writes <= 1, _listing(queries)
        assert len(queries) == STEADY_QUERIES[checkpoints] + writes, _listing(queries)


@pytest.mark.parametrize(
    ("binds", "gpus", "nodes_bound_on"),
    [(8, 1, 1), (32, 1, 4), (4, GPUS_PER_NODE, 4)],
)
def test_the_first_cycle_makes_the_same_pinned_queries_whatever_it_binds(clock, binds, gpus, nodes_bound_on) -> None:
    loop = _Loop(clock)
    _nodes_seed(4)
    _submit(_team(), clock, binds, prefix="job", gpus=gpus)

    report, queries = loop.cycle()

    assert len(report.applied) == binds and report.failed == []
    bound_on = {slot["node"] for bind in report.decisions["binds"] for r in bind["placements"] for slot in r}
    assert len(bound_on) == nodes_bound_on
    assert len(queries) == FIRST_QUERIES, _listing(queries)
