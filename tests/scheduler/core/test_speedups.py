"""The cycle's speed-ups change nothing it decides: whole plans with every shortcut and cache switched off
equal the plans with them on (issue 3 §12). A stale cache, or a shortcut that promised a wrong answer, makes
these plans differ."""

from __future__ import annotations

import pytest

from scheduler.core import Policy, explain, plan_cycle, repartition
from scheduler.core.fairshare import FairShare
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.mix import DemandMix
from scheduler.core.placement.relayout import Relayout
from scheduler.core.preemption import NO_SHORTCUTS, Shortcuts
from scheduler.core.state import Job
from scheduler.core.trial import TrialPlacement
from scheduler.core.victims import Candidate, Victims
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot

SHAPES = [
    ClusterShape(40, 600, seed=1),
    ClusterShape(48, 900, seed=2, teams=4),  # heavy pressure: few teams, long queues, much preemption
    ClusterShape(24, 700, seed=3, teams=3, gpus_per_node=4),
    ClusterShape(200, 2000, seed=5),  # production searches over large pools, MIG changes on several nodes
]


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch off every speed-up whose answers could go stale: shortcuts (node models included), team candidate
    lists, fill resumes, the share Δ memo, the admitted grains, the placements remembered per index version, the
    layout-change answers and the idle classes kept by the index."""

    def no_shortcuts(self: TrialPlacement) -> Shortcuts:
        return NO_SHORTCUTS

    def scan_always(self: Victims, team: str, job: object, allow_reclaim: bool) -> list[Candidate]:
        self._lists.clear()
        self._grounds.clear()
        return original_of_team(self, team, job, allow_reclaim)  # type: ignore[arg-type]

    def fill_afresh(self: FairShare, team: str, running: tuple[str, ...]) -> tuple[str, ...]:
        self._fill_trace.pop(team, None)
        return original_fill(self, team, running)

    def fresh_deltas(self: DemandMix, model: str, milli: int) -> dict[int, int]:
        return {}

    def admitted_afresh(
        self: FairShare, job: Job, outcomes: tuple[tuple[str, int], ...], usage: object = None
    ) -> frozenset[tuple[str, int]]:
        now = dict(self.state.usage.get(job.team, {}))  # at the usage now, asked afresh
        return original_admitted(self, job, outcomes, now if usage is None else usage)  # type: ignore[arg-type]

    def never_still(self: Relayout, freed: int, answer: bool, witness: str | None) -> bool:
        return False

    class Forgetful(dict):  # type: ignore[type-arg]
        def get(self, key: object, default: object = None) -> object:
            return default

    def forgetful_index(self: CapacityIndex, *args: object, **kwargs: object) -> None:
        original_index(self, *args, **kwargs)
        self.found = Forgetful()  # placements per shape and index version, searched again every time

    def forgetful_init(self: Relayout, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)
        self._offer_lists = Forgetful()  # what changing nodes offer, rescanned at every question
        self._unit_scans = Forgetful()

    original_init = Relayout.__init__
    original_index = CapacityIndex.__init__
    monkeypatch.setattr(CapacityIndex, "__init__", forgetful_index)
    monkeypatch.setattr(Relayout, "_still", never_still)
    monkeypatch.setattr(Relayout, "__init__", forgetful_init)
    monkeypatch.setattr(repartition, "_idle_classes", repartition._scanned_classes)
    original_of_team = Victims.of_team
    original_fill = FairShare._fill
    original_admitted = FairShare.admitted
    monkeypatch.setattr(TrialPlacement, "shortcuts", no_shortcuts)
    monkeypatch.setattr(Victims, "of_team", scan_always)
    monkeypatch.setattr(FairShare, "_fill", fill_afresh)
    monkeypatch.setattr(DemandMix, "share_deltas", fresh_deltas)
    monkeypatch.setattr(FairShare, "admitted", admitted_afresh)
    monkeypatch.setattr(explain._Profile, "remember_floors", False)  # every ETA scan from now


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.nodes}x{s.gpus_per_node}-{s.pending}-t{s.teams}")
def test_plans_are_the_same_with_and_without_the_speedups(shape: ClusterShape, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = synthetic_snapshot(shape)
    fast = plan_cycle(snapshot, Policy(), NOW)
    assert fast.evictions, "the shape must exercise preemption, or the comparison proves little"
    with monkeypatch.context() as patch:
        _plain(patch)
        plain = plan_cycle(snapshot, Policy(), NOW)
    assert fast == plain
