"""A team's standing in the fair order, kept while its usage stands still (speedups.fairshare: borrowed_share,
fits_guarantee, team_key), is the plain rule's before and after the team's usage changes."""

from __future__ import annotations

from scheduler.core import Policy
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.snapshot import Job, Request, Slot
from scheduler.core.model.vocabulary import Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.rules.fairshare import FairShare, job_key
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


def test_the_team_key_kept_per_usage_is_the_rules_before_and_after_changes() -> None:
    """speedups.fairshare.team_key: the tier and share kept per (team, production, head's size) while the team's
    usage stands; a place, a rolled-back Statement and a state without an index answer as the rule does."""
    snapshot = synthetic_snapshot(ClusterShape(12, 60, seed=4, teams=3))
    state = IndexedClusterState(snapshot, NOW)
    plain = FairShare(snapshot.teams, state, Policy())
    fast = RememberingFairShare(snapshot.teams, state, Policy(), Memo())
    teams = [team.name for team in snapshot.teams] + ["nobody"]
    heads = [Job(id=f"h{gpus}", team="x", request=Request(gpus=gpus), submitted_at=gpus) for gpus in (1, 4, 8)]
    heads.append(Job(id="m", team="x", request=Request(gpus=1), gpu_model="H100"))
    heads.append(Job(id="p", team="x", request=Request(gpus=1), priority=Priority.PRODUCTION))

    def same() -> None:
        for team in teams:
            for head in heads:
                assert fast.team_key(team, head) == plain.team_key(team, head)
                assert fast.team_key(team, head, job_key(head)) == plain.team_key(team, head, job_key(head))

    same()
    same()  # answered from memory
    idle = [gpu for gpu in state.gpus.values() if gpu.idle and not gpu.layout]
    for gpu in idle[:24]:
        state.place(Job(id=f"more-{gpu.key}", team=teams[0], request=Request(gpus=1)), ((Slot(*gpu.key),),))
        same()
    statement = state.begin()
    state.place(Job(id="undone", team=teams[1], request=Request(gpus=1)), ((Slot(*idle[24].key),),))
    same()
    statement.rollback()
    same()
    assert plain.team_key(teams[0], heads[0])[0] == 2, "the team must come to borrow, or the comparison proves little"
    bare = RememberingFairShare(snapshot.teams, ClusterState(snapshot), Policy(), Memo())  # no index: the rule's
    assert bare.team_key(teams[0], heads[0]) == FairShare(snapshot.teams, ClusterState(snapshot), Policy()).team_key(
        teams[0], heads[0]
    )


def test_the_last_key_of_a_head_is_handed_out_again_only_at_the_same_usage() -> None:
    """speedups.fairshare.team_key: the fair order re-checks an entry before serving it; the same head at the same
    usage gets the key last handed out, and a changed usage (an unreported bind, say) or another head a fresh one —
    the rule's."""
    snapshot = synthetic_snapshot(ClusterShape(12, 60, seed=4, teams=3))
    state = IndexedClusterState(snapshot, NOW)
    plain = FairShare(snapshot.teams, state, Policy())
    fast = RememberingFairShare(snapshot.teams, state, Policy(), Memo())
    team = snapshot.teams[0].name
    head = Job(id="h", team=team, request=Request(gpus=1))
    other = Job(id="o", team=team, request=Request(gpus=8), submitted_at=1.0)
    first = fast.team_key(team, head)
    assert fast.team_key(team, head) is first  # handed out again
    keys = {first}
    for gpu in [gpu for gpu in state.gpus.values() if gpu.idle and not gpu.layout][:24]:
        state.place(Job(id=f"more-{gpu.key}", team=team, request=Request(gpus=1)), ((Slot(*gpu.key),),))
        assert fast.team_key(team, head) == plain.team_key(team, head)
        assert fast.team_key(team, other) == plain.team_key(team, other)
        assert fast.team_key(team, head) == plain.team_key(team, head)
        keys.add(fast.team_key(team, head))
    assert len({key[:2] for key in keys}) > 2, "the standing must move, or the comparison proves little"


def test_a_running_jobs_units_summed_from_its_slot_ops_are_the_rules() -> None:
    """speedups.fairshare.running_units: from the slot ops the state kept, the same classes and units, in the same
    order, as ClusterState.job_units — whole GPUs, MIG instances, shares and gangs — and a job no longer placed
    holds nothing."""
    snapshot = synthetic_snapshot(ClusterShape(40, 0, seed=5, teams=3))
    state = IndexedClusterState(snapshot, NOW, Memo())
    plain = FairShare(snapshot.teams, state, Policy())
    fast = RememberingFairShare(snapshot.teams, state, Policy(), Memo())
    slots = [state.placed[job_id] for job_id in sorted(state.running)]
    assert any(s[0][0].mig_profile for s in slots) and any(0 < s[0][0].milli < 1000 for s in slots)
    assert any(len(s) > 1 or len(s[0]) > 1 for s in slots), "MIG, shares and multi-GPU jobs must be there"
    for job_id in sorted(state.running):
        assert list(fast.running_units(job_id).items()) == list(plain.running_units(job_id).items()) != []
    gone = sorted(state.running)[0]
    state.remove(gone)
    fresh = RememberingFairShare(snapshot.teams, state, Policy(), Memo())
    assert fresh.running_units(gone) == plain.running_units(gone) == {}
