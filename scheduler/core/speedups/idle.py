"""Ready nodes grouped by what a MIG reconfiguration could do on them, kept current as the cycle goes.

Reconfiguration (:mod:`scheduler.core.rules.reconfiguration`) judges a node only by its GPU model, its capacity tier
and the layouts of its idle GPUs in the order it considers them (MIG-on first, then by index): two nodes
alike in those three differ in its eyes only by name, and it prefers the first name. So instead of walking
every node for every question (5,000 nodes × hundreds of questions a cycle), it walks these *idle classes*
and asks, per class, for the first node by name that the question does not exclude.

:class:`IdleClasses` holds the classes of the ready nodes (schedulable, not reconfiguring) of MIG-capable
models that have at least one idle GPU, each class a sorted list of node ordinals (name order). It is the
:class:`~scheduler.core.placement.index.IdleTracker` the cycle gives its capacity index while the speed-ups are on
(:mod:`.switch`): the index tells it which nodes changed when it re-files their GPUs (:meth:`IdleClasses.touch`),
and which nodes left (a reconfiguration under way). The idle order and a node's class
(:func:`~scheduler.core.rules.reconfiguration.idle_key`) are the rule's: this module only keeps the classes
current, where the rule's plain scan (with the speed-ups off, or an index without a tracker) finds them afresh.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.rules.reconfiguration import IdleKey, idle_key


class IdleClasses:
    """The idle classes of a set of ready nodes (module doc); ``names`` is every node in ordinal order."""

    def __init__(self, state: ClusterState, names: list[str]) -> None:
        self.state = state
        self.names = names
        self.ordinal = {name: i for i, name in enumerate(names)}
        self._classes: dict[IdleKey, list[int]] = {}
        self._key_of: dict[str, IdleKey | None] = {}
        self._touched: set[str] = set()  # nodes that may have changed since the classes were last read

    @property
    def classes(self) -> dict[IdleKey, list[int]]:
        """Idle class → sorted ordinals of its nodes, current. Nodes are re-filed here, lazily: a preemption
        search touches the same nodes many times between two reconfiguration questions."""
        for name in sorted(self._touched):
            self._move(name, idle_key(self.state, name))
        self._touched.clear()
        return self._classes

    def touch(self, name: str) -> None:
        """Node ``name`` (ready) may have changed: re-file it before the classes are next read."""
        self._touched.add(name)

    def remove(self, name: str) -> None:
        """Node ``name`` is no longer ready: it leaves its class."""
        self._touched.discard(name)
        self._move(name, None)

    def _move(self, name: str, key: IdleKey | None) -> None:
        old = self._key_of.get(name)
        if key == old:
            return
        ordinal = self.ordinal[name]
        if old is not None:
            members = self._classes[old]
            del members[bisect_left(members, ordinal)]  # it is there: it was filed under ``old``
            if not members:
                del self._classes[old]
        if key is not None:
            insort(self._classes.setdefault(key, []), ordinal)
        self._key_of[name] = key
