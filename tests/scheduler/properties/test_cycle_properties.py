"""Hypothesis invariants of plan_cycle on random small clusters and workloads:

- no GPU, MIG instance or share is double-booked once the plan is applied, and capacity is never exceeded
  (≤ 1000 milli per GPU, shares only on time-sliced GPUs without MIG, MIG slots only on instances that exist);
- every layout is legal, before and after the plan's reconfigurations;
- gangs are atomic: a Bind carries exactly ``replicas`` replica tuples, each with the slots its demand needs
  on that node's model, on one ready node of an allowed tier; a whole-GPU gang spans models of one class
  only, with the same demand on each;
- no bind takes a team above its burst limit, nor its non-preemptible work (production aside) above the
  guarantee;
- guarantees are restored within one cycle;
- the same input (in any tuple order) gives the same plan;
- a plan applied twice changes nothing: planning again on the applied snapshot binds or evicts none of the
  jobs just bound;
- no eviction is undone: the next cycle binds none of the jobs a plan evicted;
- no expected start is in the past, and a job its quota blocks has none.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import Job, Node, Plan, Policy, Running, Slot, Snapshot, Team, plan_cycle
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, validate_layout
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState, gpu_class_of, slot_units
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.snapshot import Request
from scheduler.core.model.vocabulary import CapacityTier, Interconnect, JobKind, JobTier, Priority
from scheduler.core.placement import find_slots
from scheduler.core.rules.limits import burst_limits, guarantee_limits
from scheduler.core.rules.tiers import allowed_tiers
from scheduler.core.sizing.layouts import named_layout, named_layouts
from scheduler.core.sizing.rightsize import resolve
from tests.scheduler.properties.apply import apply_plan
from tests.scheduler.properties.builders import NOW

POLICY = Policy()
MODELS = ("A100-SXM4-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB", "T4")
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb", "1g.5gb", "3g.20gb", "1g.20gb")
TEAMS = ("a", "b", "c")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------------------


@st.composite
def nodes(draw: st.DrawFn) -> list[Node]:
    found = []
    for i in range(draw(st.integers(1, 5))):
        model = draw(st.sampled_from(MODELS))
        gpus = draw(st.sampled_from((1, 2, 4, 8)))
        spec = GPU_MODEL_BY_NAME.get(model)
        mig: tuple = ()
        sharing = False
        if spec is not None and spec.mig_capable and draw(st.booleans()):
            names = [n for n in named_layouts(model) if n != "all-enabled"]
            mig = tuple(named_layout(model, draw(st.sampled_from(names))) for _ in range(gpus))
        else:
            sharing = draw(st.booleans())
        found.append(
            Node(
                name=f"n{i}",
                gpu_model=model,
                gpu_count=gpus,
                interconnect=draw(st.sampled_from(list(Interconnect))),
                leaf=draw(st.sampled_from(("", "L1", "L2"))),
                spine=draw(st.sampled_from(("", "S1"))),
                tier=draw(st.sampled_from(list(CapacityTier))),
                schedulable=draw(st.sampled_from((True, True, True, True, True, False))),
                mig=mig,
                sharing=sharing,
                reconfiguring_until=draw(st.sampled_from((None, None, None, None, NOW - 10, NOW + 100))),
                cpu_milli=draw(st.sampled_from((None, None, 16_000))),
            )
        )
    return found


@st.composite
def requests(draw: st.DrawFn) -> Request:
    way = draw(st.sampled_from(("gpus", "gpus", "mig", "milli", "memory")))
    if way == "gpus":
        return Request(gpus=draw(st.sampled_from((1, 1, 2, 4, 8))))
    if way == "mig":
        return Request(mig_profile=draw(st.sampled_from(PROFILES)))
    if way == "milli":
        return Request(gpu_milli=draw(st.sampled_from((100, 250, 300, 500, 700, 1500))))
    return Request(memory_gib=draw(st.sampled_from((5.0, 15.0, 35.0, 70.0, 150.0))))


@st.composite
def jobs(draw: st.DrawFn, prefix: str, count: int) -> list[Job]:
    found = []
    for i in range(count):
        priority = draw(st.sampled_from(list(Priority)))
        found.append(
            Job(
                id=f"{prefix}{i}",
                team=draw(st.sampled_from(TEAMS)),
                request=draw(requests()),
                kind=draw(st.sampled_from(list(JobKind))),
                priority=priority,
                replicas=draw(st.sampled_from((1, 1, 1, 2, 3))),
                gpu_model=draw(st.sampled_from((None, None, None, None, "A100", "H100"))),
                preemptible=draw(st.booleans()),
                tier=draw(st.sampled_from((JobTier.ANY, JobTier.ANY, JobTier.SPOT_OK, JobTier.RESERVED_ONLY))),
                duration_s=draw(st.sampled_from((None, 600.0, 3600.0))),
                rank=draw(st.integers(0, 2)),
                submitted_at=draw(st.sampled_from((0.0, 10.0, 20.0))),
                cpu_milli=draw(st.sampled_from((0, 0, 4000))),
            )
        )
    return found


@st.composite
def teams(draw: st.DrawFn) -> list[Team]:
    found = []
    for name in TEAMS:
        guaranteed = [("any", float(draw(st.integers(0, 8))))]
        if draw(st.booleans()):
            guaranteed.append((draw(st.sampled_from(("A100", "H100"))), float(draw(st.integers(0, 4)))))
        burst = [] if draw(st.booleans()) else [("any", float(draw(st.integers(0, 16))))]
        found.append(
            Team(name=name, weight=draw(st.sampled_from((1.0, 2.0))), guaranteed=tuple(guaranteed), burst=tuple(burst))
        )
    return found


def place_running(cluster: list[Node], candidates: list[Job], starts: list[float]) -> list[Running]:
    """Legal running work: each candidate placed by find_slots on what the ones before it left free."""
    state = ClusterState(Snapshot(nodes=tuple(cluster), teams=()))
    placed = []
    for job, start in zip(candidates, starts, strict=True):
        slots = find_slots(state, job, POLICY, now=NOW)
        if slots is not None:
            state.place(job, slots)
            placed.append(Running(job=job, slots=slots, started_at=start))
    return placed


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    cluster = draw(nodes())
    candidates = draw(jobs("r", draw(st.integers(0, 12))))
    starts = [NOW - draw(st.sampled_from((30.0, 600.0, 7200.0))) for _ in candidates]
    held = place_running(cluster, candidates, starts)
    pending = draw(jobs("p", draw(st.integers(0, 10))))
    ids = [r.job.id for r in held] + [j.id for j in pending]
    history = []
    if ids and draw(st.booleans()):
        from scheduler.core import Preemption

        history = [Preemption(victim=draw(st.sampled_from(ids)), by=draw(st.sampled_from(ids)), at=NOW - 60)]
    return Snapshot(
        nodes=tuple(cluster),
        teams=tuple(draw(teams())),
        running=tuple(held),
        pending=tuple(pending),
        preemptions=tuple(history),
    )


# -- checks -----------------------------------------------------------------------------------------------


def assert_layouts_legal(snapshot: Snapshot) -> None:
    for node in snapshot.nodes:
        for gpu in range(node.gpu_count):
            layout = node.layout(gpu)
            if layout:
                assert validate_layout(node.gpu_model, [list(item) for item in layout]) == sorted(
                    layout, key=lambda item: item[1]
                )


def assert_nothing_double_booked(snapshot: Snapshot) -> None:
    nodes_by_name = {node.name: node for node in snapshot.nodes}
    whole: Counter[tuple[str, int]] = Counter()
    instances: Counter[tuple[str, int, int]] = Counter()
    milli: Counter[tuple[str, int]] = Counter()
    for held in snapshot.running:
        for replica in held.slots:
            assert replica and len({slot.node for slot in replica}) == 1, "a replica never spans nodes"
            for slot in replica:
                node = nodes_by_name[slot.node]
                assert 0 <= slot.gpu < node.gpu_count
                layout = node.layout(slot.gpu)
                if slot.mig_profile is not None:
                    assert (slot.mig_profile, slot.mig_start) in layout
                    instances[(slot.node, slot.gpu, slot.mig_start)] += 1  # type: ignore[index]
                elif slot.milli >= 1000:
                    assert not layout
                    whole[(slot.node, slot.gpu)] += 1
                else:
                    assert not layout and node.sharing
                    milli[(slot.node, slot.gpu)] += slot.milli
    assert all(count == 1 for count in whole.values())
    assert all(count == 1 for count in instances.values())
    assert all(total <= 1000 for total in milli.values())
    assert not set(whole) & set(milli), "a whole GPU is never shared"


def assert_binds_legal(snapshot: Snapshot, plan: Plan) -> None:
    pending = {job.id: job for job in snapshot.pending}
    nodes_by_name = {node.name: node for node in snapshot.nodes}
    for bind in plan.binds:
        job = pending[bind.job]
        assert len(bind.slots) == job.replicas
        models = {nodes_by_name[replica[0].node].gpu_model for replica in bind.slots}
        for replica in bind.slots:
            node = nodes_by_name[replica[0].node]
            assert node.schedulable and (node.reconfiguring_until is None or node.reconfiguring_until <= NOW)
            assert node.tier in allowed_tiers(job)
            demand = resolve(job, node.gpu_model, POLICY)
            assert demand is not None
            if demand.kind == DemandKind.WHOLE:
                assert len(replica) == demand.gpus == len({s.gpu for s in replica})
                assert all(s.milli == 1000 and s.mig_profile is None for s in replica)
            elif demand.kind == DemandKind.MIG:
                assert len(replica) == 1
                slot, production = replica[0], job.priority == Priority.PRODUCTION
                profiles = GPU_MODEL_BY_NAME[node.gpu_model].profiles()
                own = profiles[demand.mig_profile or ""]
                if slot.mig_profile is None:
                    # production takes a whole idle GPU rather than wait (fallback); any job whose profile takes
                    # every compute slice takes one as the same capacity (fallback.whole_gpu_slots)
                    assert production or own.compute_slices == 7
                    assert slot.milli == 1000
                elif slot.mig_profile != demand.mig_profile:  # a larger instance: memory-sized, or production
                    assert demand.memory_mib is not None or production
                    assert profiles[slot.mig_profile].memory_mib >= own.memory_mib
                    assert profiles[slot.mig_profile].compute_slices >= own.compute_slices or not production
            else:
                assert len(replica) == 1 and replica[0].milli == demand.milli
        demands = {resolve(job, m, POLICY) for m in models}
        if job.replicas > 1 and {d.kind for d in demands if d is not None} == {DemandKind.WHOLE}:
            # Several models only of one class, with alike replicas (placement/spans.py).
            assert len({gpu_class_of(m) for m in models}) == 1, "a whole-GPU gang stays in one GPU class"
            assert len(demands) == 1, "every replica of a whole-GPU gang has the same demand"


def team_units(snapshot: Snapshot, *, firm: bool = False) -> dict[str, dict[str, int]]:
    """Units per team and class of the running work (``firm``: of its non-preemptible work only)."""
    nodes_by_name = {node.name: node for node in snapshot.nodes}
    usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for held in snapshot.running:
        if firm and held.job.preemptible:
            continue
        for replica in held.slots:
            for slot in replica:
                node = nodes_by_name[slot.node]
                units = slot_units(slot, GPU_MODEL_BY_NAME.get(node.gpu_model))
                usage[held.job.team][gpu_class_of(node.gpu_model)] += units
    return usage


def assert_quotas_respected(before: Snapshot, plan: Plan) -> None:
    """Replaying the binds in plan order (after the plan's evictions): each bind leaves its team within burst,
    and its non-preemptible work within the guarantee when the bind is of non-preemptible work other than
    production (which may run above the guarantee, up to burst)."""
    evicted = {evict.job for evict in plan.evictions}
    kept = Snapshot(
        nodes=before.nodes, teams=before.teams, running=tuple(r for r in before.running if r.job.id not in evicted)
    )
    usage = team_units(kept)
    firm_usage = team_units(kept, firm=True)
    nodes_by_name = {node.name: node for node in before.nodes}
    by_name = {team.name: team for team in before.teams}
    pending = {job.id: job for job in before.pending}
    for bind in plan.binds:
        job = pending[bind.job]
        held, firm = usage[job.team], firm_usage[job.team]
        classes = set()
        for replica in bind.slots:
            for slot in replica:
                node = nodes_by_name[slot.node]
                units = slot_units(slot, GPU_MODEL_BY_NAME.get(node.gpu_model))
                held[gpu_class_of(node.gpu_model)] += units
                if not job.preemptible:
                    firm[gpu_class_of(node.gpu_model)] += units
                classes.add(gpu_class_of(node.gpu_model))
        team = by_name.get(job.team)
        guarantee = guarantee_limits(team)
        checks = [(burst_limits(team, guarantee), held)]
        if not job.preemptible and job.priority != Priority.PRODUCTION:
            checks.append((guarantee, firm))
        for limits, units in checks:
            if limits.overall is not None:
                assert sum(units.values()) <= limits.overall
            for gpu_class in sorted(classes):
                limit = limits.for_class(gpu_class)
                if limit is not None:
                    assert units[gpu_class] <= limit


# -- properties -------------------------------------------------------------------------------------------


@SETTINGS
@given(snapshots())
def test_a_plan_never_double_books_and_keeps_layouts_legal(snapshot: Snapshot) -> None:
    assert_nothing_double_booked(snapshot)
    plan = plan_cycle(snapshot, POLICY, NOW)
    after = apply_plan(snapshot, plan, NOW)
    assert_layouts_legal(after)
    assert_nothing_double_booked(after)
    assert_binds_legal(snapshot, plan)
    assert_quotas_respected(snapshot, plan)
    for change in plan.reconfigurations:
        assert not any(
            s.node == change.node and s.gpu == change.gpu for r in after.running for rep in r.slots for s in rep
        )
    decided = [b.job for b in plan.binds] + [r.job for r in plan.rejections] + [w.job for w in plan.waiting]
    assert sorted(decided) == sorted({job.id for job in snapshot.pending})
    assert [w.position for w in plan.waiting] == list(range(1, len(plan.waiting) + 1))
    # Honest start times: never in the past, and none for a job its quota blocks.
    assert all(w.eta_s is None or w.eta_s >= 0 for w in plan.waiting)
    assert all(w.eta_s is None for w in plan.waiting if w.blocker == "quota")


@SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_same_input_gives_the_same_plan(snapshot: Snapshot, rng: random.Random) -> None:
    plan = plan_cycle(snapshot, POLICY, NOW)
    assert plan_cycle(snapshot, POLICY, NOW) == plan
    shuffled = Snapshot(
        nodes=tuple(rng.sample(snapshot.nodes, len(snapshot.nodes))),
        teams=tuple(rng.sample(snapshot.teams, len(snapshot.teams))),
        running=tuple(rng.sample(snapshot.running, len(snapshot.running))),
        pending=tuple(rng.sample(snapshot.pending, len(snapshot.pending))),
        preemptions=snapshot.preemptions,
    )
    assert plan_cycle(shuffled, POLICY, NOW) == plan


@SETTINGS
@given(snapshots())
def test_a_plan_applied_twice_changes_nothing(snapshot: Snapshot) -> None:
    plan = plan_cycle(snapshot, POLICY, NOW)
    after = apply_plan(snapshot, plan, NOW)
    again = plan_cycle(after, POLICY, NOW)
    bound = {bind.job for bind in plan.binds}
    assert not bound & {bind.job for bind in again.binds}
    # Work bound by the first plan is fresh in the second cycle: the minimum runtime protects it from every
    # ground but production's, which must run now (preemption rules). The case Hypothesis found first — a
    # production job whose only reconfiguration was on a node the first plan bound, draining the lower work that
    # took the idle GPU meanwhile — now holds that node (Reconfigurations.hold_for, scenario 47); production may still
    # evict fresh work on its own ground.
    priority = {job.id: job.priority for job in after.pending}
    for evict in again.evictions:
        if evict.job in bound:
            assert priority.get(evict.by) == Priority.PRODUCTION, (evict, "fresh work evicted by non-production")
    final = apply_plan(after, again, NOW)
    assert_nothing_double_booked(final)
    assert_layouts_legal(final)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_no_eviction_is_undone_by_the_next_cycle(snapshot: Snapshot) -> None:
    """Nothing one plan evicts to make room within the quotas (priority, reclaim) is bound
    again by the next plan, with no change in demand in between (no job ends or arrives) — such an eviction was
    not needed, and undoing it is churn. Production's victims and drains for a reconfiguration are held to the
    letter: never bound again on the GPUs they were evicted from. Production may evict work that can run on
    other free capacity production itself cannot use (a larger idle GPU than its cap allows, a spot node
    production may not run on), on whichever ground it evicts — production's own, or priority over its own
    team's lower work — and a drain empties one GPU for a new layout: then the victim moves, which is no undo.
    Any other evictor may likewise evict work that then moves to capacity the evictor may not use — a node of
    a tier it may not run on, a GPU model that cannot serve it, or a GPU class where its team's guarantee is
    zero, which work that may not be preempted cannot borrow (Hypothesis found two: high-priority work of a team
    guaranteed nothing on A100 evicts its own team's preemptible work from an H100, which then borrows an A100 on
    spot; a memory-sized training job, which no T4 serves, evicts its team's 1-GPU work, which moves to a T4)."""
    plan = plan_cycle(snapshot, POLICY, NOW)
    after = apply_plan(snapshot, plan, NOW)
    again = plan_cycle(after, POLICY, NOW + POLICY.cycle_s)
    held = {r.job.id: {(s.node, s.gpu) for rep in r.slots for s in rep} for r in snapshot.running}
    rebound = {b.job: {(s.node, s.gpu) for rep in b.slots for s in rep} for b in again.binds}
    production = {job.id for job in snapshot.pending if job.priority == Priority.PRODUCTION}
    pending = {job.id: job for job in snapshot.pending}
    teams = {team.name: team for team in snapshot.teams}
    nodes = {node.name: node for node in snapshot.nodes}
    for evict in plan.evictions:
        if evict.job not in rebound:
            continue
        moved = evict.by in production or evict.reason == "repartition"
        if not moved and evict.by in pending:
            evictor = pending[evict.by]
            moved = all(_may_not_use(evictor, teams.get(evictor.team), nodes[node]) for node, _ in rebound[evict.job])
        assert moved, (evict, rebound[evict.job])
        assert not held[evict.job] & rebound[evict.job], (evict, rebound[evict.job])


def _may_not_use(job: Job, team: Team | None, node: Node) -> bool:
    """``job`` may not run on ``node``: its tier is not one the job may use, its GPU model cannot serve the job,
    or the job may not be preempted and its team's guarantee on the node's GPU class is zero (such work never
    borrows)."""
    if CapacityTier(node.tier) not in allowed_tiers(job) or resolve(job, node.gpu_model, POLICY) is None:
        return True
    return not job.preemptible and guarantee_limits(team).for_class(gpu_class_of(node.gpu_model)) == 0


# -- guarantees ---------------------------------------------------------------------------------------------


@st.composite
def reclaim_worlds(draw: st.DrawFn) -> tuple[Snapshot, dict[str, int]]:
    """A homogeneous cluster whose guarantees add up to at most its size, busy with old preemptible 1-GPU
    work (some teams borrowing), and pending 1-GPU-replica work of teams that fits in their guarantees."""
    sizes = draw(st.lists(st.sampled_from((2, 4, 8)), min_size=1, max_size=3))
    cluster = [Node(name=f"n{i}", gpu_model="H100-SXM5-80GB", gpu_count=g) for i, g in enumerate(sizes)]
    capacity = sum(sizes)
    guarantees: dict[str, int] = {}
    left = capacity
    for name in TEAMS:
        guarantees[name] = draw(st.integers(0, left))
        left -= guarantees[name]
    slots = [(node.name, g) for node in cluster for g in range(node.gpu_count)]
    busy = draw(st.integers(0, capacity))
    held = []
    for i, (node_name, gpu) in enumerate(slots[:busy]):
        from scheduler.core import Slot

        job = Job(
            id=f"r{i:02d}",
            team=draw(st.sampled_from(TEAMS)),
            request=Request(gpus=1),
            priority=draw(st.sampled_from((Priority.HIGH, Priority.NORMAL, Priority.LOW))),
            preemptible=True,
        )
        held.append(Running(job=job, slots=((Slot(node_name, gpu),),), started_at=NOW - 7200))
    usage = Counter(r.job.team for r in held)
    pending = []
    fits: dict[str, int] = {}
    for name in TEAMS:
        room = guarantees[name] - usage[name]
        if room <= 0:
            continue
        for k in range(draw(st.integers(0, 2))):
            replicas = draw(st.integers(1, 2))
            if replicas > room:
                break
            room -= replicas
            job_id = f"p-{name}{k}"
            pending.append(
                Job(
                    id=job_id,
                    team=name,
                    request=Request(gpus=1),
                    replicas=replicas,
                    preemptible=draw(st.booleans()),
                    submitted_at=float(k),
                )
            )
            fits[job_id] = replicas
    team_specs = tuple(Team(name=n, guaranteed=(("any", float(g)),)) for n, g in guarantees.items())
    return Snapshot(nodes=tuple(cluster), teams=team_specs, running=tuple(held), pending=tuple(pending)), fits


@SETTINGS
@given(reclaim_worlds())
def test_guarantees_are_restored_within_one_cycle(world: tuple[Snapshot, dict[str, int]]) -> None:
    snapshot, fits = world
    plan = plan_cycle(snapshot, POLICY, NOW)
    assert {bind.job for bind in plan.binds} == set(fits), plan.waiting
    after = apply_plan(snapshot, plan, NOW)
    assert_nothing_double_booked(after)
    guarantees = {team.name: dict(team.guaranteed)["any"] for team in snapshot.teams}
    for team_name, units in team_units(after).items():
        held = sum(units.values()) / UNITS_PER_GPU
        before = sum(team_units(snapshot)[team_name].values()) / UNITS_PER_GPU
        # Nobody is pushed below its guarantee by someone else's reclaim.
        assert held >= min(before, guarantees[team_name])


def test_production_moves_its_teams_lower_work_to_capacity_it_may_not_use_itself() -> None:
    """The case Hypothesis found for the property above: production may not run on spot, so the one free GPU
    (on a spot node) is no use to it; it evicts its own team's lower work (ground: priority) from a reserved
    node, and that work binds on the spot GPU next cycle. The victim moved, to capacity production could not
    take: no undo, and never back onto the GPU it left."""
    firm = dict(kind=JobKind.TRAINING, priority=Priority.PRODUCTION, preemptible=False)
    nodes = (
        Node(name="n1", gpu_model="A100-SXM4-80GB", gpu_count=2, tier=CapacityTier.RESERVED),
        Node(name="n2", gpu_model="A100-SXM4-80GB", gpu_count=1, tier=CapacityTier.SPOT),
    )
    running = (
        Running(
            job=Job(id="r1", team="a", request=Request(gpus=1), **firm), slots=((Slot("n1", 0),),), started_at=NOW - 30
        ),
        Running(
            job=Job(
                id="r4",
                team="a",
                request=Request(gpus=1),
                kind=JobKind.TRAINING,
                priority=Priority.HIGH,
                preemptible=True,
            ),
            slots=((Slot("n1", 1),),),
            started_at=NOW - 600,
        ),
    )
    pending = (Job(id="p0", team="a", request=Request(gpus=1), **firm),)
    snapshot = Snapshot(nodes=nodes, running=running, pending=pending, teams=(Team(name="a"),))
    plan = plan_cycle(snapshot, POLICY, NOW)
    assert [(e.job, e.by) for e in plan.evictions] == [("r4", "p0")]
    again = plan_cycle(apply_plan(snapshot, plan, NOW), POLICY, NOW + POLICY.cycle_s)
    assert [(b.job, b.slots) for b in again.binds] == [("r4", ((Slot("n2", 0),),))]
