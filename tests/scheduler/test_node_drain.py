"""An admin's drain end to end on the simulated fleet (scheduler.node_states, scheduler.loop.notice): the node takes
no new work, its job is asked to checkpoint within the loop's grace, saves, stops and is requeued whole at the head
of its priority (node-drain), and the node stays drained across cluster syncs and cycles until an admin marks it
ready. Every state change — the admin's, the sync's, a notice's — is an audit row through a save."""

from __future__ import annotations

from dataclasses import replace

import pytest
from auditlog.models import LogEntry

from jobs.models import Job
from jobs.selectors.jobs import resuming_jobs
from jobs.services import job_submit
from scheduler.bridge.vocabulary import ADMIN_DRAIN
from scheduler.core.model.vocabulary import NodeState, NodeStateSource
from scheduler.gateways.protocol import Interruption, Observation
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node, SimulatedPod
from scheduler.node_states import StateChange, node_cordon, node_drain, node_mark_ready, observed_change
from scheduler.services.sync import cluster_sync
from tests.audit.helpers import changes, entries_for, who
from tests.factories import UserFactory
from tests.scheduler.loop_helpers import fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=1, backoff_s=0.0, sleep=lambda _s: None)
SPOT = "pcie-spot-1"
# Prefers the spot PCIe server of fleet_seed, saves every 600 virtual seconds.
TRAINING = {
    "kind": "training",
    "gpus": 2,
    "gpu_model": "A100",
    "tier": "spot-ok",
    "preemptible": True,
    "checkpoint_interval_s": 600,
    "duration_s": 100_000,
}
# Fits nowhere but the PCIe server (preemptible: it borrows above the guarantee): what a drained node must not take.
PCIE_ONLY = {"kind": "training", "gpus": 4, "gpu_model": "A100-PCIE-40GB", "preemptible": True, "duration_s": 100_000}


NOTICED = StateChange(NodeState.DRAINING, NodeStateSource.NOTICE, "interruption notice (aws)")
GONE = StateChange(NodeState.GONE, NodeStateSource.CLUSTER, "no longer reported by the cluster")
BACK = StateChange(NodeState.READY, NodeStateSource.CLUSTER, "")


@pytest.mark.parametrize(
    ("state", "source", "reported", "notice", "expected"),
    [
        # An admin's cordon or drain holds: reported or not, with no notice.
        ("draining", "admin", True, None, None),
        ("draining", "admin", False, None, None),
        ("cordoned", "admin", False, None, None),
        ("cordoned", "cluster", False, None, None),  # only an admin cordons, whatever the row says
        # A notice drains whatever is not draining, an admin's cordon too: the node is going away.
        ("ready", "cluster", True, "aws", NOTICED),
        ("cordoned", "admin", True, "aws", NOTICED),
        ("draining", "admin", True, "aws", None),
        # A notice's drain ends with the notice; the cluster's own states follow what it reports.
        ("draining", "notice", True, None, BACK),
        ("draining", "notice", False, None, GONE),
        ("ready", "cluster", False, None, GONE),
        ("ready", "admin", False, None, GONE),
        ("gone", "cluster", True, None, BACK),
        ("gone", "cluster", False, None, None),
        ("ready", "cluster", True, None, None),
    ],
)  # fmt: skip
def test_the_sync_changes_only_what_it_or_a_notice_set(state, source, reported, notice, expected) -> None:
    assert observed_change(state=state, source=source, reported=reported, notice=notice) == expected


@pytest.fixture
def admin_user(db):
    return UserFactory(username="ops-admin", is_staff=True, is_superuser=True)


def _node() -> Node:
    return Node.objects.get(name=SPOT)


def _without(observation: Observation, name: str) -> Observation:
    return replace(observation, nodes=tuple(n for n in observation.nodes if n.name != name))


def _with_notice(observation: Observation, name: str) -> Observation:
    at = observation.observed_at
    notice = Interruption(noticed_at=at, deadline_at=at + 120, source="aws")
    return replace(
        observation, nodes=tuple(replace(n, interruption=notice) if n.name == name else n for n in observation.nodes)
    )


def test_a_drained_node_stays_drained_across_syncs_until_an_admin_marks_it_ready(clock, admin_user) -> None:
    fleet_seed()
    gateway = fleet(clock)
    assert node_drain(node=_node(), actor=admin_user, reason="PSU swap") is True
    assert node_drain(node=_node(), actor=admin_user, reason="again") is False  # held already: the first reason stands

    for observation in (gateway.observe(), _without(gateway.observe(), SPOT), gateway.observe()):
        report = cluster_sync(observation=observation)
        node = _node()
        assert (node.state, node.state_source, node.state_reason) == ("draining", "admin", "by ops-admin: PSU swap")
        assert SPOT not in report.gone

    assert node_mark_ready(node=_node(), actor=admin_user) is True
    cluster_sync(observation=gateway.observe())
    assert (_node().state, _node().state_source) == ("ready", "admin")
    # The whole story in the audit trail: the admin's drain and ready, with nothing in between from the sync.
    rows = [(who(e)[0], changes(e).get("state")) for e in entries_for(_node()) if e.action == LogEntry.Action.UPDATE]
    assert rows == [("ops-admin", ("ready", "draining")), ("ops-admin", ("draining", "ready"))]


def test_a_cordoned_node_that_vanishes_and_comes_back_is_still_cordoned(clock, admin_user) -> None:
    fleet_seed()
    gateway = fleet(clock)
    node_cordon(node=_node(), actor=admin_user)
    cluster_sync(observation=_without(gateway.observe(), SPOT))
    cluster_sync(observation=gateway.observe())
    assert (_node().state, _node().state_source) == ("cordoned", "admin")


def test_the_syncs_own_changes_are_audited_as_the_sync_and_a_notice(clock) -> None:
    fleet_seed()
    gateway = fleet(clock)
    cluster_sync(observation=_with_notice(gateway.observe(), SPOT))
    cluster_sync(observation=gateway.observe())  # the notice withdrawn
    cluster_sync(observation=_without(gateway.observe(), SPOT))
    cluster_sync(observation=gateway.observe())
    updates = [e for e in entries_for(_node()) if e.action == LogEntry.Action.UPDATE]
    rows = [(who(e), changes(e)["state"]) for e in updates]
    assert rows == [
        (("interruption notice", "interruption notice"), ("ready", "draining")),
        (("cluster sync", "cluster sync"), ("draining", "ready")),
        (("cluster sync", "cluster sync"), ("ready", "gone")),
        (("cluster sync", "cluster sync"), ("gone", "ready")),
    ]


def test_an_admins_drain_checkpoints_its_jobs_requeues_them_first_and_takes_no_new_work(clock, admin_user) -> None:
    fleet_seed()
    team = team_seed()
    gateway = fleet(clock)  # 60 virtual seconds per real second
    job = job_submit(team=team, spec={**TRAINING, "name": "pretrain"}, actor=None, now=clock.now)
    filler = {"kind": "training", "gpus": 6, "gpu_model": "A100-SXM4-80GB", "duration_s": 100_000}
    job_submit(team=team, spec=filler, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    assert SimulatedPod.objects.get(job=job).node.name == SPOT
    clock.advance(25)  # 1500 virtual seconds: saves at 600 and 1200
    cycle_run(gateway=gateway, retry=NO_WAIT)

    node_drain(node=_node(), actor=admin_user, reason="firmware")
    drained_at = clock.now
    waiting = job_submit(team=team, spec={**PCIE_ONLY, "name": "needs-pcie"}, actor=None, now=clock.now)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)

    assert report.repairs["drained"] == [str(job.pk)]
    assert f"evict {job.pk} (node-drain)" in report.applied
    draining = job.events.get(type="draining")
    assert draining.details == {"node": SPOT, "source": ADMIN_DRAIN, "deadline": None, "grace_s": 30.0}
    job.refresh_from_db()
    assert job.state == "running"  # while its pods stop within their grace
    saved = job.events.filter(type="checkpointed").latest("id")
    assert (saved.details["step"], saved.at) == (1500, drained_at)  # saved on SIGTERM

    clock.advance(1)  # the save took 30 virtual seconds: its pods are gone
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["requeued"] == [str(job.pk)]
    assert job.events.get(type="preempted").details == {"reason": "node-drain", "by": None}
    job.refresh_from_db()
    assert job.state == "running"  # requeued and, resuming first, bound again on the reserved box's free GPUs
    pod = SimulatedPod.objects.get(job=job)
    assert pod.node.name == "a100-res-1" and pod.work_start_s == 1500.0
    assert job.events.get(type="requeued").details == {"message": f"node {SPOT} drained by an admin"}

    # Cycles and syncs go by: the drained node takes nothing, not even work that fits only there.
    for _ in range(3):
        clock.advance(5)
        cluster_sync(observation=gateway.observe())
        cycle_run(gateway=gateway, retry=NO_WAIT)
        assert not SimulatedPod.objects.filter(node__name=SPOT).exists()
        assert Job.objects.get(pk=waiting.pk).state == "pending"
    assert _node().state == "draining"

    node_mark_ready(node=_node(), actor=admin_user)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    assert Job.objects.get(pk=waiting.pk).state == "running"
    assert SimulatedPod.objects.filter(job_id=waiting.pk, node__name=SPOT).exists()


def test_a_job_drained_by_an_admin_resumes_at_the_head_of_its_priority(clock, admin_user) -> None:
    fleet_seed()
    team = team_seed()
    gateway = fleet(clock)
    job = job_submit(team=team, spec=TRAINING, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    # Nothing else can take it: every other node closed too, so the requeued job waits and its place shows.
    for name in ("a100-res-1", "mig-od-1"):
        node_cordon(node=Node.objects.get(name=name), actor=admin_user)
    node_drain(node=_node(), actor=admin_user)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    clock.advance(1)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "pending"
    assert job.events.get(type="requeued").details == {"message": f"node {SPOT} drained by an admin"}
    assert resuming_jobs([job.pk]) == {job.pk}
