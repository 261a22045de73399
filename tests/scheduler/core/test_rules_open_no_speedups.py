"""No floor beneath the speed-ups opens one: the engine's model, sizing, rules, placement and decisions
(``scheduler/core/{gpus,model,sizing,rules,placement,decisions}/``) import nothing from
``scheduler/core/speedups/``. A rule is plain readable code; a speed-up wraps it behind the same answer and is
chosen by the engine's one switch (``plan_cycle(..., speedups=False)``), as Kueue keeps one preemption order
(``pkg/scheduler/preemption/common/ordering.go``) for its plain and its cache-backed candidate generators
(``pkg/scheduler/preemption/classical/``). What a floor beneath asks of a speed-up is stated there as a protocol
(the cycle's cache tables, the preemption search's shortcuts and team candidates) and handed in by the cycle.

Static facts (the GPU catalog and its MIG geometry, right-sizing, the memory estimate) are cached for the process
with ``functools``, never through the cycle's memo: a fact never branches on the speed-ups.
"""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler.core
from tests.scheduler.core.test_floors import FLOORS

CORE = Path(scheduler.core.__file__).parent
CHECKED = FLOORS[: FLOORS.index("speedups")]  # every floor beneath the speed-ups, bottom to top
SPEEDUPS = "scheduler.core.speedups"


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
    return [path for floor in CHECKED for path in sorted((CORE / floor).rglob("*.py"))]


def test_no_floor_beneath_the_speedups_imports_one() -> None:
    found = {path.relative_to(CORE).as_posix(): _speedups_imported(path) for path in _checked_files()}
    assert {name: sorted(modules) for name, modules in found.items() if modules} == {}, (
        "a floor beneath the speed-ups opens one"
    )


def test_the_scan_sees_the_imports_it_is_about() -> None:
    checked = {path.relative_to(CORE).as_posix() for path in _checked_files()}
    assert len(checked) > 10, "the scan would pass vacuously"
    assert CHECKED == ("gpus", "model", "sizing", "rules", "placement", "decisions")
    assert {"gpus/catalog.py", "sizing/layouts.py", "rules/fairshare.py", "placement/index.py"} <= checked
    # The modules that opened one until the cycle handed their caches and the search's speed-ups down.
    assert {"model/cluster_state.py", "model/explain.py", "sizing/rightsize.py", "decisions/preemption.py"} <= checked
    # The victims' speed-up imports the rule, never the other way round; the scan does see its import.
    victims = _speedups_imported(CORE / "speedups" / "victims.py")
    assert victims == {"scheduler.core.speedups.memo"}
    assert "scheduler.core.rules.eviction" in _imported_modules(CORE / "speedups" / "victims.py")
    # So does fair share that remembers and resumes its fill: it subclasses the plain rule.
    assert "scheduler.core.rules.fairshare.FairShare" in _imported_modules(CORE / "speedups" / "fairshare.py")
