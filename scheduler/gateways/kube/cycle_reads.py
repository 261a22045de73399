"""What one cycle's binds read once: a team namespace's team label and the checkpoint claims found in it.

Every bind checks its team's namespace (its team label) and, for a checkpointed job, the claim its pods mount:
two GETs each, twice per bind (``namespace_ensure`` then the bind itself), so a first cycle of 5,000 binds in a
dozen namespaces read the same dozen objects 20,000 times. Namespaces cannot be watched instead: Microcosm may
only ``get`` them (deploy/rbac.yaml). So the gateway remembers what it found from one ``observe()`` to the next
(the loop observes once per cycle, before it applies: scheduler/loop/cycle.py), and for at most ``max_age_s``
whoever calls it. Only what passed is remembered: a namespace that refused a bind is read again by the next one,
and a refusal that names a namespace (a pod's create answered 404, the namespace is gone) forgets it.
"""

from __future__ import annotations

from collections.abc import Callable

DEFAULT_MAX_AGE_S = 60.0


class CycleReads:
    """A namespace's team and the claims seen in it, from one :meth:`clear` to the next (module doc)."""

    def __init__(self, clock: Callable[[], float], *, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.clock = clock
        self.max_age_s = max_age_s
        self._since = clock()
        self._teams: dict[str, str] = {}
        self._claims: set[tuple[str, str]] = set()

    def clear(self) -> None:
        """A new cycle: read everything again."""
        self._teams.clear()
        self._claims.clear()
        self._since = self.clock()

    def team(self, namespace: str) -> str | None:
        """The team label ``namespace`` was found with this cycle; None when not read yet."""
        self._expire()
        return self._teams.get(namespace)

    def team_found(self, namespace: str, team: str) -> None:
        self._teams[namespace] = team

    def claim(self, namespace: str, name: str) -> bool:
        """Was the claim ``namespace/name`` found this cycle?"""
        self._expire()
        return (namespace, name) in self._claims

    def claim_found(self, namespace: str, name: str) -> None:
        self._claims.add((namespace, name))

    def forget(self, namespace: str) -> None:
        """Read ``namespace`` and its claims again: something in it refused a write."""
        self._teams.pop(namespace, None)
        self._claims = {(ns, name) for ns, name in self._claims if ns != namespace}

    def _expire(self) -> None:
        if self.clock() - self._since > self.max_age_s:
            self.clear()
