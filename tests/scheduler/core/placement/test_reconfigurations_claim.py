"""What reconfigurations under way offer a waiting job (placement/reconfigurations.py, Reconfigurations._claim)."""

from __future__ import annotations

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Snapshot, Team
from scheduler.core.model.vocabulary import JobKind
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.reconfigurations import Reconfigurations
from scheduler.core.rules.fairshare import FairShare

A100 = "A100-SXM4-80GB"
NOW = 1_000.0
POLICY = Policy()
BALANCED = (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))


def test_counting_offers_stops_at_what_is_wanted_and_a_shortfall_counts_only_when_partial() -> None:
    changing = Node("c1", A100, 1, mig=(BALANCED,), reconfiguring_until=NOW + 300)  # offers two 1g.10gb
    teams = (Team("a", guaranteed=(("any", 8.0),)),)
    state = IndexedClusterState(Snapshot(nodes=(changing,), teams=teams), NOW)
    reconfigurations = Reconfigurations(state, FairShare(teams, state, POLICY), POLICY, NOW, (), {}, ())
    job = Job(id="p", team="a", request=Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE, replicas=3)
    assert reconfigurations._claim(job, 1, partial=False, claim=False) == 1
    assert reconfigurations._claim(job, 3, partial=False, claim=False) == 0
    assert reconfigurations._claim(job, 3, partial=True, claim=False) == 2
    assert not reconfigurations.blockers  # counting promises nothing
    assert reconfigurations._claim(job, 3, partial=True) == 2
    assert reconfigurations.blockers["p"].kind == "reconfiguring"
    assert reconfigurations._claim(job, 1, partial=True, claim=False) == 0  # both are promised now
