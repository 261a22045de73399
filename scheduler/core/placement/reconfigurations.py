"""MIG reconfigurations within a cycle: when, for whom, and who is told to wait for them.

The cycle asks at two moments:

- :meth:`Reconfigurations.for_production` — a production job with MIG demand found no instance, larger instance
  or whole idle GPU (:mod:`.fallback`). It must not wait behind lower work, so its changes are made *now*,
  before lower work takes the GPUs it needs (an idle GPU's change without the hysteresis): it first claims
  free instances that changes already under way will offer (the snapshot shows a reconfiguring node's new
  layout), then, node by node until its replicas are covered, gets a change on an idle GPU
  (:func:`~scheduler.core.rules.reconfiguration.plan_reconfiguration`). Only when that fails and preemption found no
  victims either (the cycle asks again with ``drain=True``) is a GPU drained of lower work (:mod:`.drain`):
  nothing is evicted while an idle GPU could be changed instead.
- :meth:`Reconfigurations.after_placement` — the MIG (and whole-GPU) demand left unplaced by capacity (or for want
  of a ready node): a job whose replicas changes under way will cover waits for them; the rest, if its
  quota would admit it, asks :func:`plan_reconfiguration` for one node.

**The way back** (:meth:`Reconfigurations.way_back`, asked by the planning step ``oversize``): production about to
start oversized on larger free capacity instead of waiting for its reconfiguration gets that reconfiguration all
the same — what :meth:`~Reconfigurations.for_production` would have given it (instances of changes under way, then
changes of idle GPUs made now, exempt from the hysteresis and the budget), on nodes other than the ones it takes —
and the instances are set aside for it, so that no other job of the cycle is promised them; it is told nothing (it
runs). Consolidation then moves it there (:mod:`scheduler.core.decisions.consolidation`). No way back for every
replica: it does not start oversized, and waits for its changes as before.

Rules: outside production, at most :func:`~scheduler.core.rules.reconfiguration.nodes_per_cycle` relabelled nodes
change per cycle (reconfiguration rule 5: one call per node, each for the demand the previous ones left unserved),
less the relabelled nodes production changed this cycle; nodes in a DRA driver's dynamic MIG are reconfigured
outside that budget (ready at once, nothing drained or paused), and one changed is held for the rest of the cycle;
production is exempt — it must not wait — and the layout it asks for is cut for all of the cycle's production MIG
demand where that lands on a node serving it, so one change serves as many as fit. A changed node takes nothing new
for the rest of the cycle (:meth:`CapacityIndex.retire`; it is also marked reconfiguring in the state, as the next
snapshot will show it). Each instance (or, MIG off, idle GPU) on a changing node is promised to one waiting job, one
per replica (whole GPUs: one per GPU); the job is told it waits for the change (blocker ``reconfiguring`` with its
``ready_at``). No reconfiguration for work its quota would not admit.

A node is either bound to or reconfigured in one plan, never both (the MIG Manager pauses the node's device plugin while
it works: ``docs/gpu-facts.md``, MIG Manager reconfiguration flow): a changed node is retired from the index, and a node
that took a bind this cycle (:meth:`Reconfigurations.bound`, called by the cycle for every bind) is excluded from every
change and drain.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import replace

from scheduler.core.model.cluster_state import gpu_class_of
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.explain import Blocker, demand_units
from scheduler.core.model.isolation import Evaluating
from scheduler.core.model.plan import Evict, Reconfigure
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job, Preemption, Slots
from scheduler.core.model.vocabulary import BlockerKind, Priority, ReconfigurationMode
from scheduler.core.placement.drain import drain_for, drain_whole_for
from scheduler.core.placement.index import IndexedClusterState
from scheduler.core.placement.options import Option, options_for
from scheduler.core.rules.fairshare import FairShare
from scheduler.core.rules.reconfiguration import nodes_per_cycle, plan_reconfiguration, reconfigure_s
from scheduler.core.rules.tiers import tier_rank
from scheduler.core.sizing.rightsize import resolve

Key = tuple[str, int, int]  # (node, GPU, instance start; -1 = the whole GPU, MIG off)
# The nodes a call may change once the budget is spent: those that change their layout at once (rule 5).
_DYNAMIC = frozenset({ReconfigurationMode.DYNAMIC, ReconfigurationMode.DYNAMIC_FIXED_MODE})


class Reconfigurations:
    """Reconfigurations of one cycle on ``state``; ``blockers`` (job id → Blocker) is the cycle's, updated here."""

    def __init__(
        self,
        state: IndexedClusterState,
        fairness: FairShare,
        policy: Policy,
        now: float,
        preemptions: Sequence[Preemption],
        blockers: dict[str, Blocker],
        pending: Sequence[Job],
    ) -> None:
        assert state.index is not None
        self.state = state
        self.index = state.index
        self.fairness = fairness
        self.policy = policy
        self.now = now
        self.preemptions = preemptions
        self.blockers = blockers
        self.changes: list[Reconfigure] = []
        self.evictions: list[Evict] = []
        self._production = [job for job in pending if job.priority == Priority.PRODUCTION]
        self._claimed: set[Key] = set()
        tables = self.index.tables  # the cycle's caches, as the index was given them
        self._offer_lists: dict[Hashable, tuple[int, list[int], list[tuple[Key, float]]]] = (
            tables.table()
        )  # see _unclaimed
        self._unit_scans: dict[Hashable, tuple[int, int | None]] = tables.table()  # see _units
        # could_change_for's answers per job shape: (freed token, answer, the node whose reconfiguration answered yes)
        self._could: dict[Hashable, tuple[int, bool, tuple[str, ...]]] = tables.table()
        self._budget = nodes_per_cycle(
            state, now
        )  # relabelled nodes changed per cycle outside production (reconfiguration rule 5)
        # Some node changes its layout at once, outside the budget (a DRA driver's dynamic MIG: rule 5).
        self._dynamic = any(node.reconfiguration is not ReconfigurationMode.RELABEL for node in state.nodes.values())
        self.bound_nodes: set[str] = set()  # nodes that took a bind this cycle: no reconfiguration there
        # Changes for production and could_change_for's question skip the hysteresis: production must not wait,
        # and the question is whether a change could serve the job at all.
        self._eager = replace(policy, reconfiguration_hysteresis_cycles=0)
        self._changing = [  # nodes whose reconfiguration is under way (the snapshot shows the new layout)
            (name, node.reconfiguring_until)
            for name, node in sorted(state.nodes.items())
            if node.schedulable and node.reconfiguring_until is not None and node.reconfiguring_until > now
        ]

    def bound(self, slots: Slots) -> None:
        """The cycle bound a job to ``slots``: their nodes take no reconfiguration this cycle."""
        self.bound_nodes.update(slot.node for replica in slots for slot in replica)

    # -- the two moments ---------------------------------------------------------------------------------

    def for_production(self, job: Job, drain: bool = False) -> bool:
        """Changes (or changes under way) for production ``job`` (module doc); True when it waits for some.
        ``drain`` False: instances changes under way offer, then changes of idle GPUs only; True: changes of
        GPUs drained of lower work only (the cycle asks after preemption failed: eviction is the last resort)."""
        wanted = job.replicas
        got = 0 if drain else self._claim(job, wanted, partial=True)
        mig = self._mig_option(job)
        if drain and mig is None:
            return self._drain_whole(job)
        while got < wanted and mig is not None:
            if not self._change_for(job, mig, drain):
                break
            got += self._claim(job, wanted - got, partial=True)
        return got > 0

    def way_back(self, job: Job, taking: Slots) -> bool:
        """Production ``job`` is about to start oversized on ``taking`` (the planning step ``oversize``) instead of
        waiting for the reconfiguration that offers its right-sized instance: that reconfiguration is still made,
        for the move back (module doc, The way back). Instances changes under way offer first, then changes of
        idle GPUs made now, as :meth:`for_production` makes them but never on a node of ``taking``, until every
        replica has one; they are then set aside for the job — it is told nothing: it runs. False (nothing set
        aside; changes made for replicas it then cannot all get stay, each one offering the queue its profile, as
        with :meth:`for_production`) when not every replica gets one, or its quota would not admit its right size."""
        mig = self._mig_option(job)
        if mig is None:
            return False
        wanted = job.replicas
        exclude = self.bound_nodes | {slot.node for replica in taking for slot in replica}
        while self._claim(job, wanted, partial=True, claim=False) < wanted:
            if not self._change_for(job, mig, drain=False, exclude=exclude):
                return False
        return self._claim(job, wanted, partial=False, tell=False) == wanted

    def hold_for(self, job: Job) -> bool:
        """Production ``job`` is blocked, and a change of an idle GPU would serve it but for the rule that a node
        bound to this cycle is not reconfigured in it: hold that node — nothing more binds there this cycle —
        so that the change can happen next cycle, instead of lower work starting on the idle GPU now and being
        drained for the job a cycle later. True (the job waits for the held node) or False (no such change)."""
        mig = self._mig_option(job)
        if mig is None or not self.bound_nodes:
            return False
        policy = self._eager
        changes = plan_reconfiguration(self.state, [(job, mig.demand)], policy, self.now)
        offering = [c for c in changes if c.node in self.bound_nodes and self._offers(job, [c])]
        if not offering:
            return False
        name = offering[0].node
        self.state.held.add(name)  # no later question this cycle proposes it again (the rule)
        self.index.retire(name)  # nor binds there; it leaves the index's idle classes too
        ready_at = self.now + self.policy.cycle_s + reconfigure_s(self.state.nodes[name], self.policy)
        self.blockers[job.id] = Blocker(BlockerKind.HELD, f"node {name}", ready_at)
        return True

    def could_change_for(self, job: Job) -> bool:
        """Could a reconfiguration of an idle GPU serve ``job`` (its quota admitting it)? MIG demand: a reconfiguration
        offering its profile; whole-GPU demand: idle MIG GPUs turned off, as many as it needs, on one node.
        The cycle asks before it preempts for non-production work: eviction is the last resort, so such a job
        waits for the change (:meth:`after_placement`, with the hysteresis and the node budget) instead."""
        options = options_for(self.index, job, self.policy)
        mig = next((o for o in options if o.demand.kind == DemandKind.MIG), None)
        option = mig or next((o for o in options if o.demand.kind == DemandKind.WHOLE), None)
        if option is None or not self._would_admit(job, option):
            return False
        if self._claim(job, self._units(job), partial=False, claim=False):
            return True  # a change under way offers it what it needs: after_placement promises it
        shape = placement_shape(job)
        known = self._could.get(shape)
        if known is not None and self._answer_holds(*known):
            return known[1]
        policy = self._eager
        if option is mig:
            changes = plan_reconfiguration(
                self.state, [(job, option.demand)], policy, self.now, exclude=self.bound_nodes
            )
            answer = self._offers(job, changes)
        else:
            whole = [(job, option.demand)]
            changes = plan_reconfiguration(
                self.state, [], policy, self.now, pending_whole=whole, exclude=self.bound_nodes
            )
            answer = sum(1 for c in changes if not c.new) >= option.demand.gpus * job.replicas
        if not answer:
            deciding_nodes: tuple[str, ...] = ()
        elif option is mig:
            deciding_nodes = (changes[0].node,)
        else:
            deciding_nodes = tuple(sorted({change.node for change in changes if not change.new}))
        self._could[shape] = (self.index.freed, answer, deciding_nodes)
        return answer

    def _answer_holds(self, freed: int, answer: bool, deciding_nodes: tuple[str, ...]) -> bool:
        """Does a could_change_for answer still hold? A False answer holds while no capacity was freed: binds,
        changes and the nodes they exclude only take idle GPUs away, so a change that was impossible stays
        so. A True answer holds while every node whose change answered took no bind and no change
        (evictions there only add idle GPUs): a bind there excludes the node from changes this cycle, so a
        True answer cannot be kept merely because nothing was freed."""
        if not answer:
            return freed == self.index.freed
        for node in deciding_nodes:
            until = self.state.nodes[node].reconfiguring_until
            if node in self.bound_nodes or (until is not None and until > self.now):
                return False
        return True

    def after_placement(self, order: Sequence[Job], oversized: Sequence[tuple[Job, Demand]] = ()) -> list[Reconfigure]:
        """The cycle's reconfigurations, after every job of ``order`` was tried (module doc). ``oversized``: the
        right-sized MIG demand of running production that holds more than its right size and has no free
        right-sized slice (:func:`scheduler.core.decisions.consolidation.demand`), counted after the pending
        demand. Its quota is not asked (the move it waits for gives back more than it takes) and nothing is
        promised to it: a change under way that offers its profile covers it, so it asks for no second one."""
        pending_mig: list[tuple[Job, Demand]] = []
        pending_whole: list[tuple[Job, Demand]] = []
        # What a job wants reads of it only its options, its team, whether it is preemptible or production, and
        # its replicas, and nothing this loop does changes a team's usage: kept per those.
        wants: dict[Hashable, tuple[bool, Demand] | None] = self.index.tables.table()
        for job in order:
            blocker = self.blockers.get(job.id)
            if blocker is None or blocker.kind not in (BlockerKind.CAPACITY, BlockerKind.NOT_READY):
                continue
            with Evaluating(job.id):  # isolation: a job whose wants cannot be worked out fails alone
                # No node changing: nothing to claim, and no units to work out for it (most cycles, most jobs).
                # (An if, not ``continue``: mypyc cannot compile a continue inside the with's try/finally.)
                if not (self._changing and self._claim(job, self._units(job), partial=False)):
                    key = (job.team, job.preemptible, job.priority == Priority.PRODUCTION, placement_shape(job))
                    want = wants[key] if key in wants else wants.setdefault(key, self._wants(job))
                    if want is not None:
                        (pending_mig if want[0] else pending_whole).append((job, want[1]))
        # Relabelled nodes production changed this cycle count against the budget (they were ready when it was taken).
        budget = self._budget - len({change.node for change in self.changes if self._relabels(change.node)})
        while (pending_mig or pending_whole) and (budget > 0 or self._dynamic):
            changes = plan_reconfiguration(
                self.state,
                pending_mig,
                self.policy,
                self.now,
                pending_whole=pending_whole,
                exclude=self.bound_nodes,
                modes=None if budget > 0 else _DYNAMIC,
            )
            if not changes:
                break
            self._apply(changes)
            budget -= int(self._relabels(changes[0].node))
            pending_mig = [(j, d) for j, d in pending_mig if not self._claim(j, self._units(j), partial=False)]
            pending_whole = [(j, d) for j, d in pending_whole if not self._claim(j, self._units(j), partial=False)]
        moving = self._uncovered(oversized) if budget > 0 or self._dynamic else []
        if moving:
            # Re-cut idle MIG GPUs only: an idle GPU with MIG off is what production starts on at once, and turning
            # it into slices to free another whole GPU gains nothing.
            whole_idle = {gpu.node.name for gpu in self.state.gpus.values() if gpu.idle and not gpu.layout}
            exclude = self.bound_nodes | whole_idle
        while moving and (budget > 0 or self._dynamic):
            modes = None if budget > 0 else _DYNAMIC
            changes = plan_reconfiguration(self.state, moving, self.policy, self.now, exclude=exclude, modes=modes)
            if not changes:
                break
            self._apply(changes)
            budget -= int(self._relabels(changes[0].node))
            moving = self._uncovered(moving)
        return self.changes

    def _relabels(self, name: str) -> bool:
        """Does node ``name`` change its layout through the relabel flow (its changes count against the budget)?"""
        return self.state.nodes[name].reconfiguration is ReconfigurationMode.RELABEL

    def _wants(self, job: Job) -> tuple[bool, Demand] | None:
        """The demand a job no free capacity took asks a reconfiguration for — (True, its preferred MIG demand), else
        (False, its preferred whole-GPU demand) — when its quota would admit it; None otherwise."""
        options = options_for(self.index, job, self.policy)
        mig = next((o for o in options if o.demand.kind == DemandKind.MIG), None)
        whole = next((o for o in options if o.demand.kind == DemandKind.WHOLE), None)
        if mig is not None:
            return (True, mig.demand) if self._would_admit(job, mig) else None
        if whole is not None and self._would_admit(job, whole):
            return (False, whole.demand)
        return None

    def _uncovered(self, oversized: Sequence[tuple[Job, Demand]]) -> list[tuple[Job, Demand]]:
        """The running jobs of ``oversized`` no change (under way or made this cycle) offers a free instance of
        their right size; an instance that covers one is set aside for it, so it covers no other, but the job is
        told nothing (it is running)."""
        left = []
        for job, wanted in oversized:
            with Evaluating(job.id):
                if not self._claim(job, job.replicas, partial=False, tell=False):
                    left.append((job, wanted))
        return left

    # -- changing ----------------------------------------------------------------------------------------

    def _change_for(self, job: Job, mig: Option, drain: bool, exclude: set[str] | None = None) -> bool:
        """One more node changed for production ``job``: on an idle GPU, or (``drain``) a drained one, never on a
        node of ``exclude`` (default: the nodes bound this cycle). False if none. A change of an idle GPU is exempt
        from the hysteresis (production must not wait); a drain evicts, so it keeps the hysteresis: a passing
        demand evicts nobody."""
        others = [(o, d) for o in self._production if o.id != job.id and (d := self._unserved(o)) is not None]
        exclude = self.bound_nodes if exclude is None else exclude
        policy = self._eager
        if not drain:
            changes = plan_reconfiguration(self.state, [(job, mig.demand), *others], policy, self.now, exclude=exclude)
            if others and not self._offers(job, changes):
                # Reconfiguration changed a node for the others' sake only: ask again for this job alone.
                changes = plan_reconfiguration(self.state, [(job, mig.demand)], policy, self.now, exclude=exclude)
            if not self._offers(job, changes):
                return False
        else:
            statement = self.state.begin()
            options = options_for(self.index, job, self.policy)
            drained = drain_for(
                self.state, self.index, job, options, self.policy, self.now, self.preemptions, others, exclude
            )
            if drained is None:
                statement.rollback()
                return False
            statement.commit()
            evictions, changes = drained
            self.evictions.extend(evictions)
            for team in sorted({self.state.jobs[e.job].team for e in evictions}):
                self.fairness.changed(team)
        self._apply(changes)
        return True

    def _drain_whole(self, job: Job) -> bool:
        """Production ``job``'s whole-GPU demand: a node per replica whose MIG-split GPUs, drained of lower work
        and turned off, complete its free whole GPUs (:func:`~scheduler.core.placement.drain.drain_whole_for`),
        until its GPUs are promised. True when it waits for some; changes made for replicas it then cannot
        all get stay (each is a whole GPU more for the queue), as with MIG demand."""
        option = next((o for o in options_for(self.index, job, self.policy) if o.demand.kind == DemandKind.WHOLE), None)
        if option is None or not self._would_admit(job, option):
            return False
        wanted = option.demand.gpus * job.replicas
        got = 0
        while got < wanted:
            statement = self.state.begin()
            options = options_for(self.index, job, self.policy)
            drained = drain_whole_for(
                self.state, self.index, job, options, self._eager, self.now, self.preemptions, self.bound_nodes
            )
            if drained is None:
                statement.rollback()
                break
            statement.commit()
            evictions, changes = drained
            self.evictions.extend(evictions)
            for team in sorted({self.state.jobs[e.job].team for e in evictions}):
                self.fairness.changed(team)
            self._apply(changes)
            got += self._claim(job, wanted - got, partial=True)
        return got > 0

    def _apply(self, changes: Sequence[Reconfigure]) -> None:
        """Apply ``changes`` to the state and close their nodes to new work for the rest of the cycle."""
        names = sorted({change.node for change in changes})
        # Closed first, then changed: a reconfiguration of a node out of the index frees no capacity placement
        # could use, so the cycle's memory of failed placements and preemptions stays valid (CapacityIndex.freed).
        for name in names:
            self.index.retire(name)
        for change in changes:
            self.state.set_layout(change.node, change.gpu, change.new)
        for name in names:
            # Mark the node busy in the state as the next snapshot will, so that no later question this cycle
            # (another change, a preemption) counts it as ready; its new instances may be claimed meanwhile.
            ready_at = max(change.ready_at for change in changes if change.node == name)
            self.state.nodes[name] = replace(self.state.nodes[name], reconfiguring_until=ready_at)
            self._changing.append((name, ready_at))
            if ready_at <= self.now:
                # Ready at once (dynamic MIG), so not closed by its readiness: held, no later question this cycle
                # proposes it again (a changing node is never changed twice in a cycle; it binds from the next).
                self.state.held.add(name)
        self.changes.extend(changes)

    def _offers(self, job: Job, changes: Sequence[Reconfigure]) -> bool:
        """Does one of ``changes`` (not applied yet) offer the job's MIG profile on a model it may use?"""
        for change in changes:
            demand = resolve(job, self.state.nodes[change.node].gpu_model, self.policy)
            if demand is not None and any(name == demand.mig_profile for name, _ in change.new):
                return True
        return False

    # -- promising ---------------------------------------------------------------------------------------

    def _units(self, job: Job) -> int:
        """What the job claims: one instance per replica, or (whole GPUs) one GPU per GPU it needs — decided
        by the first changing node whose model gives it a whole-GPU demand. Kept per job shape and extended
        only over the nodes that started changing since (the list only grows)."""
        shape = placement_shape(job)
        scanned, gpus = self._unit_scans.get(shape, (0, None))
        if gpus is None:
            for name, _ in self._changing[scanned:]:
                demand = resolve(job, self.state.nodes[name].gpu_model, self.policy)
                if demand is not None and demand.kind == DemandKind.WHOLE:
                    gpus = demand.gpus
                    break
            self._unit_scans[shape] = (len(self._changing), gpus)
        return job.replicas * gpus if gpus is not None else job.replicas

    def _unclaimed(self, job: Job) -> Iterator[tuple[Key, float]]:
        """Every instance (or idle MIG-off GPU) that changing nodes offer the job and no job was promised, with its
        node's ready time, in node, GPU and start order. The offers are kept per job shape: extended over the nodes
        that started changing since, rebuilt when a job left or took a GPU of a node out of the index
        (:attr:`CapacityIndex.outside`: an eviction can free an instance on a changing node; nothing binds there,
        and a changing node is never changed again, so its offers move with nothing else). Promises are never
        taken back within a cycle, so the offers before the first unpromised one are skipped from then on: a
        question asked for every waiting job does not walk hundreds of promised instances again each time."""
        shape = placement_shape(job)
        outside = self.index.outside
        entry = self._offer_lists.get(shape)
        if entry is None or entry[0] != outside:
            entry = self._offer_lists[shape] = (outside, [0, 0], [])
        _, cursor, offered = entry  # cursor: [changing nodes scanned, offers known promised]
        if cursor[0] < len(self._changing):
            tiers = tier_rank(job)
            for name, until in self._changing[cursor[0] :]:
                node = self.state.nodes[name]
                demand = resolve(job, node.gpu_model, self.policy) if str(node.tier) in tiers else None
                if demand is None:
                    continue
                for gpu in self.state.node_gpus(name):
                    if demand.kind == DemandKind.MIG:
                        starts = [s for p, s in gpu.layout if p == demand.mig_profile and s not in gpu.instances]
                    elif demand.kind == DemandKind.WHOLE and not gpu.layout and gpu.idle:
                        starts = [-1]
                    else:
                        starts = []
                    offered += [((name, gpu.index, s), until) for s in starts]
            cursor[0] = len(self._changing)
        claimed = self._claimed
        while cursor[1] < len(offered) and offered[cursor[1]][0] in claimed:
            cursor[1] += 1
        return (offer for offer in itertools.islice(offered, cursor[1], None) if offer[0] not in claimed)

    def _claim(self, job: Job, wanted: int, partial: bool, claim: bool = True, tell: bool = True) -> int:
        """Promise the job up to ``wanted`` free instances (or idle MIG-off GPUs) on changing nodes — all or
        none unless ``partial`` — and tell it it waits for them (``tell`` False: a running job, told nothing);
        return how many were promised. ``claim`` False: only count them, promising nothing."""
        if not self._changing:
            return 0
        if not claim:  # count only, stopping at ``wanted``: asked for every waiting job, over long offer lists
            count = 0
            for _ in self._unclaimed(job):
                count += 1
                if count == wanted:
                    return count
            return count if partial else 0
        chosen = list(itertools.islice(self._unclaimed(job), wanted))
        if not chosen or (len(chosen) < wanted and not partial):
            return 0
        self._claimed.update(key for key, _ in chosen)
        if tell:
            (name, gpu, _), until = max(chosen, key=lambda c: (c[1], c[0]))
            self.blockers[job.id] = Blocker(BlockerKind.RECONFIGURING, f"node {name} GPU {gpu}", until)
        return len(chosen)

    # -- quota -------------------------------------------------------------------------------------------

    def _mig_option(self, job: Job) -> Option | None:
        """The job's preferred MIG option, if its quota would admit it."""
        mig = next((o for o in options_for(self.index, job, self.policy) if o.demand.kind == DemandKind.MIG), None)
        return mig if mig is not None and self._would_admit(job, mig) else None

    def _unserved(self, job: Job) -> Demand | None:
        """The MIG demand of a pending production job not yet bound nor waiting for a change, else None."""
        if job.id in self.state.placed or job.id in self.blockers:
            return None
        mig = self._mig_option(job)
        return mig.demand if mig is not None else None

    def _would_admit(self, job: Job, option: Option) -> bool:
        """Would the job's quota let it hold ``option``'s demand? No layout is changed for work that could
        not run on it anyway."""
        units = demand_units(option.demand, option.model) * job.replicas
        return self.fairness.admit(job, {gpu_class_of(option.model): units}).ok
