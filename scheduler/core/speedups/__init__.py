"""The engine's speed-ups, apart from its rules: the per-cycle :class:`~.memo.Memo` every cache and shortcut
goes through, and one switch (``plan_cycle(..., speedups=False)``) that turns all of them off at once. No floor
beneath the speed-ups imports anything from here: the cycle hands the engine objects it builds the memo as their
cache tables, and builds the rules a speed-up wraps, and the speed-ups a search is given, by the switch
(:mod:`.switch`).

The speed-ups' floor sits on top of what they wrap: a speed-up may import the decisions, placement, the rules and
every floor beneath them, and only the cycle, which chooses them by the one switch, imports a speed-up."""

from scheduler.core.speedups.memo import Memo, current_memo

__all__ = ["Memo", "current_memo"]
