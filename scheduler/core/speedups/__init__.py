"""The engine's speed-ups, apart from its rules: the per-cycle :class:`~.memo.Memo` every cache and shortcut
goes through, and one switch (``plan_cycle(..., speedups=False)``) that turns all of them off at once. Rules and
placement import nothing from here: the cycle hands them the memo as their cache tables and builds the rules a
speed-up wraps (:mod:`.switch`).

The speed-ups' floor sits on top of what they wrap: a speed-up may import the decisions, placement, the rules and
every floor beneath them, and only the cycle, which chooses them by the one switch, imports a speed-up."""

from scheduler.core.speedups.memo import Memo, current_memo, memoized

__all__ = ["Memo", "current_memo", "memoized"]
