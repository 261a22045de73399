"""Production inference never waits for a reconfiguration while idle capacity could hold it now.

Production inference must start within one cycle, and a MIG reconfiguration takes ``policy.mig_reconfigure_s`` (minutes:
``docs/gpu-facts.md``, MIG Manager reconfiguration flow). So when :func:`~scheduler.core.placement.find.find_slots`
finds no instance of a production job's right-sized profile, the cycle asks :func:`fallback_slots` before it plans a
reconfiguration or evicts anyone. The rules:

1. **Who.** Production jobs with a MIG option only (their other options, whole GPUs or shares, were searched
   by ``find_slots`` already).
2. **What.** Per replica, on the groups of the job's MIG options: a *larger* free MIG instance — one with at
   least the compute slices and the memory of the right-sized profile, ``+me`` only when the profile is
   ``+me`` — on any GPU, idle or partly used (unlike ``find_slots``' larger-instance rule, which leaves idle
   GPUs to reconfiguration: production does not wait for it); or a whole idle GPU with MIG off (the whole GPU
   holds every profile of its model).
3. **How much larger.** At most twice the compute slices of the right-sized profile (extra ≤ own): the job
   is counted at what it holds, so a 1g service on a whole GPU would spend seven times its share of its
   team's quota (blocking the team's next production jobs) and idle six slices; for such a job a layout
   change of an idle GPU (300 s, planned by the cycle next, without the hysteresis) is the better bargain.
   A 7g.80gb-sized job takes a whole idle GPU (no extra), a 4g one a whole GPU or a 7g instance, a 3g one a
   4g–6g instance only. Measured on B2 and B4 (/work/tmp/dynamics-results.md): no cap, or no cap while the
   team stays within its guarantee, lowered utilization and raised evictions without fewer SLO misses.
4. **Which.** The least oversized first: (tier rank, extra compute slices, extra memory, model rank, GPU
   order); a whole GPU counts as 7 compute slices and the model's whole memory. The job is then counted at
   what it holds (:func:`~scheduler.core.rules.limits.placement_units` of the slots), and its quota must admit
   that. Later reconfiguration may move the capacity back once the job is gone.
5. Replicas are placed one after the other inside a Statement (the next replica sees the previous one's
   slot) and rolled back: the state is left unchanged, as ``find_slots`` leaves it.

**Oversize** (:func:`oversize_slots`, the planning step ``oversize``): rule 3's cap decides only what production
takes *first*. When neither the capped fallback nor an eviction of preemptible work (nor, for a profile that takes
the whole GPU, of work on a MIG-off GPU) places it, production takes any larger free instance or whole idle GPU —
rules 1, 2, 4 and 5 without rule 3 — rather than wait for a reconfiguration (``policy.mig_reconfigure_s``, minutes):
"production inference always running" is the promise, and B4 measured nearly every avoidable production wait to be
such a reconfiguration with larger capacity free (``docs/benchmarks/cost.md``). The oversize is for a time, and only
**with its way back**: the reconfiguration it would have waited for is still made — an instance a change under way
offers, else a change of another idle GPU made now, set aside for it
(:meth:`~scheduler.core.placement.reconfigurations.Reconfigurations.way_back`) — and while it holds more than rule
3's cap its right size keeps counting as demand in the cycle's reconfigurations (consolidation, rule 5), so
consolidation (:mod:`scheduler.core.decisions.consolidation`) moves it make-before-break to the right-sized slice
when the change is done. Without a way back (the idle GPU it would take is the only one a change could cut) it
waits for the change as before: on B2 services started oversized with nothing asking for their slice stayed on
whole GPUs, and the fleet filled with them (``docs/benchmarks/cost.md``, B4 notes). While it waits for its move it
is counted at what it holds, and its quota must admit that (rule 4: its team holds that capacity meanwhile).

:func:`whole_gpu_slots` is the one case of rule 2 that is no fallback but the same capacity, for work of any
priority: a MIG demand for the profile that takes every compute slice of the GPU (``7g.80gb``, ``7g.40gb``)
holds the whole GPU either way, so an idle GPU with MIG off serves it now — instead of a reconfiguration to a
single instance (300 s), and another back when whole-GPU work wants the GPU (the flip-flop ``bench causes``
measured). :func:`whole_gpu_options` says where such a GPU serves a job; production that finds none of them
idle evicts lower work from one before any reconfiguration (the planning step ``preempt_whole_gpu``, which asks
the eviction rules for candidates as :func:`as_whole_gpus` sees the job).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.gpus.catalog import COMPUTE_SLICES, GPU_MODEL_BY_NAME
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Request, Slot, Slots
from scheduler.core.model.vocabulary import Priority
from scheduler.core.placement.find import replica_by_replica
from scheduler.core.placement.index import CapacityIndex, IndexedClusterState
from scheduler.core.placement.mig import best_of
from scheduler.core.placement.mix import mix_of
from scheduler.core.placement.options import Option, options_for
from scheduler.core.placement.whole import best_whole

Score = tuple[int, ...]
# Rule 3: production's fallback takes at most this many times the compute slices of its right size; a service
# holding more started oversized and asks for its way back (scheduler.core.decisions.consolidation, rule 5).
FALLBACK_FACTOR = 2


def fallback_slots(state: IndexedClusterState, job: Job, policy: Policy) -> Slots | None:
    """Slots for every replica of production ``job`` on a larger free instance or a whole idle GPU (module
    rules), or None. The state is left unchanged."""
    return _slots(state, job, policy, capped=True)


def oversize_slots(state: IndexedClusterState, job: Job, policy: Policy) -> Slots | None:
    """:func:`fallback_slots` without rule 3's cap: any larger free instance or whole idle GPU, the least oversized
    first (rule 4) — what production takes rather than wait for a reconfiguration (module doc, Oversize). The
    state is left unchanged."""
    return _slots(state, job, policy, capped=False)


def _slots(state: IndexedClusterState, job: Job, policy: Policy, *, capped: bool) -> Slots | None:
    index = state.index
    assert index is not None
    if job.priority != Priority.PRODUCTION:
        return None
    mig = tuple(o for o in options_for(index, job, policy) if o.demand.kind == DemandKind.MIG)
    if not mig:
        return None
    return replica_by_replica(state, index, job, lambda: _best_replica(state, job, mig, policy, capped))


def _best_replica(
    state: IndexedClusterState, job: Job, options: tuple[Option, ...], policy: Policy, capped: bool
) -> tuple[Slot, ...] | None:
    index = state.index
    assert index is not None
    mix = mix_of(index, policy)
    best: tuple[Score, tuple[Slot, ...]] | None = None
    for option in options:
        profiles = GPU_MODEL_BY_NAME[option.model].profiles()
        own = profiles[option.demand.mig_profile or ""]
        plus_me = bool(own.media_engines)
        most = FALLBACK_FACTOR * own.compute_slices if capped else COMPUTE_SLICES  # rule 3
        for name, spec in sorted(profiles.items()):
            if name == own.name or bool(spec.media_engines) != plus_me:
                continue
            if not own.compute_slices <= spec.compute_slices <= most or spec.memory_mib < own.memory_mib:
                continue
            oversize = (spec.compute_slices - own.compute_slices, spec.memory_mib - own.memory_mib)
            found = best_of(index, job, option, name, mix, oversize, False)
            if found is None:
                continue
            score, profile = found
            key = (option.tier_rank, *oversize, option.model_rank, score[-1])
            if best is None or key < best[0]:
                gpu = index.gpus[score[-1]]
                start = min(gpu.free_instances(profile))
                best = (key, (Slot(gpu.node.name, gpu.index, mig_profile=profile, mig_start=start),))
        if most < COMPUTE_SLICES:
            continue
        whole_option = Option(option.tier_rank, option.model_rank, option.group, Demand.whole(1))
        whole = best_whole(index, job, (whole_option,))
        if whole is not None:
            memory = GPU_MODEL_BY_NAME[option.model].memory_mib
            oversize = (COMPUTE_SLICES - own.compute_slices, memory - own.memory_mib)
            key = (option.tier_rank, *oversize, option.model_rank, whole[0][-1])
            if best is None or key < best[0]:
                best = (key, whole[1])
    return best[1] if best is not None else None


def whole_gpu_options(index: CapacityIndex, job: Job, policy: Policy) -> tuple[Option, ...]:
    """One whole-GPU option for each of ``job``'s MIG options whose profile takes every compute slice of the
    GPU (module doc): where a GPU with MIG off serves it. Empty for any other job."""
    return tuple(
        Option(o.tier_rank, o.model_rank, o.group, Demand.whole(1))
        for o in options_for(index, job, policy)
        if o.demand.kind == DemandKind.MIG
        and GPU_MODEL_BY_NAME[o.model].profiles()[o.demand.mig_profile or ""].compute_slices == COMPUTE_SLICES
    )


def as_whole_gpus(job: Job) -> Job:
    """``job`` asking for one whole GPU per replica: what a preemption on GPUs with MIG off searches for it. The
    eviction rules then take another team's work as a candidate only where it holds a GPU with MIG off
    (:func:`~scheduler.core.rules.eviction.could_help`), the only capacity such a search can free for it."""
    return replace(job, request=Request(gpus=1))


def whole_gpu_slots(state: IndexedClusterState, job: Job, policy: Policy) -> Slots | None:
    """Slots on idle MIG-off GPUs for every replica of ``job`` when its MIG demand takes every compute slice
    of the GPU (module doc), or None. The state is left unchanged."""
    index = state.index
    assert index is not None
    full = whole_gpu_options(index, job, policy)
    if not full:
        return None
    return replica_by_replica(state, index, job, lambda: _whole_replica(index, job, full))


def _whole_replica(index: CapacityIndex, job: Job, options: tuple[Option, ...]) -> tuple[Slot, ...] | None:
    found = best_whole(index, job, options)
    return found[1] if found is not None else None
