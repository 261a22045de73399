"""A team's standing in the fair order, kept while its usage stands still (speedups.fairshare: borrowed_share,
fits_guarantee), is the plain rule's before and after the team's usage changes."""

from __future__ import annotations

from scheduler.core import Policy
from scheduler.core.model.snapshot import Job, Request, Slot
from scheduler.core.placement import IndexedClusterState
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.speedups import Memo
from scheduler.core.speedups.fairshare import RememberingFairShare
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot


def test_the_standing_follows_the_usage() -> None:
    snapshot = synthetic_snapshot(ClusterShape(12, 60, seed=4, teams=3))
    state = IndexedClusterState(snapshot, NOW)
    plain = FairShare(snapshot.teams, state, Policy())
    fast = RememberingFairShare(snapshot.teams, state, Policy(), Memo())
    teams = [team.name for team in snapshot.teams] + ["nobody"]
    heads = [Job(id="h", team="x", request=Request(gpus=gpus)) for gpus in (1, 4, 8)]
    heads.append(Job(id="m", team="x", request=Request(gpus=1), gpu_model="H100"))

    def same() -> None:
        for team in teams:
            assert fast.borrowed_share(team) == plain.borrowed_share(team)
            for head in heads:
                assert fast.fits_guarantee(team, head) == plain.fits_guarantee(team, head)

    same()
    same()  # answered from memory
    for gpu in [gpu for gpu in state.gpus.values() if gpu.idle and not gpu.layout][:24]:
        state.place(Job(id=f"more-{gpu.key}", team=teams[0], request=Request(gpus=1)), ((Slot(*gpu.key),),))
        same()
    assert fast.borrowed_share(teams[0]) > 0, "the team must come to borrow, or the comparison proves little"
    assert not fast.fits_guarantee(teams[0], heads[2])
