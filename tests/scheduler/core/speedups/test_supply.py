"""speedups.supply: the ETA replay's pools built from each plain GPU's empty time give the rule's releases — the
same (time, units) pairs for every GPU model and shape, holders skipped or not, nodes ready now or later — and so
the same ETAs (docs/benchmarks/scale.md, 2026-12-06)."""

from __future__ import annotations

import random

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.model.explain import SHARE, WHOLE, EtaEstimator
from scheduler.core.placement import IndexedClusterState
from scheduler.core.speedups.memo import Memo
from scheduler.core.speedups.supply import PooledSupply, _whole_gpu
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot


def _pair(seed: int) -> tuple[EtaEstimator, PooledSupply, IndexedClusterState]:
    snapshot = synthetic_snapshot(ClusterShape(40, 200, seed=seed, teams=4))
    state = IndexedClusterState(snapshot, NOW)
    rng = random.Random(seed)
    ends = {job_id: NOW + rng.choice([0.0, 60.0, 600.0, 3600.0, rng.uniform(0, 9000)]) for job_id in state.placed}
    skipped = {job_id for job_id in sorted(state.placed) if rng.random() < 0.1}
    ready = {name: NOW + rng.choice([0.0, 0.0, 0.0, 120.0, 4000.0]) for name in sorted(state.nodes)}
    args = (state, NOW, ready, ends.__getitem__, skipped.__contains__, 300.0, 10.0)
    return EtaEstimator(*args, Memo()), PooledSupply(*args, Memo()), state


def test_the_releases_are_the_rules_for_every_model_and_shape() -> None:
    for seed in (1, 2, 3):
        plain, pooled, state = _pair(seed)
        models = sorted({node.gpu_model for node in state.nodes.values()})
        kinds = {"plain": 0, "mig": 0, "shared": 0, "held": 0}
        for gpu in state.gpus.values():
            kind = "mig" if gpu.layout else "shared" if gpu.shares else "held" if gpu.whole else "plain"
            kinds[kind] += 1
        assert all(kinds.values()), f"every kind of GPU must be there, or the comparison proves little: {kinds}"
        for model in models:
            shapes = [WHOLE, SHARE, *GPU_MODEL_BY_NAME[model].profiles()]
            for shape in shapes:
                assert sorted(pooled._releases(model, shape)) == sorted(plain._releases(model, shape)), (model, shape)
                assert pooled._releases(model, shape) is pooled._releases(model, shape)  # built once


def test_the_etas_are_the_rules() -> None:
    plain, pooled, state = _pair(7)
    models = tuple(sorted({node.gpu_model for node in state.nodes.values()}))
    answers = []
    for units, duration_s, later in [(7000, 600.0, False), (14000, 3600.0, True), (3000, 60.0, False)] * 4:
        for shape in (WHOLE, SHARE, "1g.10gb", "7g.80gb"):
            for pool in (models, models[:1]):
                expected = plain.capacity_eta(pool, shape, units, duration_s, later=later)
                assert pooled.capacity_eta(pool, shape, units, duration_s, later=later) == expected
                answers.append(expected)
    assert len({answer for answer in answers if answer is not None}) > 3, "the ETAs must differ to prove much"


def test_a_profile_of_an_unknown_model_takes_no_whole_gpu() -> None:
    spec = GPU_MODEL_BY_NAME["A100-SXM4-80GB"]
    assert _whole_gpu(spec, "7g.80gb")
    assert not _whole_gpu(spec, "3g.40gb")
    assert not _whole_gpu(spec, "no-such-profile")
    assert not _whole_gpu(None, "7g.80gb")
