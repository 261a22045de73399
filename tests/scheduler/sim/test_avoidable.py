"""The avoidable-wait oracle (:mod:`scheduler.sim.avoidable`) on small hand-built snapshots: each rule of the
definition, with a case it calls avoidable and one it does not."""

from __future__ import annotations

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import CapacityTier, Priority
from scheduler.sim.avoidable import AVOIDABLE, BURST, HELD, Verdict, judge, judge_pending

POLICY = Policy()
H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-40GB"


def _node(name: str = "n1", gpus: int = 1, model: str = H100, mig: tuple = (), **kw: object) -> Node:
    return Node(name=name, gpu_model=model, gpu_count=gpus, mig=mig, **kw)  # type: ignore[arg-type]


def _prod(request: Request, *, team: str = "a", replicas: int = 1, gpu_model: str | None = None) -> Job:
    return Job(id="p", team=team, request=request, priority=Priority.PRODUCTION, replicas=replicas, gpu_model=gpu_model)


def _run(job_id: str, priority: Priority, *slots: Slot, team: str = "b") -> Running:
    job = Job(id=job_id, team=team, request=Request(gpus=1), priority=priority)
    return Running(job=job, slots=(tuple(slots),), started_at=0.0)


def _judge(nodes: tuple[Node, ...], job: Job, running: tuple[Running, ...] = (), teams: tuple = ()) -> Verdict:
    return judge(Snapshot(nodes=nodes, teams=teams, running=running, pending=(job,)), job, POLICY)


WHOLE = Request(gpus=1)
THREE_G = Request(mig_profile="3g.40gb")


# Rule 1: free, or held by lower-priority work; never production.


def test_an_idle_gpu_makes_the_wait_avoidable() -> None:
    assert _judge((_node(),), _prod(WHOLE)) == Verdict(AVOIDABLE, "H100")


def test_lower_priority_work_of_any_team_even_not_preemptible_counts_as_available() -> None:
    running = (_run("low", Priority.LOW, Slot("n1", 0)),)
    assert _judge((_node(),), _prod(WHOLE), running).avoidable


def test_capacity_held_by_production_is_not_available() -> None:
    running = (_run("other", Priority.PRODUCTION, Slot("n1", 0)),)
    assert _judge((_node(),), _prod(WHOLE), running) == Verdict(HELD, "H100")


def test_the_old_placement_of_a_move_under_way_is_held() -> None:
    """Production moving away from a GPU still holds it until the move completes; its team is charged for both."""
    mover = Running(
        job=Job(id="m", team="a", request=Request(mig_profile="1g.10gb"), priority=Priority.PRODUCTION),
        slots=((Slot("n2", 0, mig_profile="1g.10gb", mig_start=0),),),
        started_at=0.0,
        moving_from=((Slot("n1", 0),),),
    )
    nodes = (_node("n1"), _node("n2", mig=((("1g.10gb", 0),),)))
    assert _judge(nodes, _prod(WHOLE), (mover,)) == Verdict(HELD, "H100")
    assert _judge(nodes, _prod(WHOLE), (mover,), (Team("a", burst=(("H100", 1.0),)),)) == Verdict(HELD, "H100")


def test_a_node_that_takes_no_new_work_offers_nothing() -> None:
    for node in (_node(schedulable=False), _node(reconfiguring_until=100.0)):
        assert not _judge((node,), _prod(WHOLE)).avoidable


def test_production_never_counts_spot_capacity() -> None:
    assert _judge((_node(tier=CapacityTier.SPOT),), _prod(WHOLE)) == Verdict(HELD, "any")  # no node it may use
    assert _judge((_node(tier=CapacityTier.RESERVED),), _prod(WHOLE)).avoidable


def test_a_model_the_job_does_not_accept_offers_nothing() -> None:
    job = _prod(WHOLE, gpu_model="A100")
    assert _judge((_node(),), job) == Verdict(HELD, "A100")
    assert _judge((_node(), _node("n2", model=A100)), job) == Verdict(AVOIDABLE, "A100")


# Rule 2: a whole GPU; a gang's replica of n GPUs takes n of one node.


def test_a_replica_of_whole_gpus_needs_them_on_one_node() -> None:
    two = _prod(Request(gpus=2))
    split = (_node("n1"), _node("n2"))
    assert not _judge(split, two).avoidable
    assert _judge((_node("n1", gpus=2),), two).avoidable


def test_a_mig_split_gpu_with_every_instance_available_counts_as_whole() -> None:
    layout = (("3g.40gb", 0), ("3g.40gb", 4))
    node = _node(mig=(layout,))
    lower = (_run("low", Priority.NORMAL, Slot("n1", 0, "3g.40gb", 0)),)
    assert _judge((node,), _prod(WHOLE), lower).avoidable
    held = (_run("prod", Priority.PRODUCTION, Slot("n1", 0, "3g.40gb", 0)),)
    assert not _judge((node,), _prod(WHOLE), held).avoidable


def test_a_gpu_shared_with_production_is_not_whole() -> None:
    node = _node(sharing=True)
    running = (_run("prod", Priority.PRODUCTION, Slot("n1", 0, milli=300)),)
    assert not _judge((node,), _prod(WHOLE), running).avoidable


# Rule 3: a MIG replica takes its profile, a larger instance, or a whole GPU.


def test_a_whole_gpu_with_mig_off_serves_any_profile() -> None:
    running = (_run("low", Priority.LOW, Slot("n1", 0)),)
    assert _judge((_node(),), _prod(Request(mig_profile="7g.80gb")), running).avoidable


def test_a_free_larger_instance_serves_a_smaller_profile_and_a_smaller_one_does_not() -> None:
    layout = (("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))
    node = _node(mig=(layout,))
    holders = (_run("prod", Priority.PRODUCTION, Slot("n1", 0, "2g.20gb", 4)),)  # the GPU is not whole
    assert _judge((node,), _prod(THREE_G), holders).avoidable  # the free 4g.40gb holds a 3g.40gb replica
    taken = (*holders, _run("prod2", Priority.PRODUCTION, Slot("n1", 0, "4g.40gb", 0)))
    assert _judge((node,), _prod(THREE_G), taken) == Verdict(HELD, "H100")  # only a 1g.10gb is left


def test_an_instance_with_less_memory_does_not_serve() -> None:
    layout = (("1g.20gb", 0), ("1g.10gb", 2))
    node = _node(mig=(layout,))
    holders = (_run("prod", Priority.PRODUCTION, Slot("n1", 0, "1g.10gb", 2)),)
    assert not _judge((node,), _prod(Request(mig_profile="2g.20gb")), holders).avoidable  # 1 slice < 2


def test_replicas_count_the_instances_of_a_split_gpu_and_one_per_whole_gpu() -> None:
    layout = (("3g.40gb", 0), ("3g.40gb", 4))
    two = _prod(THREE_G, replicas=2)
    assert _judge((_node(mig=(layout,)),), two).avoidable  # two free 3g instances
    assert not _judge((_node(),), two).avoidable  # one MIG-off GPU: one place
    assert _judge((_node(), _node("n2")), two).avoidable  # replicas may spread over nodes


# Rule 4: a share.


def test_a_share_fits_a_time_sliced_gpu_with_room_left() -> None:
    job = _prod(Request(gpu_milli=500))
    half = (_run("prod", Priority.PRODUCTION, Slot("n1", 0, milli=500)),)
    assert _judge((_node(sharing=True),), job, half).avoidable
    assert not _judge((_node(sharing=False),), job, half).avoidable
    most = (_run("prod", Priority.PRODUCTION, Slot("n1", 0, milli=600)),)
    assert not _judge((_node(sharing=True),), job, most).avoidable


# Rules 5–6: room on one class, within the burst limit.


def test_room_above_the_burst_limit_is_unavoidable_and_says_so() -> None:
    team = Team("a", burst=(("H100", 1.0),))
    nodes = (_node("n1"), _node("n2"))
    own = (_run("mine", Priority.PRODUCTION, Slot("n1", 0), team="a"),)
    assert _judge(nodes, _prod(WHOLE), own, (team,)) == Verdict(BURST, "H100")
    overall = Team("a", burst=(("any", 1.0),))
    assert _judge(nodes, _prod(WHOLE), own, (overall,)) == Verdict(BURST, "H100")
    roomier = Team("a", burst=(("H100", 2.0),))
    assert _judge(nodes, _prod(WHOLE), own, (roomier,)).avoidable


def test_the_teams_own_lower_work_does_not_count_against_its_burst() -> None:
    team = Team("a", burst=(("H100", 1.0),))
    own_low = (_run("mine", Priority.LOW, Slot("n1", 0), team="a"),)
    assert _judge((_node(),), _prod(WHOLE), own_low, (team,)).avoidable


def test_a_burst_below_the_guarantee_counts_as_the_guarantee() -> None:
    team = Team("a", guaranteed=(("H100", 2.0),), burst=(("H100", 1.0),))
    own = (_run("mine", Priority.PRODUCTION, Slot("n1", 0), team="a"),)
    assert _judge((_node("n1"), _node("n2")), _prod(WHOLE), own, (team,)).avoidable


def test_a_right_sized_job_counts_its_profile_against_the_burst() -> None:
    team = Team("a", burst=(("H100", 0.5),))  # 3/7 of a GPU fits, a whole GPU would not
    assert _judge((_node(),), _prod(THREE_G), (), (team,)).avoidable
    assert _judge((_node(),), _prod(WHOLE), (), (team,)) == Verdict(BURST, "H100")


def test_room_on_another_class_within_the_limit_is_avoidable() -> None:
    team = Team("a", burst=(("H100", 0.0),))
    assert _judge((_node("n1"), _node("n2", model=A100)), _prod(WHOLE), (), (team,)) == Verdict(AVOIDABLE, "A100")


def test_judge_pending_judges_production_only() -> None:
    low = Job(id="l", team="a", request=WHOLE, priority=Priority.LOW)
    prod = _prod(WHOLE)
    snapshot = Snapshot(nodes=(_node(),), teams=(), pending=(low, prod))
    assert judge_pending(snapshot, POLICY) == (("p", Verdict(AVOIDABLE, "H100")),)


def test_a_held_wait_is_named_by_the_class_that_came_closest() -> None:
    two = _prod(Request(gpus=2))
    nodes = (_node("h", model=H100), _node("a", gpus=2, model=A100))
    held = (_run("prod", Priority.PRODUCTION, Slot("a", 0)),)
    # neither class holds a 2-GPU replica; each has one whole GPU left, A100 wins the tie by name
    assert _judge(nodes, two, held) == Verdict(HELD, "A100")
    busier = (*held, _run("prod2", Priority.PRODUCTION, Slot("a", 1)))
    assert _judge(nodes, two, busier) == Verdict(HELD, "H100")  # H100 still has a whole GPU, A100 none
