"""Rules never open a speed-up: the engine's rules (``scheduler/core/rules/``) and placement
(``scheduler/core/placement/``) import nothing from ``scheduler/core/speedups/``. A rule is plain readable code; a
speed-up wraps it behind the same answer and is chosen by the engine's one switch (``plan_cycle(...,
speedups=False)``), as Kueue keeps one preemption order (``pkg/scheduler/preemption/common/ordering.go``) for its
plain and its cache-backed candidate generators (``pkg/scheduler/preemption/classical/``).

Modules not converted yet are listed in :data:`NOT_YET_APART` with exactly what they still import from the
speed-ups. The list only shrinks: a module that imports a speed-up not listed for it fails, and so does an entry
that no longer holds (the work landed: strike it)."""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler.core

CORE = Path(scheduler.core.__file__).parent
CHECKED = ("rules", "placement")
SPEEDUPS = "scheduler.core.speedups"

# Modules (relative to scheduler/core) that still import speed-ups, and which ones. Shrink it, never grow it.
NOT_YET_APART: dict[str, set[str]] = {
    # The guarantee fill resumes where a team's previous fill agrees (speedups.fill), and its caches are tables
    # of the cycle's memo: the fill has not been split into a plain rule and a resuming wrapper yet.
    "rules/fairshare.py": {"scheduler.core.speedups.fill", "scheduler.core.speedups.memo"},
    # Layout values and candidate layouts are memoized pure functions, and the idle classes are read from the
    # capacity index only while the memo is enabled: the idle order itself is the rule's (idle_order, idle_key).
    "rules/reconfiguration.py": {"scheduler.core.speedups.memo"},
    # Placement's own caches: memoized pure scores and per-cycle tables, and the index's idle classes.
    "placement/fragscore.py": {"scheduler.core.speedups.memo"},
    "placement/index.py": {"scheduler.core.speedups.idle", "scheduler.core.speedups.memo"},
    "placement/mix.py": {"scheduler.core.speedups.memo"},
    "placement/reconfigurations.py": {"scheduler.core.speedups.memo"},
}


def _package(path: Path) -> str:
    return ".".join(("scheduler", "core", *path.relative_to(CORE).with_suffix("").parts[:-1]))


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved, ``from package import module`` included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(path).split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _speedups_imported(path: Path) -> set[str]:
    """The speed-up modules ``path`` imports (the package itself when it imports a name the package exports)."""
    found = set()
    for module in _imported_modules(path):
        parts = module.split(".")
        if parts[:3] != SPEEDUPS.split("."):
            continue
        is_module = len(parts) > 3 and (CORE / "speedups" / f"{parts[3]}.py").exists()
        found.add(".".join(parts[:4]) if is_module else SPEEDUPS)
    return found


def _checked_files() -> list[Path]:
    return sorted(path for folder in CHECKED for path in (CORE / folder).rglob("*.py"))


def test_rules_and_placement_import_no_speedup_beyond_the_shrinking_list() -> None:
    found = {path.relative_to(CORE).as_posix(): _speedups_imported(path) for path in _checked_files()}
    opened = {name: sorted(modules - NOT_YET_APART.get(name, set())) for name, modules in found.items()}
    assert {name: modules for name, modules in opened.items() if modules} == {}, "a rule opens a speed-up"
    stale = {name: sorted(modules - found.get(name, set())) for name, modules in NOT_YET_APART.items()}
    assert {name: modules for name, modules in stale.items() if modules} == {}, "strike what landed from the list"


def test_the_scan_sees_the_imports_it_is_about() -> None:
    assert len(_checked_files()) > 10, "the scan would pass vacuously"
    # The victims' speed-up imports the rule, never the other way round; the scan does see its import.
    victims = _speedups_imported(CORE / "speedups" / "victims.py")
    assert victims == {"scheduler.core.speedups.memo"}
    assert "scheduler.core.rules.eviction" in _imported_modules(CORE / "speedups" / "victims.py")
