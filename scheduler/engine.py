"""Which scheduling engine this process runs: ``scheduler/core`` as Python source (the default: every install,
the suite, CI), or compiled by mypyc into C extension modules (setup.py, ``MICROCOSM_COMPILE=1``; docs/deploy.md,
A compiled engine). Python imports an extension module before a source file of the same name, so a build that
left extensions beside the sources runs compiled; ``make clean-compiled`` takes them away."""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import scheduler.core
from scheduler.core.planning import cycle

COMPILED_BY = Path(scheduler.core.__file__ or "").parent / "compiled_by.txt"  # written by setup.py's build


def compiled() -> bool:
    """Does the engine's cycle run compiled (an extension module, not a source file)?"""
    return (cycle.__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))


def engine_label() -> str:
    """ "pure Python", or "compiled (mypyc 1.19.1)": which engine ran, for a benchmark's report."""
    if not compiled():
        return "pure Python"
    by = COMPILED_BY.read_text().strip() if COMPILED_BY.is_file() else "mypyc"
    return f"compiled ({by})"
