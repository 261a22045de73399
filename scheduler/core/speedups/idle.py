"""Ready nodes grouped by what a MIG reconfiguration could do on them, kept current as the cycle goes.

Reconfiguration (:mod:`scheduler.core.rules.reconfiguration`) judges a node only by its GPU model, its capacity tier
and the layouts of its idle GPUs in the order it considers them (MIG-on first, then by index): two nodes
alike in those three differ in its eyes only by name, and it prefers the first name. So instead of walking
every node for every question (5,000 nodes × hundreds of questions a cycle), it walks these *idle classes*
and asks, per class, for the first node by name that the question does not exclude.

:class:`IdleClasses` holds the classes of the ready nodes (schedulable, not reconfiguring) of MIG-capable
models that have at least one idle GPU, each class a sorted list of node ordinals (name order). The
:class:`~scheduler.core.placement.index.CapacityIndex` owns one and tells it which nodes changed when it
re-files their GPUs (:meth:`IdleClasses.touch`), and which nodes left (a reconfiguration under way).
:func:`idle_key` is the one definition of a node's class, used by the scan that serves a state without an
index too.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

from scheduler.core.capacity import ClusterState, Gpu
from scheduler.core.catalog import GPU_MODEL_BY_NAME
from scheduler.core.state import MigLayout

IdleKey = tuple[str, str, tuple[MigLayout, ...]]  # (GPU model, capacity tier, layouts of the idle GPUs in order)


def idle_order(gpus: Iterable[Gpu]) -> list[Gpu]:
    """A node's idle GPUs in the order reconfiguration considers them: MIG-on first (reconfiguring them gives
    up nothing), then by index."""
    return sorted((gpu for gpu in gpus if gpu.idle), key=lambda gpu: (not gpu.layout, gpu.index))


def idle_key(state: ClusterState, name: str) -> IdleKey | None:
    """Node ``name``'s idle class, or None when it has no idle GPU or its model cannot do MIG. Readiness is
    the caller's to check."""
    node = state.nodes[name]
    spec = GPU_MODEL_BY_NAME.get(node.gpu_model)
    if spec is None or not spec.mig_capable:
        return None
    layouts = tuple(gpu.layout for gpu in idle_order(state.node_gpus(name)))
    return (node.gpu_model, str(node.tier), layouts) if layouts else None


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
