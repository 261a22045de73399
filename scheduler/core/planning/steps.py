"""One job's turn in a cycle, as an ordered list of named steps (as KAI-Scheduler runs its actions in order).

A turn runs the steps of its order one after another until one ends it. The orders are data, here and nowhere
else:

- production work: :data:`PRODUCTION_STEPS` — not_ready → choose → backfill → idle_whole_gpu → fallback →
  preempt_preemptible → preempt_whole_gpu → oversize → reconfigure_idle → preempt → reconfigure_by_drain → hold →
  reserve → wait;
- other work: :data:`OTHER_STEPS` — not_ready → choose → backfill → idle_whole_gpu → preempt → reserve → wait.

Each step is a function ``step(run, turn) -> bool`` whose docstring is its contract: when it acts (what it
may assume), what it may change, and what it returns — True: the job's turn is over, bound or waiting with
the blocker the step gave it; False: try the next step. A step changes only what its contract names; what
the steps of one turn tell each other travels in the :class:`Turn` (the quota's refusal, which the
whole-GPU step may set), the rest of the cycle's working state in the :class:`~scheduler.core.planning.run.Run`.

Why this order. Free capacity first: the best placement its quota admits, then GPUs a reservation holds
that the job will have left by the time the reservation starts, then an idle MIG-off GPU (the same
capacity as a full-GPU MIG instance). Production must start now, so it goes on: a larger free instance or
a whole idle GPU, up to twice its size; preemptible work yields before it waits minutes for a reconfiguration; a
MIG-off GPU an eviction frees serves a profile that takes the whole GPU before any reconfiguration (the same
capacity, now); any larger free capacity, however oversized, rather than wait minutes for a reconfiguration —
but only with its way back, the change it would have waited for made elsewhere for its move (consolidation moves it
to its right size once the change is done); an idle GPU's change before firm work is evicted elsewhere; then a
preemption; a GPU drained of lower work
only when that failed (eviction is the last resort); and failing all, a node bound this cycle held for its
change next cycle rather than let lower work start there. Production's own steps run only while the quota
has not refused the job (:attr:`Turn.production`): a production job its quota refused waits as other work
does. Other work evicts as the last resort: not while a reconfiguration of an idle GPU could serve it — it
waits for the change the cycle plans after placement (:mod:`scheduler.core.planning.cycle`, step 4); with the
policy's ``preemption_search_per_team``, other work past its team's first N in the cycle's order does not try a
preemption at all (:mod:`scheduler.core.rules.search_bound`: on a long queue most searches fail). What
still waits gets a reservation of GPUs that will free for it, else its blocker: the quota or capacity.

Adding a scheduling rule: state it in ``scheduler/core/rules/`` as plain code; write the step that applies
it here, with its contract; put the step in its place in :data:`PRODUCTION_STEPS` and/or
:data:`OTHER_STEPS`; test the step alone (``tests/scheduler/core/planning/test_steps.py``). The cycle needs no change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.core.decisions.choose import Choice
from scheduler.core.decisions.choose import choose as choose_placement
from scheduler.core.decisions.reservation import expected_runtime, take_back, would_reserve
from scheduler.core.model.explain import Blocker
from scheduler.core.model.snapshot import Job, Slots
from scheduler.core.model.vocabulary import BlockerKind, Priority
from scheduler.core.placement.fallback import fallback_slots, oversize_slots, whole_gpu_options, whole_gpu_slots
from scheduler.core.placement.options import Option
from scheduler.core.planning.run import Run
from scheduler.core.rules.limits import Admission, placement_units
from scheduler.core.rules.search_bound import skipped_text


@dataclass
class Turn:
    """What the steps of one job's turn share.

    ``options``: the job's options on ready nodes at the start of its turn
    (:func:`~scheduler.core.placement.options.options_for`). ``admission``: the quota's refusal of a placement
    found for the job this turn, None while none was refused; set by :func:`choose`, and by
    :func:`idle_whole_gpu`, and read by every later step."""

    job: Job
    options: tuple[Option, ...]
    admission: Admission | None = None

    def __init__(self, job: Job, options: tuple[Option, ...], admission: Admission | None = None) -> None:
        self.job = job
        self.options = options
        self.admission = admission

    @property
    def production(self) -> bool:
        """Do production's own steps act? Production work its quota has not refused."""
        return self.job.priority == Priority.PRODUCTION and self.admission is None


Step = Callable[[Run, Turn], bool]


# -- the steps, in the order production takes them ---------------------------------------------------------


def not_ready(run: Run, turn: Turn) -> bool:
    """No ready node may take the job (cordoned, draining or reconfiguring): it waits, ``not-ready``.

    Assumes: the turn has just begun. Changes: the job's blocker. Returns True when it waits, else False. Such
    a job is still a candidate of the reconfigurations planned after placement."""
    if turn.options:
        return False
    run.blockers[turn.job.id] = Blocker(BlockerKind.NOT_READY)
    return True


def choose(run: Run, turn: Turn) -> bool:
    """Bind the job on the best free placement its quota admits (:func:`scheduler.core.decisions.choose.choose`).

    Assumes: the job has options. Changes: the binds, or ``turn.admission`` — the quota's refusal of the best
    placement, None when nothing fits. Returns True when bound."""
    choice = choose_placement(run.state, run.fairness, turn.job, run.policy)
    if choice.slots is not None:
        run.bind(turn.job, choice.slots)
        return True
    turn.admission = choice.refused
    return False


def backfill(run: Run, turn: Turn) -> bool:
    """Bind the job on GPUs a reservation holds, when it will have left them by the time the reservation
    starts or is preemptible work that yields them back (:mod:`scheduler.core.decisions.reservation`, rule 4);
    else, for a job whose turn may make a reservation, evict the work that backfilled in front of it when that
    alone lets it start, and bind it (rule 6: the ``backfill`` eviction).

    Acts only when the quota has not refused the job. Changes: the binds, and the evictions of taking back.
    Returns True when bound."""
    if turn.admission is not None:
        return False
    job = turn.job

    def choice() -> Choice:
        return choose_placement(run.state, run.fairness, job, run.policy)

    def place() -> Slots | None:
        return choice().slots

    if run.reservations.made:
        runtime_s = expected_runtime(job, run.fairness.teams.get(job.team), run.policy)
        slots = run.reservations.backfill(
            job, runtime_s, choice, lambda held: run.fairness.admit(job, placement_units(run.state, held)).borrowing
        )
        if slots is not None:
            run.bind(job, slots)
            return True
    if not would_reserve(job, turn.options, len(run.reservations.made), run.policy):
        return False
    spared = frozenset(
        p.by for p in run.preemptions if p.victim == job.id and run.now - p.at < run.policy.ping_pong_window_s
    )
    found = take_back(run.state, run.fairness, job, run.policy, run.now, spared, place, run.take_back_candidates)
    if found is None:
        return False
    evictions, slots = found
    run.bind(job, slots)
    run.evictions.extend(evictions)
    return True


def idle_whole_gpu(run: Run, turn: Turn) -> bool:
    """Bind the job on an idle MIG-off GPU: the same capacity as a full-GPU MIG instance
    (:func:`~scheduler.core.placement.fallback.whole_gpu_slots`).

    Acts only when the quota has not refused the job. Changes: the binds when its quota admits the GPU; when
    the quota refuses it, ``turn.admission`` — the quota, not capacity, is then what keeps the job waiting.
    Returns True when bound."""
    if turn.admission is not None:
        return False
    slots = whole_gpu_slots(run.state, turn.job, run.policy)
    if slots is None:
        return False
    verdict = run.fairness.admit(turn.job, placement_units(run.state, slots))
    if not verdict.ok:
        turn.admission = verdict
        return False
    run.bind(turn.job, slots)
    return True


def fallback(run: Run, turn: Turn) -> bool:
    """Bind production work on a larger free instance or a whole idle GPU
    (:mod:`scheduler.core.placement.fallback`), counted at what it holds, if its quota admits that: idle
    capacity before an eviction or a reconfiguration.

    Acts only for :attr:`Turn.production`. Changes: the binds. Returns True when bound."""
    if not turn.production:
        return False
    slots = fallback_slots(run.state, turn.job, run.policy)
    if slots is None or not run.fairness.admit(turn.job, placement_units(run.state, slots)).ok:
        return False
    run.bind(turn.job, slots)
    return True


def preempt_preemptible(run: Run, turn: Turn) -> bool:
    """Evict preemptible work for production work and bind it (:meth:`Run.preempt`): production must start
    now, and preemptible work yields before the job waits minutes for a reconfiguration.

    Acts only for :attr:`Turn.production`, and not when such a preemption is known to fail
    (:meth:`Run.preempt_fails`). Changes: the evictions and the binds, or nothing. Returns True when bound."""
    if not turn.production or run.preempt_fails(turn.job, True):
        return False
    return run.preempt(turn.job, True)


def preempt_whole_gpu(run: Run, turn: Turn) -> bool:
    """Evict lower work from a GPU with MIG off for production work whose MIG profile takes every compute slice
    of the GPU, and bind it there (:meth:`Run.preempt`, ``whole_gpu``): such a GPU is the same capacity as the
    instance (:func:`idle_whole_gpu`), and an eviction serves production now where a reconfiguration — of an
    idle GPU or a drained one — makes it wait minutes. Only whole MIG-off GPUs its quota admits are taken; the
    victims are the fewest the preemption rules allow, preemptible work first.

    Acts only for :attr:`Turn.production` with such a profile
    (:func:`~scheduler.core.placement.fallback.whole_gpu_options`), and not when such a preemption is known to
    fail (:meth:`Run.preempt_fails`). Changes: the evictions and the binds, or nothing. Returns True when
    bound."""
    job = turn.job
    if not turn.production or not whole_gpu_options(run.index, job, run.policy):
        return False
    if run.preempt_fails(job, whole_gpu=True):
        return False
    return run.preempt(job, whole_gpu=True)


def oversize(run: Run, turn: Turn) -> bool:
    """Bind production work on any larger free instance or whole idle GPU, the least oversized first, counted at
    what it holds, if its quota admits that (:func:`~scheduler.core.placement.fallback.oversize_slots`) — and only
    with its way back: the reconfiguration it would have waited for is still made (or one under way set aside) for
    its right size, on another node
    (:meth:`~scheduler.core.placement.reconfigurations.Reconfigurations.way_back`), so that consolidation moves it
    there make-before-break once the change is done (:mod:`scheduler.core.decisions.consolidation`). It starts now
    rather than wait minutes for the change; without a way back it waits for the change as before
    (:func:`reconfigure_idle`), as a service left on a whole GPU with nothing asking for its slice would stay there.

    Acts only for :attr:`Turn.production`. Changes: the binds, and the cycle's reconfigurations (those made for
    its way back stay even when they do not cover every replica, as :func:`reconfigure_idle`'s would). Returns True
    when bound."""
    if not turn.production:
        return False
    slots = oversize_slots(run.state, turn.job, run.policy)
    if slots is None or not run.fairness.admit(turn.job, placement_units(run.state, slots)).ok:
        return False
    if not run.reconfigurations.way_back(turn.job, slots):
        return False
    run.bind(turn.job, slots)
    return True


def reconfigure_idle(run: Run, turn: Turn) -> bool:
    """Production work waits for a reconfiguration that offers its instance: one under way, else a change of an idle
    GPU made now (:meth:`~scheduler.core.placement.reconfigurations.Reconfigurations.for_production`) — before
    firm work is evicted for it.

    Acts only for :attr:`Turn.production`. Changes: the cycle's reconfigurations and the job's blocker
    (``reconfiguring``). Returns True when it waits for one."""
    return turn.production and run.reconfigurations.for_production(turn.job)


def preempt(run: Run, turn: Turn) -> bool:
    """Evict for the job and bind it (:meth:`Run.preempt`; :mod:`scheduler.core.decisions.preemption` decides who may be
    evicted).

    Acts for every job, but not for one past its team's search bound (:attr:`Run.past_bound`,
    :mod:`scheduler.core.rules.search_bound`), nor when a preemption for its shape is known to fail
    (:meth:`Run.preempt_fails`), nor — for other work its quota has not refused — while a reconfiguration of an
    idle GPU could serve it (:meth:`~scheduler.core.placement.reconfigurations.Reconfigurations.could_change_for`):
    eviction is the last resort, and such a job waits for the change the cycle plans after placement. The bound
    and the known failure are asked first: they are cheap, and could_change_for only answers (it changes
    nothing). Changes: the evictions and the binds, or nothing. Returns True when bound."""
    job = turn.job
    if job.id in run.past_bound or run.preempt_fails(job):
        return False
    lower = job.priority != Priority.PRODUCTION and turn.admission is None
    if lower and run.reconfigurations.could_change_for(job):
        return False
    return run.preempt(job)


def reconfigure_by_drain(run: Run, turn: Turn) -> bool:
    """Production work waits for a GPU drained of lower work and re-cut for it (:mod:`scheduler.core.placement.drain`,
    through :meth:`~scheduler.core.placement.reconfigurations.Reconfigurations.for_production`): after its
    preemption failed, as eviction is the last resort.

    Acts only for :attr:`Turn.production`. Changes: the cycle's reconfigurations and their evictions, and the
    job's blocker (``reconfiguring``). Returns True when it waits for one."""
    return turn.production and run.reconfigurations.for_production(turn.job, drain=True)


def hold(run: Run, turn: Turn) -> bool:
    """Production work a change of a node bound this cycle would serve holds that node for the change next
    cycle, rather than let lower work start there
    (:meth:`~scheduler.core.placement.reconfigurations.Reconfigurations.hold_for`).

    Acts only for :attr:`Turn.production`. Changes: the held node (nothing more binds there this cycle) and the
    job's blocker (``held``). Returns True when it holds one."""
    return turn.production and run.reconfigurations.hold_for(turn.job)


def reserve(run: Run, turn: Turn) -> bool:
    """Reserve GPUs the placed work will free for a job blocked by capacity
    (:mod:`scheduler.core.decisions.reservation`),
    on a GPU model whose quota admits the job by then.

    Acts only when the quota has not refused the job. A job with on-demand nodes coming (a node request in flight,
    docs/scheduling-rules.md §9) holds no GPUs that would free for it only after its nodes arrive. Changes: the
    cycle's reservations and the job's blocker — ``reserved`` (the nodes and the start), else ``quota`` when GPUs
    would free but its quota would not admit it then (no start time). Returns True when it gave the job a blocker;
    False: it waits for capacity."""
    if turn.admission is not None:
        return False
    job = turn.job
    refusals: list[Admission] = []  # on the models a reservation was found on, the quota refused
    coming_at = run.nodes_coming_at.get(job.id)

    def admits_at(at: float, model: str) -> bool:
        if coming_at is not None and at > coming_at:
            return False  # its own nodes come first
        # Asked only of the models a reservation is found on, so most turns never ask the quota.
        on_model = [o for o in turn.options if o.model == model]
        refusal = run.quota_refusal(job, on_model)
        if refusal is None or run.admits_at(job, on_model, at):
            return True  # admitted now (no look ahead needed), or once its own work has ended
        refusals.append(refusal)
        return False

    reservation = run.reservations.reserve(job, turn.options, admits_at)
    if reservation is not None:
        nodes = ", ".join(dict.fromkeys(node for node, _ in reservation.gpus))
        run.blockers[job.id] = Blocker(BlockerKind.RESERVED, nodes, reservation.start_at)
        return True
    if refusals:
        run.blockers[job.id] = Blocker(BlockerKind.QUOTA, refusals[0].reason)
        return True
    return False


def wait(run: Run, turn: Turn) -> bool:
    """The job waits: for its quota when the quota refused a placement found for it (``quota``, with the
    refusal's reason), else for capacity (``capacity``) — saying so when it was past its team's search bound and
    did not search for work to evict (:mod:`scheduler.core.rules.search_bound`).

    The last step of every order. Changes: the job's blocker. Returns True."""
    if turn.admission is not None:
        run.blockers[turn.job.id] = Blocker(BlockerKind.QUOTA, turn.admission.reason)
    elif turn.job.id in run.past_bound:
        run.blockers[turn.job.id] = Blocker(BlockerKind.CAPACITY, skipped_text(run.policy))
    else:
        run.blockers[turn.job.id] = Blocker(BlockerKind.CAPACITY)
    return True


# -- the orders ------------------------------------------------------------------------------------------------

PRODUCTION_STEPS: tuple[Step, ...] = (
    not_ready,
    choose,
    backfill,
    idle_whole_gpu,
    fallback,
    preempt_preemptible,
    preempt_whole_gpu,
    oversize,
    reconfigure_idle,
    preempt,
    reconfigure_by_drain,
    hold,
    reserve,
    wait,
)
OTHER_STEPS: tuple[Step, ...] = (not_ready, choose, backfill, idle_whole_gpu, preempt, reserve, wait)


def steps_for(job: Job) -> tuple[Step, ...]:
    """The order of ``job``'s turn: production's, or other work's."""
    return PRODUCTION_STEPS if job.priority == Priority.PRODUCTION else OTHER_STEPS


def take_turn(run: Run, turn: Turn, steps: Sequence[Step]) -> None:
    """Run ``steps`` in order until one ends the turn. An order must end with a step that always does
    (:func:`wait`): a job the steps left without a blocker would count as bound."""
    for step in steps:
        if step(run, turn):
            return
    raise ValueError(f"no step ended the turn of {turn.job.id}: an order must end with wait")
