"""The best MIG instance per group and profile, kept until the group's GPUs change signature (placement/mig.py,
``best_of``; the index's ``mig_refiled`` and ``mig_best`` tables): with the tables remembering, every placement is
the one the plain search finds, through binds, frees and rolled-back Statements."""

from __future__ import annotations

import random

import pytest

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Request, Slots
from scheduler.core.model.tables import FORGET
from scheduler.core.model.vocabulary import JobKind
from scheduler.core.placement import IndexedClusterState, find_slots
from scheduler.core.speedups.memo import Memo
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot

POLICY = Policy()
PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


@pytest.mark.parametrize("seed", [1, 2])
def test_mig_placements_are_the_plain_searchs(seed: int) -> None:
    snapshot = synthetic_snapshot(ClusterShape(60, 0, seed=seed, teams=2))
    fast, plain = IndexedClusterState(snapshot, NOW, Memo()), IndexedClusterState(snapshot, NOW, FORGET)
    rng = random.Random(seed)
    placed: list[str] = []
    answers: list[Slots | None] = []
    for number in range(400):
        profile = rng.choice(PROFILES)
        request = Request(mig_profile=profile) if rng.random() < 0.7 else Request(memory_gib=rng.choice([8, 18, 35]))
        job = Job(id=f"m{number}", team="team00", request=request, kind=JobKind.INFERENCE)
        got = find_slots(fast, job, POLICY)
        assert got == find_slots(plain, job, POLICY), job
        answers.append(got)
        roll = rng.random()
        if roll < 0.2 and placed:  # capacity freed
            gone = placed.pop(rng.randrange(len(placed)))
            fast.remove(gone)
            plain.remove(gone)
        elif roll < 0.3 and got is not None:  # placed, then rolled back: the state as it was
            for state in (fast, plain):
                statement = state.begin()
                state.place(job, got)
                statement.rollback()
        elif got is not None:
            fast.place(job, got)
            plain.place(job, got)
            placed.append(job.id)
    assert sum(answer is not None for answer in answers) > 100, "MIG jobs must bind, or the comparison proves little"
    assert fast.index is not None and fast.index.mig_best, "the best instances must have been kept"
