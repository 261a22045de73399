"""Pause the cyclic garbage collector around a scheduling cycle.

A cycle allocates hundreds of thousands of short-lived tuples that reference counting frees, and each pass of
the cyclic collector also walks the caller's whole heap — measured at ~15 % of a 1,000-node cycle in a process
holding a large snapshot. The engine leaves the process-wide collector alone; a caller that plans many cycles
pauses it around each one. The cycle breaks the reference cycles of its working state as it returns
(:meth:`scheduler.core.planning.run.Run.close`), so reference counting frees that state and the collection after
the block finds next to nothing to walk.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, and back as it was after (even when the block raises)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
