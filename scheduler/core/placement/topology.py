"""Whole-GPU gangs (several replicas): on one GPU model, else on models of one class, placed topology-aware.

Pools: each GPU model's options alone; then, only when no single model holds the gang in a tier stage (below), the pools
of several models of one class that :mod:`~scheduler.core.placement.spans` allows (one class, one right-sized demand).
Among pools of a kind the best score wins, then the smaller model rank of the pool's first option.

Stages within a pool, the first that fits wins (keep a job inside one node, then one rail/leaf group, then one
spine block: ``docs/gpu-facts.md``, Interconnect figures):

1. one node — NVSwitch (penalty 0) before PCIe or split NVLink pairs (penalty 1), then best fit (fewest
   free GPUs), then name (:func:`~scheduler.core.placement.whole.best_node`);
2. nodes under one leaf switch;
3. nodes under one spine;
4. across spines.

Within stages 2–4 the fewest nodes are used: nodes that hold most replicas first, then the last one swapped
for the smallest node that still holds the remainder (best fit). Among leaves (or spines) that can hold the
gang, the choice is by (nodes, worst tier rank, free GPUs left on the nodes used, name). Within a spine,
nodes of the leaves with most room are taken first, so few leaves are spanned. A gang's score is therefore
(nodes, leaves, spines) spanned, lexicographic, by construction of the stages.

Fabrics: a gang that spans nodes never mixes fabrics and prefers a real fabric over TCP, then one placement
group after one leaf, and spans GPUDirect-TCPX/TCPXO nodes only with replicas of a whole node each (:mod:`.fabric`,
which decides whenever the candidate nodes differ in fabric or placement group or include such a node; where they
do not, the stages above decide alone).

A node without a ``leaf`` label shares a leaf with no one (unknown topology is assumed far) and a spine
only if it names one; leaves without a ``spine`` label share one unnamed spine.

Tier routing: each tier rank is tried alone, most preferred first; only when no single tier can hold the
gang are the job's tiers pooled. Within each of these tier stages single models come first, then class pools:
a less preferred tier is used only when no pool of either kind on the preferred one holds the gang (tiers
are the first criterion of every placement score, :mod:`~scheduler.core.rules.tiers`).

Speed: stages 2–4 decide on per-leaf / per-spine histograms of nodes by free GPU count that the index keeps
current, so choosing costs O(leaves × GPUs per node), and only the chosen leaf or spine is walked. A job that
also needs CPU or host memory on nodes that limit them is searched node by node instead. A stage that found no
leaf (spine, spread) for a gang's groups, GPUs per replica and replicas is not asked again until the index's
``freed`` token moves (the index's ``stages_failed`` table; it forgets with the speed-ups off): a stage fails
exactly when no leaf's (spine's, the pool's) histogram holds the replicas — a sum of nodes × replicas per node
that binding, retiring a node and every change that frees nothing only lower — and a rollback restores the
token with the state. At 5,000 nodes, gangs that bind after a bind of their shape kept searching every leaf and
spine in vain (docs/benchmarks/scale.md, 2026-12-06).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from scheduler.core.model.snapshot import Job, Slot, Slots
from scheduler.core.placement import fabric
from scheduler.core.placement.index import CapacityIndex, Group
from scheduler.core.placement.options import Option
from scheduler.core.placement.spans import class_pools
from scheduler.core.placement.whole import best_node, choose_gpus

Picks = list[tuple[int, int]]  # (node ordinal, replicas on it)


ScopeKey = TypeVar("ScopeKey", str, tuple[str, str])  # a spine's name, or a leaf's (spine, leaf)


def _at_rank(rank: int) -> Callable[[Option], bool]:
    return lambda option: option.tier_rank == rank


def place_gang(index: CapacityIndex, job: Job, options: Sequence[Option]) -> Slots | None:
    """Slots for every replica of a whole-GPU gang over ``options`` (all whole demands), or None."""
    by_model: dict[str, list[Option]] = {}
    for option in options:
        by_model.setdefault(option.model, []).append(option)
    singles = [opts for opts in by_model.values() if replicas_held(index, opts) >= job.replicas]
    classes = [pool for pool in class_pools(options) if replicas_held(index, pool) >= job.replicas]
    ranks = sorted({o.tier_rank for pools in (singles, classes) for opts in pools for o in opts})
    stages: list[Callable[[Option], bool]] = [_at_rank(rank) for rank in ranks]
    if len(ranks) > 1:
        stages.append(lambda o: True)
    for stage in stages:
        for pools in (singles, classes):  # spanning models is the fallback (module doc, .spans rule 1)
            best = _best_pool(index, job, pools, stage)
            if best is not None:
                return _slots(index, best[2], best[3])
    return None


def _best_pool(
    index: CapacityIndex, job: Job, pools: Sequence[Sequence[Option]], stage: Callable[[Option], bool]
) -> tuple[tuple[object, ...], int, Picks, int] | None:
    """The best layout over ``pools`` (each a list of options of one equal demand) in one tier stage: (score,
    model rank, picks, GPUs per replica), or None."""
    best: tuple[tuple[object, ...], int, Picks, int] | None = None
    for pool in pools:
        chosen = [o for o in pool if stage(o)]
        if not chosen:
            continue
        found = _best_layout(index, job, chosen)
        if found is not None:
            score, picks = found
            # A real fabric (or one node) before TCP across pools too (.fabric rule 2); in a fleet of one
            # fabric every multi-node layout ranks alike and one node already wins on score, so nothing changes.
            ranked = (fabric.rank_of(index, [o for o, _ in picks]), *score)
            rank = chosen[0].model_rank
            if best is None or (ranked, rank) < (best[0], best[1]):
                best = (ranked, rank, picks, chosen[0].demand.gpus)
    return best


def replicas_held(index: CapacityIndex, options: Sequence[Option]) -> int:
    """An upper bound on the replicas the options' free whole GPUs hold (CPU and memory aside): the replicas of
    the spread stage's histogram, so exact for options whose nodes the fabric rule and host limits leave alone."""
    gpus = options[0].demand.gpus
    return sum(len(nodes) * (k // gpus) for o in options for k, nodes in index.buckets[o.group].items())


def _best_layout(index: CapacityIndex, job: Job, options: Sequence[Option]) -> tuple[tuple[object, ...], Picks] | None:
    gpus, replicas = options[0].demand.gpus, job.replicas
    if sum(index.group_free[o.group] for o in options) < gpus * replicas:
        return None
    single = best_node(index, job, options, replicas)
    if single is not None:
        score, ordinal, _ = single
        return (1, 1, 1, score[0], score[2], score[3] - gpus * replicas, f"{ordinal:012d}"), [(ordinal, replicas)]
    if fabric.mixed(index, options) or fabric.barred(index, options):
        return _by_fabric(index, job, options, gpus, replicas)
    if _resource_limited(index, job, options):
        return _by_hosts(index, job, options, gpus, replicas)
    groups = {o.group: o.tier_rank for o in options}
    asked = (tuple(groups.items()), gpus, replicas)
    failed = index.stages_failed
    for stage in _STAGES:
        if failed.get((stage, asked)) == index.freed:
            continue  # it failed, and nothing was freed since: it fails again (module doc, Speed)
        found = stage(index, groups, gpus, replicas)
        if found is not None:
            return found
        failed[(stage, asked)] = index.freed
    return None


# -- histograms ------------------------------------------------------------------------------------------


def _from_hist(hist: Sequence[int], gpus: int, replicas: int) -> tuple[int, int, dict[int, int]] | None:
    """Fewest nodes from a histogram (hist[k] = nodes with k free GPUs) holding ``replicas`` replicas of
    ``gpus``: (nodes, free GPUs left on them, {k: nodes taken}), or None."""
    if sum(count * (k // gpus) for k, count in enumerate(hist)) < replicas:
        return None
    takes: dict[int, int] = {}
    got = nodes = 0
    last = 0
    for k in range(len(hist) - 1, gpus - 1, -1):  # pragma: no branch - the capacity check above ensures the break
        cap, count = k // gpus, hist[k]
        if not count:
            continue
        take = min(count, -(-(replicas - got) // cap))
        takes[k] = take
        got += take * cap
        nodes += take
        last = k
        if got >= replicas:
            break
    rest = replicas - (got - last // gpus)
    for k in range(gpus * rest, last):  # best fit for the last node
        if hist[k] - takes.get(k, 0) > 0:
            takes[last] -= 1
            if not takes[last]:
                del takes[last]
            takes[k] = takes.get(k, 0) + 1
            break
    waste = sum(k * count for k, count in takes.items()) - gpus * replicas
    return nodes, waste, takes


def _summed(hists: Sequence[Sequence[int]]) -> Sequence[int]:
    if len(hists) == 1:
        return hists[0]
    total: list[int] = []
    for hist in hists:
        if len(total) < len(hist):
            total += [0] * (len(hist) - len(total))
        for k, count in enumerate(hist):
            total[k] += count
    return total


def _members_of(index: CapacityIndex, members: Iterable[int], groups: dict[Group, int], takes: dict[int, int]) -> Picks:
    """The first nodes in ``members`` order that match the histogram choice ``takes``."""
    wanted = dict(takes)
    picked: list[int] = []
    for ordinal in members:  # pragma: no branch - ``takes`` was counted from these very members
        name = index.node_names[ordinal]
        if index.group_of.get(name) not in groups:
            continue
        k = len(index.free[name])
        if wanted.get(k):
            wanted[k] -= 1
            picked.append(ordinal)
            if not any(wanted.values()):
                break
    return [(ordinal, 0) for ordinal in picked]


def _fill(index: CapacityIndex, picks: Picks, gpus: int, replicas: int) -> Picks:
    """Give each picked node as many replicas as it holds, largest first, until all are placed."""
    ordered = sorted(picks, key=lambda p: (-len(index.free[index.node_names[p[0]]]), p[0]))
    filled: Picks = []
    left = replicas
    for ordinal, _ in ordered:
        count = min(left, len(index.free[index.node_names[ordinal]]) // gpus)
        filled.append((ordinal, count))
        left -= count
    return sorted(filled)


def _roomy(free_by_group: dict[Group, dict[ScopeKey, int]], groups: dict[Group, int], needed: int) -> list[ScopeKey]:
    """Keys (leaves or spines) whose free GPUs over ``groups`` reach ``needed``, sorted."""
    if len(groups) == 1:
        (group,) = groups
        return sorted(key for key, free in free_by_group[group].items() if free >= needed)
    total: dict[ScopeKey, int] = {}
    for group in groups:
        for key, free in free_by_group[group].items():
            total[key] = total.get(key, 0) + free
    return sorted(key for key, free in total.items() if free >= needed)


def _best_scope(
    index: CapacityIndex,
    hists: dict[Group, dict[ScopeKey, list[int]]],
    groups: dict[Group, int],
    keys: list[ScopeKey],
    gpus: int,
    replicas: int,
) -> tuple[tuple[int, int, int], ScopeKey, dict[int, int]] | None:
    """Among ``keys`` (leaves or spines), the one holding the gang on fewest nodes, then lowest worst tier,
    then least waste, then key; with its histogram choice."""
    best: tuple[tuple[int, int, int], ScopeKey, dict[int, int]] | None = None
    # No choice can beat (fewest nodes any node size allows, best tier, no waste): stop at the first that
    # reaches it (keys are sorted, so it is also the tie-break winner).
    widest = (index.hist_width - 1) // gpus
    ideal = (-(-replicas // widest) if widest else 0, min(groups.values()), 0)
    for key in keys:
        present = [(hists[g][key], tier) for g, tier in groups.items() if key in hists[g]]
        found = _from_hist(_summed([hist for hist, _ in present]), gpus, replicas)
        if found is not None:
            nodes, waste, takes = found
            score = (nodes, max(tier for _, tier in present), waste)
            if best is None or score < best[0]:
                best = (score, key, takes)
                if score == ideal:
                    break
    return best


def _leaf_stage(
    index: CapacityIndex, groups: dict[Group, int], gpus: int, replicas: int
) -> tuple[tuple[object, ...], Picks] | None:
    keys = _roomy(index.leaf_free, groups, gpus * replicas)
    best = _best_scope(index, index.leaf_hist, groups, keys, gpus, replicas)
    if best is None:
        return None
    (_, tier, waste), leaf, takes = best
    picks = _fill(index, _members_of(index, index.leaf_members[leaf], groups, takes), gpus, replicas)
    return _span_score(index, picks, tier, waste, "/".join(leaf)), picks


def _spine_stage(
    index: CapacityIndex, groups: dict[Group, int], gpus: int, replicas: int
) -> tuple[tuple[object, ...], Picks] | None:
    keys = _roomy(index.spine_free, groups, gpus * replicas)
    best = _best_scope(index, index.spine_hist, groups, keys, gpus, replicas)
    if best is None:
        return None
    (_, tier, waste), spine, takes = best
    members = _by_roomiest_leaf(index, spine, groups, gpus)
    picks = _fill(index, _members_of(index, members, groups, takes), gpus, replicas)
    return _span_score(index, picks, tier, waste, spine), picks


def _by_roomiest_leaf(index: CapacityIndex, spine: str, groups: dict[Group, int], gpus: int) -> Iterable[int]:
    """The spine's nodes, leaf by leaf, the leaves that hold most replicas first (then by name)."""
    room: list[tuple[int, tuple[str, str]]] = []
    for leaf in index.spine_leaves[spine]:
        replicas = 0
        for group in groups:
            hist = index.leaf_hist[group].get(leaf)
            if hist is not None:
                replicas += sum(count * (k // gpus) for k, count in enumerate(hist))
        room.append((-replicas, leaf))
    for _, leaf in sorted(room):
        yield from index.leaf_members[leaf]
    yield from index.spine_loose[spine]


def _spread_stage(
    index: CapacityIndex, groups: dict[Group, int], gpus: int, replicas: int
) -> tuple[tuple[object, ...], Picks] | None:
    hists = []
    for group in groups:
        buckets = index.buckets[group]
        hist = [0] * (max(buckets, default=0) + 1)
        for k, ordinals in buckets.items():
            hist[k] = len(ordinals)
        hists.append(hist)
    found = _from_hist(_summed(hists), gpus, replicas)
    if found is None:
        return None
    _, waste, takes = found
    picked: list[tuple[int, int]] = []
    for k, count in sorted(takes.items()):
        lists = [index.buckets[g].get(k, []) for g in groups]
        picked += [(o, 0) for o in itertools.islice(heapq.merge(*lists), count)]
    picks = _fill(index, picked, gpus, replicas)
    return _span_score(index, picks, max(groups.values()), waste, ""), picks


def _span_score(index: CapacityIndex, picks: Picks, tier: int, waste: int, tag: str) -> tuple[object, ...]:
    """(nodes, leaves, spines, tier, penalty, waste, tag): the comparable score of a multi-node gang."""
    hosts = [index.node_names[o] for o, _ in picks]
    leaves = {index.node_leaf[h] or ("\x00", h) for h in hosts}
    spines = {index.node_spine[h] if index.node_spine[h] is not None else "\x00" + h for h in hosts}
    return (len(hosts), len(leaves), len(spines), tier, 1, waste, tag)


_STAGES = (_leaf_stage, _spine_stage, _spread_stage)


# -- node by node (jobs limited by CPU or host memory) ---------------------------------------------------


def _resource_limited(index: CapacityIndex, job: Job, options: Sequence[Option]) -> bool:
    if not (job.cpu_milli or job.memory_mib):
        return False
    nodes = index.state.nodes
    return any(
        nodes[name].cpu_milli is not None or nodes[name].memory_mib is not None
        for option in options
        for name in index.groups[option.group]
    )


def _by_fabric(
    index: CapacityIndex, job: Job, options: Sequence[Option], gpus: int, replicas: int
) -> tuple[tuple[object, ...], Picks] | None:
    """A gang over nodes of mixed fabrics or placement groups (:mod:`.fabric`): the nodes of one fabric only,
    a real fabric before TCP; within one, node by node, one leaf, then one placement group, then one spine."""
    best: tuple[tuple[object, ...], Picks] | None = None
    best_rank = 0
    for rank, _, members in fabric.fabric_sets(index, options):
        if best is not None and rank > best_rank:
            break
        found = _by_hosts(index, job, options, gpus, replicas, within=members, placement_groups=True)
        if found is not None and (best is None or found[0] < best[0]):
            best, best_rank = found, rank
    return best


def _by_hosts(
    index: CapacityIndex,
    job: Job,
    options: Sequence[Option],
    gpus: int,
    replicas: int,
    *,
    within: frozenset[int] | None = None,
    placement_groups: bool = False,
) -> tuple[tuple[object, ...], Picks] | None:
    """Fewest nodes by their real capacity (GPUs, CPU, memory): largest first, last swapped for best fit;
    nodes of one leaf are preferred, then (with ``placement_groups``) of one placement group, then of one
    spine. ``within``: only these nodes (ordinals)."""
    caps: dict[int, int] = {}
    for option in options:
        for name in index.groups[option.group]:
            if within is not None and index.node_ordinal[name] not in within:
                continue
            cap = min(len(index.free[name]) // gpus, index.resource_cap(name, job))
            if cap > 0:
                caps[index.node_ordinal[name]] = cap
    scopes: list[Callable[[int], object]] = [
        lambda o: index.node_leaf[index.node_names[o]] or ("\x00", index.node_names[o]),
        lambda o: index.node_spine[index.node_names[o]] or "\x00" + index.node_names[o],
        lambda o: "",
    ]
    if placement_groups:
        scopes.insert(1, lambda o: fabric.placement_group_of(index, o))
    for scope in scopes:
        by_scope: dict[str, list[int]] = {}
        for ordinal in sorted(caps):
            by_scope.setdefault(repr(scope(ordinal)), []).append(ordinal)
        best: tuple[tuple[object, ...], Picks] | None = None
        for name, members in sorted(by_scope.items()):
            picks = _greedy(members, caps, index, replicas)
            if picks is not None:
                waste = sum(len(index.free[index.node_names[o]]) for o, _ in picks) - gpus * replicas
                score = _span_score(index, picks, max(o.tier_rank for o in options), waste, name)
                if best is None or score < best[0]:
                    best = (score, picks)
        if best is not None:
            return best
    return None


def _greedy(members: Sequence[int], caps: dict[int, int], index: CapacityIndex, replicas: int) -> Picks | None:
    def free(o: int) -> int:
        return len(index.free[index.node_names[o]])

    ordered = sorted(members, key=lambda o: (-caps[o], free(o), o))
    chosen: list[int] = []
    total = 0
    for ordinal in ordered:
        if total >= replicas:
            break
        chosen.append(ordinal)
        total += caps[ordinal]
    if total < replicas:
        return None
    rest = replicas - (total - caps[chosen[-1]])
    kept = set(chosen[:-1])
    last = min((o for o in ordered if o not in kept and caps[o] >= rest), key=lambda o: (caps[o], free(o), o))
    picks = [(o, caps[o]) for o in chosen[:-1]] + [(last, rest)]
    return sorted(picks)


def _slots(index: CapacityIndex, picks: Picks, gpus: int) -> Slots:
    replicas: list[tuple[Slot, ...]] = []
    for ordinal, count in picks:
        name = index.node_names[ordinal]
        interconnect = index.group_of[name][2]
        free = list(index.free[name])
        for _ in range(count):
            chosen = choose_gpus(interconnect, free, gpus)
            replicas.append(tuple(Slot(name, i) for i in chosen))
            free = [i for i in free if i not in chosen]
    return tuple(replicas)
