"""Fair share (docs/scheduling-rules.md, 2 and 3): quotas, admission, the order of pending work, borrowed jobs."""

from __future__ import annotations

import pytest

from scheduler.core.gpus.units import UNITS_PER_GPU, gpus_text
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Running, Slot, Team
from scheduler.core.model.vocabulary import Priority
from scheduler.core.rules.fairshare import FairShare, job_class
from scheduler.core.rules.limits import ANY, Admission, Limits, burst_limits, exceeds, guarantee_limits, placement_units
from scheduler.core.speedups.fairshare import RememberingFairShare
from scheduler.core.speedups.memo import Memo
from tests.scheduler.core.decisions.test_preemption import A100, H100, POLICY, job, node, on, ones, run, team, world

G = UNITS_PER_GPU
NODES = [node("a1"), node("h1", model=H100)]  # 8 A100 + 8 H100


# -- quotas -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "guarantee", "burst"),
    [
        (None, Limits(0, {}, 0), Limits(None, {}, None)),
        (team("t"), Limits(0, {}, 0), Limits(None, {}, None)),
        (team("t", {"any": 4}, {"any": 8}), Limits(4 * G, {}, None), Limits(8 * G, {}, None)),
        # Burst never below the guarantee.
        (
            team("t", {"any": 4, "H100": 2}, {"any": 2, "H100": 1}),
            Limits(4 * G, {"H100": 2 * G}, None),
            Limits(4 * G, {"H100": 2 * G}, None),
        ),
        # Class entries only: the overall is their sum and unlisted classes get nothing.
        (
            team("t", {"H100": 2, "A100": 1.5}),
            Limits(int(3.5 * G), {"A100": int(1.5 * G), "H100": 2 * G}, 0),
            Limits(None, {}, None),
        ),
        (team("t", {}, {"H100": 3}), Limits(0, {}, 0), Limits(None, {"H100": 3 * G}, None)),
        # A MIG slice's worth: 1/7 of a GPU is exactly 1000 units.
        (team("t", {"any": 1 / 7}), Limits(1000, {}, None), Limits(None, {}, None)),
    ],
)
def test_quota_limits(spec: Team | None, guarantee: Limits, burst: Limits) -> None:
    assert guarantee_limits(spec) == guarantee
    assert burst_limits(spec, guarantee) == burst


@pytest.mark.parametrize(
    ("limits", "gpu_class", "expected"),
    [
        (Limits(4, {"H100": 2}, None), "H100", 2),
        (Limits(4, {"H100": 2}, None), "A100", None),
        (Limits(4, {"H100": 2}, 0), "A100", 0),
    ],
)
def test_class_limit(limits: Limits, gpu_class: str, expected: int | None) -> None:
    assert limits.for_class(gpu_class) == expected


# -- admission ----------------------------------------------------------------------------------------------

QUOTAS = [
    team("g4", {"any": 4}, {"any": 6}),
    team("cls", {"any": 8, "H100": 2}, {"any": 8, "H100": 3}),
    team("h-only", {"H100": 2}),
]


@pytest.mark.parametrize(
    ("held", "pending", "units", "expected", "reason"),
    [
        # Non-preemptible work only within the guarantee.
        (2, job("j", "g4", gpus=2), {"A100": 2 * G}, (True, False), "within the team's guarantee"),
        (
            2,
            job("j", "g4", gpus=3),
            {"A100": 3 * G},
            (False, False),
            "team g4 would hold 5 GPUs in work that is not preemptible, above its guarantee of 4; it starts when the "
            "team's work that is not preemptible frees 1 GPU, or submit it as preemptible to use borrowed capacity",
        ),
        # Preemptible work borrows up to burst.
        (2, job("j", "g4", gpus=2, preemptible=True), {"A100": 2 * G}, (True, False), "within"),
        (2, job("j", "g4", gpus=4, preemptible=True), {"A100": 4 * G}, (True, True), "borrowing idle capacity"),
        (
            2,
            job("j", "g4", gpus=5, preemptible=True),
            {"A100": 5 * G},
            (False, False),
            "team g4 would hold 7 GPUs, above its burst limit of 6; it starts when the team's work frees 1 GPU, or "
            "when a platform admin raises the limit",
        ),
        # Class guarantee and class burst.
        (
            0,
            job("j", "cls", gpus=3),
            {"H100": 3 * G},
            (False, False),
            "3 GPUs of class H100 in work that is not preemptible, above its guarantee",
        ),
        (0, job("j", "cls", gpus=3), {"A100": 3 * G}, (True, False), "within"),
        (0, job("j", "cls", gpus=3, preemptible=True), {"H100": 3 * G}, (True, True), "borrowing"),
        (
            0,
            job("j", "cls", gpus=4, preemptible=True),
            {"H100": 4 * G},
            (False, False),
            "4 GPUs of class H100, above its burst limit of 3",
        ),
        # Class-only guarantees: nothing guaranteed on other classes.
        (
            0,
            job("j", "h-only"),
            {"A100": G},
            (False, False),
            "of class A100 in work that is not preemptible, above its guarantee of 0",
        ),
        (0, job("j", "h-only"), {"H100": G}, (True, False), "within"),
        # A team without a quota entry: preemptible work only, on idle capacity.
        (0, job("j", "nobody"), {"A100": G}, (False, False), "above its guarantee of 0"),
        (0, job("j", "nobody", gpus=16, preemptible=True), {"A100": 8 * G, "H100": 8 * G}, (True, True), "borrowing"),
        # A MIG slice counts as its compute slices / 7; an "any" entry in the units is the total.
        (4, job("j", "g4"), {"A100": 1000}, (False, False), "4.14 GPUs"),
        (3, job("j", "g4"), {ANY: G, "A100": G}, (True, False), "within"),
        (3, job("j", "g4"), {"A100": 0, "H100": G}, (True, False), "within"),
    ],
)
def test_admission(held: int, pending: Job, units: dict[str, int], expected: tuple[bool, bool], reason: str) -> None:
    running = [run(job(f"{pending.team}-{i}", pending.team), on("a1", i)) for i in range(held)]
    _, fs = world(NODES, QUOTAS, running)
    admission = fs.admit(pending, units)
    assert (admission.ok, admission.borrowing) == expected
    assert reason in admission.reason
    assert fs.admit(pending, units) == admission  # quotas are cached per team: asking twice changes nothing


@pytest.mark.parametrize(
    ("held", "pending", "expected", "reason"),
    [
        # The team's preemptible work does not count against the guarantee for its non-preemptible work: that
        # work is admitted, and the preemptible work becomes the borrowed one (as KAI's proportion plugin does).
        (4, job("j", "g4", gpus=2), (True, False), "within the team's guarantee; its preemptible work is borrowing"),
        # All its work still counts against the burst limit.
        (4, job("j", "g4", gpus=3), (False, False), "team g4 would hold 7 GPUs, above its burst limit of 6"),
        # Production may go above the guarantee, up to the burst limit.
        (0, job("j", "g4", gpus=6, priority=Priority.PRODUCTION), (True, True), "production above the team's"),
        (0, job("j", "g4", gpus=7, priority=Priority.PRODUCTION), (False, False), "above its burst limit of 6"),
        (0, job("j", "g4", gpus=4, priority=Priority.PRODUCTION), (True, False), "within the team's guarantee"),
    ],
)
def test_admission_counts_non_preemptible_work_against_the_guarantee(
    held: int, pending: Job, expected: tuple[bool, bool], reason: str
) -> None:
    running = [run(job(f"p{i}", pending.team, preemptible=True), on("a1", i)) for i in range(held)]
    _, fs = world(NODES, QUOTAS, running)
    admission = fs.admit(pending, {"A100": pending.request.gpus * G})  # type: ignore[operator]
    assert (admission.ok, admission.borrowing) == expected
    assert reason in admission.reason


def test_admission_without_fairness_accepts_everything() -> None:
    _, fs = world(NODES, QUOTAS, policy=Policy(fairness=False))
    assert fs.admit(job("j", "nobody", gpus=99), {"A100": 99 * G}) == Admission(True, False, "fair share is off")


# -- usage questions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("running", "team_name", "gpu_class", "expected"),
    [
        ([], "g4", ANY, True),
        (["a1", "a1", "a1"], "g4", ANY, True),
        (["a1"] * 4, "g4", ANY, False),
        ([], "nobody", ANY, False),  # guarantee 0: never under it
        (["h1", "h1"], "cls", "H100", False),  # class guarantee reached
        (["h1", "h1"], "cls", "A100", True),  # A100 is bounded by the overall figure only
        (["h1", "h1"], "cls", ANY, True),
        ([], "h-only", "A100", False),
        ([], "h-only", "H100", True),
    ],
)
def test_under_guarantee(running: list[str], team_name: str, gpu_class: str, expected: bool) -> None:
    held = [run(job(f"j{i}", team_name), on(n, i)) for i, n in enumerate(running)]
    _, fs = world(NODES, QUOTAS, held)
    assert fs.under_guarantee(team_name, gpu_class) is expected


def test_usage_share_and_borrowing() -> None:
    mig = Node(name="m1", gpu_model=A100, gpu_count=1, mig=((("3g.40gb", 0), ("4g.40gb", 4)),))
    held = [
        *ones("g4", "a1", 6),
        run(job("m", "g4", preemptible=True), ((Slot(node="m1", gpu=0, mig_profile="3g.40gb", mig_start=0),),)),
        run(job("h", "g4", preemptible=True), on("h1", 0)),
    ]
    state, fs = world([*NODES, mig], QUOTAS, held)
    assert fs.usage("g4") == {"A100": 6 * G + 3000, "H100": G, ANY: 7 * G + 3000}
    assert fs.borrowing_units("g4") == 3 * G + 3000
    assert fs.borrowing_units("nobody") == 0
    assert fs.dominant_share("g4") == pytest.approx((6 * G + 3000) / (9 * G))
    assert fs.dominant_share("nobody") == 0.0
    assert placement_units(state, state.placed["m"]) == {"A100": 3000}
    assert fs.capacity == {"A100": 9 * G, "H100": 8 * G}


@pytest.mark.parametrize(("units", "text"), [(G, "1"), (3000, "0.43"), (4 * G + 1000, "4.14"), (0, "0")])
def test_gpus_text(units: int, text: str) -> None:
    assert gpus_text(units) == text


# -- borrowed jobs ------------------------------------------------------------------------------------------


def _r(job_id: str, gpus: int = 1, started_at: float = 0.0, model: str = "a1", first: int = 0, **kw: object) -> Running:
    return run(job(job_id, "t", gpus=gpus, **kw), on(model, *range(first, first + gpus)), started_at=started_at)


@pytest.mark.parametrize(
    ("guaranteed", "running", "borrowed"),
    [
        ({"any": 2}, [_r("x", first=0), _r("y", first=1)], []),
        # Fill order: non-preemptible first, then priority high→low, then earlier start, then id.
        ({"any": 1}, [_r("p", first=0, preemptible=True), _r("np", first=1)], ["p"]),
        (
            {"any": 1},
            [
                _r("lo", first=0, priority=Priority.LOW, preemptible=True),
                _r("hi", first=1, priority=Priority.HIGH, preemptible=True),
            ],
            ["lo"],
        ),
        (
            {"any": 1},
            [
                _r("late", first=0, started_at=50, preemptible=True),
                _r("early", first=1, started_at=10, preemptible=True),
            ],
            ["late"],
        ),
        ({"any": 1}, [_r("b", first=0, preemptible=True), _r("a", first=1, preemptible=True)], ["b"]),
        # First fit: a job that does not fit is skipped, a later smaller one may still fill the guarantee.
        (
            {"any": 4},
            [
                _r("two", 2, first=0, started_at=1),
                _r("four", 4, first=2, started_at=2, preemptible=True),
                _r("one", 1, first=6, started_at=3, preemptible=True),
            ],
            ["four"],
        ),
        # Class guarantees fill per class.
        (
            {"any": 4, "H100": 1},
            [
                _r("h0", model="h1", first=0, preemptible=True),
                _r("h1", model="h1", first=1, preemptible=True),
                _r("a0", first=0),
            ],
            ["h1"],
        ),
        ({}, [_r("x", first=0, preemptible=True)], ["x"]),
    ],
)
def test_borrowed_jobs(guaranteed: dict[str, float], running: list[Running], borrowed: list[str]) -> None:
    _, fs = world(NODES, [team("t", guaranteed)], running)
    assert fs.borrowed_jobs("t") == borrowed


def test_borrowed_jobs_follow_the_state() -> None:
    state, fs = world(NODES, [team("t", {"any": 2})], [_r(f"j{i}", first=i, started_at=i) for i in range(4)])
    assert fs.borrowed_jobs("t") == ["j2", "j3"]
    state.remove("j0")  # usage changed: the fill is recomputed
    assert fs.borrowed_jobs("t") == ["j3"]
    assert fs.running_jobs("t") == ("j1", "j2", "j3")
    assert fs.teams_with_running() == ("t",)
    assert fs.borrowed_jobs("nobody") == []


def test_borrowed_jobs_ignore_work_bound_this_cycle_and_follow_undo() -> None:
    state, fs = world(NODES, [team("t", {"any": 2})], [_r(f"j{i}", first=i, started_at=i) for i in range(4)])
    assert fs.borrowed_jobs("t") == ["j2", "j3"]
    state.place(job("new", "t"), on("a1", 5))  # bound this cycle: not running, no change to the fill
    assert fs.borrowed_jobs("t") == ["j2", "j3"]
    statement = state.begin()
    state.remove("j1")
    assert fs.borrowed_jobs("t") == ["j3"]
    statement.rollback()  # j1 is back: the fill is what it was
    assert fs.borrowed_jobs("t") == ["j2", "j3"]


# -- order --------------------------------------------------------------------------------------------------

ORDER_TEAMS = [
    team("under", {"any": 8}),
    team("heavy", {"any": 1}),
    team("light", {"any": 1}),
    team("double", {"any": 1}, weight=2.0),
]


def _order_world(policy: Policy | None = None) -> FairShare:
    # under holds 4 of its 8 (share 4/8 = 0.5); heavy holds 4, light 1, double 3 (share 3/8 ÷ 2 = 0.1875).
    held = [
        *[run(job(f"u{i}", "under"), on("a1", i)) for i in range(4)],
        *[run(job(f"h{i}", "heavy", preemptible=True), on("h1", i)) for i in range(4)],
        run(job("l0", "light"), on("a1", 4)),
        *[run(job(f"d{i}", "double", preemptible=True), on("h1", 4 + i)) for i in range(3)],
    ]
    return world(NODES, ORDER_TEAMS, held, policy=policy or Policy())[1]


def _ids(jobs: list[Job]) -> list[str]:
    return [j.id for j in jobs]


@pytest.mark.parametrize(
    ("pending", "expected"),
    [
        # Under-guarantee first whatever its share; then dominant share / weight (light 1/8 < double 0.1875 <
        # heavy 0.5).
        ([job("H", "heavy"), job("D", "double"), job("L", "light"), job("U", "under")], ["U", "L", "D", "H"]),
        # Production first.
        ([job("H", "heavy", priority=Priority.PRODUCTION), job("U", "under")], ["H", "U"]),
        # Within a team: priority, then rank, then submit time, then id.
        (
            [
                job("n-late", "light", submitted_at=9),
                job("n-early", "light", submitted_at=1),
                job("hi", "light", priority=Priority.HIGH),
                job("ranked", "light", rank=-1, submitted_at=50),
                job("b", "light", priority=Priority.LOW),
                job("a", "light", priority=Priority.LOW),
            ],
            ["hi", "ranked", "n-early", "n-late", "a", "b"],
        ),
        # A class-pinned job of a team over its class guarantee does not count as under.
        ([job("C", "under", gpu_model="H100"), job("L", "light")], ["C", "L"]),
        ([], []),
    ],
)
def test_order(pending: list[Job], expected: list[str]) -> None:
    fs = _order_world()
    assert _ids(fs.order(pending, now=0.0)) == expected
    assert _ids(fs.order(list(reversed(pending)), now=0.0)) == expected


def test_order_uses_the_class_guarantee_of_a_pinned_job() -> None:
    teams = [team("c", {"any": 8, "H100": 1}), team("x", {"any": 8})]
    held = [run(job("c0", "c"), on("h1", 0)), *[run(job(f"x{i}", "x"), on("a1", i)) for i in range(4)]]
    _, fs = world(NODES, teams, held)
    # c is under overall but at its H100 guarantee: its H100 job waits behind x's job (x is under).
    assert _ids(fs.order([job("CH", "c", gpu_model="H100"), job("X", "x")], 0.0)) == ["X", "CH"]
    assert _ids(fs.order([job("CA", "c", gpu_model="A100"), job("X", "x")], 0.0)) == ["CA", "X"]


def test_order_without_fairness_is_priority_then_fifo() -> None:
    fs = _order_world(Policy(fairness=False))
    pending = [
        job("late", "under", submitted_at=5),
        job("hi", "heavy", priority=Priority.HIGH, submitted_at=9),
        job("early", "light", submitted_at=1),
    ]
    assert _ids(fs.order(pending, 0.0)) == ["hi", "early", "late"]


def test_iteration_rekeys_the_team_it_just_served() -> None:
    # Two empty teams of equal weight: placing one job moves its team behind the other.
    state, fs = world(NODES, [team("a", {"any": 1}), team("b", {"any": 1})])
    pending = [job("a1", "a", submitted_at=0), job("a2", "a", submitted_at=1), job("b1", "b", submitted_at=2)]
    seen = []
    for index, next_job in enumerate(fs.iter_pending(pending, 0.0)):
        seen.append(next_job.id)
        state.place(next_job, on("a1", index))
    assert seen == ["a1", "b1", "a2"]


def test_iteration_follows_changes_reported_for_other_teams() -> None:
    # b is far above a; an eviction of b's work mid-iteration (reported with changed) moves b first.
    held = [run(job(f"b{i}", "b", preemptible=True), on("a1", i)) for i in range(6)]
    state, fs = world(NODES, [team("a"), team("b")], [*held, run(job("a0", "a"), on("h1", 0))])
    pending = [job("A1", "a", submitted_at=0), job("A2", "a", submitted_at=1), job("B1", "b", submitted_at=2)]
    iterator = fs.iter_pending(pending, 0.0)
    assert next(iterator).id == "A1"
    for i in range(6):
        state.remove(f"b{i}")
    fs.changed("b")
    assert next(iterator).id == "B1"
    assert next(iterator).id == "A2"
    assert next(iterator, None) is None
    assert fs._watchers == []


def test_iteration_catches_unreported_growth() -> None:
    # b grows behind the iteration's back (not reported): its stale heap entry is re-keyed when popped.
    state, fs = world(NODES, [team("a"), team("b")])
    pending = [job("A0", "a", submitted_at=0), job("B1", "b", submitted_at=1), job("A1", "a", submitted_at=2)]
    iterator = fs.iter_pending(pending, 0.0)
    assert next(iterator).id == "A0"
    state.place(pending[0], on("a1", 0))
    for i in range(3):
        state.place(job(f"b{i}", "b"), on("a1", 1 + i))
    assert [j.id for j in iterator] == ["A1", "B1"]


def test_weight_zero_or_negative_is_served_last() -> None:
    teams = [team("zero", weight=0.0), team("one")]
    held = [run(job("z0", "zero"), on("a1", 0)), run(job("o0", "one"), on("a1", 1)), run(job("o1", "one"), on("a1", 2))]
    _, fs = world(NODES, teams, held)
    assert _ids(fs.order([job("Z", "zero"), job("O", "one")], 0.0)) == ["O", "Z"]
    assert fs.weight("missing") == 1.0


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [(None, ANY), (H100, "H100"), ("A100", "A100"), (A100, "A100"), ("Tesla-V100", "Tesla-V100")],
)
def test_job_class_follows_the_constraint(constraint: str | None, expected: str) -> None:
    assert job_class(job("x", "t", gpu_model=constraint)) == expected


@pytest.mark.parametrize(
    ("running", "team_name", "expected"),
    [
        (["a1"] * 4, "g4", False),
        (["a1"] * 5, "g4", True),
        (["h1"] * 3, "cls", True),  # over its H100 guarantee, within the overall one
        (["a1"] * 3, "cls", False),
        (["a1"], "h-only", True),  # A100 is not guaranteed at all
        ([], "nobody", False),
    ],
)
def test_over_guarantee(running: list[str], team_name: str, expected: bool) -> None:
    held = [run(job(f"j{i}", team_name), on(n, i)) for i, n in enumerate(running)]
    _, fs = world(NODES, QUOTAS, held)
    assert fs.over_guarantee(team_name) is expected


def test_lower_preemptible_lists_still_placed_jobs_lowest_priority_first() -> None:
    held = [
        run(job("lo", "t", priority=Priority.LOW, preemptible=True), on("a1", 0)),
        run(job("lo-gone", "t", priority=Priority.LOW, preemptible=True), on("a1", 1)),
        run(job("hi", "t", priority=Priority.HIGH, preemptible=True), on("a1", 2)),
        run(job("no", "t", priority=Priority.LOW), on("a1", 3)),
        run(job("norm", "t", preemptible=True), on("a1", 4)),
    ]
    state, fs = world(NODES, [team("t")], held)
    state.remove("lo-gone")
    assert fs.lower_preemptible("t", Priority.PRODUCTION) == ("lo", "norm", "hi")
    assert fs.lower_preemptible("t", Priority.NORMAL) == ("lo",)
    assert fs.lower_preemptible("t", Priority.LOW) == ()
    assert fs.lower_preemptible("other", Priority.HIGH) == ()


@pytest.mark.parametrize(("weights", "split"), [((1.0, 2.0), (4, 8)), ((1.0, 1.0), (6, 6)), ((3.0, 1.0), (9, 3))])
def test_borrowed_capacity_is_split_by_weight(weights: tuple[float, float], split: tuple[int, int]) -> None:
    # Twelve idle A100s, two teams with no guarantee, each with more preemptible work than fits.
    state, fs = world([node("a1"), node("a2", gpus=4)], [team("x", weight=weights[0]), team("y", weight=weights[1])])
    pending = [job(f"{t}{i:02}", t, preemptible=True) for t in "xy" for i in range(12)]
    free = [(n, g) for n, count in (("a1", 8), ("a2", 4)) for g in range(count)]
    for next_job in fs.iter_pending(pending, 0.0):
        if free and fs.admit(next_job, {"A100": G}).ok:
            state.place(next_job, on(*free.pop(0)))
    assert (state.team_units("x")[ANY] // G, state.team_units("y")[ANY] // G) == split


def test_running_jobs_drop_removed_jobs_in_fill_order_and_feed_the_borrowed_fill() -> None:
    teams = [team("t", {"any": 2})]
    state, _ = world(NODES, teams, [_r(f"j{i}", first=i, started_at=i) for i in range(5)])
    fs = RememberingFairShare(teams, state, POLICY, Memo())  # the cycle's, with the speed-ups on
    everyone = fs.running_jobs("t")
    assert everyone == ("j0", "j1", "j2", "j3", "j4")
    assert fs.running_jobs("t") is everyone  # nothing removed: the stored tuple, no rebuild
    assert fs.running_jobs("nobody") == ()
    state.remove("j3")
    state.remove("j0")
    running = fs.running_jobs("t")
    assert running == ("j1", "j2", "j4")
    assert fs.running_jobs("t") is running  # same jobs missing: the filtered tuple is reused
    state.remove("j4")
    assert fs.running_jobs("t") == ("j1", "j2")
    state.place(job("j4", "t"), on("a1", 4))  # back again (as an undo would): the earlier answer returns
    running = fs.running_jobs("t")
    assert running == ("j1", "j2", "j4")
    # Handing the scan over gives the same fill as letting borrowed_jobs scan on its own.
    assert fs.borrowed_jobs("t", running) == fs.borrowed_jobs("t") == ["j4"]
    assert fs.borrowed("t") == ("j4",)


def test_running_spots_are_the_distinct_nodes_and_grains_of_a_running_job() -> None:
    two_nodes = run(job("x", "t", gpus=2), (on("a1", 0)[0], on("a1", 1)[0], on("h1", 0)[0]))
    state, _ = world(NODES, [team("t", {"any": 8})], [two_nodes])
    fs = RememberingFairShare([team("t", {"any": 8})], state, POLICY, Memo())
    assert fs.running_slot_nodes("x") == (("a1", False), ("h1", False))
    assert fs.running_slot_nodes("x") is fs.running_slot_nodes("x")  # cached


@pytest.mark.parametrize(
    ("guaranteed", "borrowed"),
    [
        # The H100 class is full after h0; the A100 job still fits overall, so the class check skips h1 only.
        ({"any": 3, "H100": 1}, ["h1"]),
        # The overall limit stops a job before any class is looked at.
        ({"any": 1, "H100": 2}, ["h1", "a0"]),
        # Class-only guarantee: an unlisted class is guaranteed nothing.
        ({"H100": 2}, ["a0"]),
    ],
)
def test_borrowed_fill_matches_the_admission_rule(guaranteed: dict[str, float], borrowed: list[str]) -> None:
    running = [
        _r("h0", model="h1", first=0, started_at=1),
        _r("h1", model="h1", first=1, started_at=2),
        _r("a0", first=0, started_at=3),
    ]
    _, fs = world(NODES, [team("t", guaranteed)], running)
    assert fs.borrowed_jobs("t") == borrowed
    # The same first-fit written with exceeds, the rule admission uses.
    limits, filled, expected = fs.guarantee("t"), {}, []
    for job_id in fs.running_jobs("t"):
        units = fs.running_units(job_id)
        if exceeds(limits, filled, units) is None:
            for gpu_class, amount in units.items():
                filled[gpu_class] = filled.get(gpu_class, 0) + amount
        else:
            expected.append(job_id)
    assert expected == borrowed


def test_a_refusal_writes_its_reason_when_read_and_compares_by_it() -> None:
    calls: list[int] = []

    def reason() -> str:
        calls.append(1)
        return "above the guarantee"

    lazy = Admission(False, False, reason)
    assert not calls
    assert lazy == Admission(False, False, "above the guarantee") and calls == [1]
    assert lazy.reason == "above the guarantee" and calls == [1]  # written once
    assert hash(lazy) == hash(Admission(False, False, "above the guarantee"))
    assert repr(lazy) == "Admission(ok=False, borrowing=False, reason='above the guarantee')"
    assert lazy != "above the guarantee"
