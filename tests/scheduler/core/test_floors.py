"""The engine is built in floors, and each floor imports only the floors beneath it (and itself).

A reader who opens a floor needs nothing above it to understand it: the GPU catalog knows nothing of jobs, the rules
know nothing of where a job is placed, placement nothing of the decisions made with it, and only the cycle chooses
the speed-ups by the one switch. :data:`FLOORS` is the one statement of the order; every module of
``scheduler/core`` lives in one floor's folder (only the package's own ``__init__.py``, the public API, sits at the
root, above every floor).

No import runs upward, not even for a type or inside a function: what a floor needs from above is stated
beneath as a protocol (the cycle's cache tables, ``scheduler/core/model/tables.py``; the preemption search's
shortcuts and team candidates, ``scheduler/core/decisions/preemption.py``) and handed down by the cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import scheduler.core

CORE = Path(scheduler.core.__file__).parent

# The floors, bottom to top: a module of one floor may import its own floor and any floor listed before it.
FLOORS = ("gpus", "model", "sizing", "rules", "placement", "decisions", "speedups", "planning")


def _module_name(path: Path, core: Path) -> str:
    parts = path.relative_to(core).with_suffix("").parts
    return ".".join(("scheduler", "core", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def imported_modules(path: Path, core: Path) -> set[str]:
    """Every engine module ``path`` imports, at module level or inside a function or a type-checking block:
    ``from package import name`` counts as the module ``package.name`` when that is a module, else as ``package``
    (``from scheduler.core import plan_cycle`` imports the package's public API, the top of the house)."""
    package = _module_name(path, core)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                relative = Path(*candidate.split(".")[2:])
                is_module = (core / relative).with_suffix(".py").is_file() or (core / relative).is_dir()
                found.add(candidate if is_module else module)
    return {m for m in found if m == "scheduler.core" or m.startswith("scheduler.core.")}


def floor_of(module: str) -> int:
    """The floor index of an engine module; the package itself (its public API) is above every floor."""
    parts = module.split(".")
    if len(parts) < 3:
        return len(FLOORS)
    return FLOORS.index(parts[2]) if parts[2] in FLOORS else len(FLOORS)


def upward_imports(core: Path) -> dict[str, set[str]]:
    """For every module in a floor, the engine modules it imports from a higher floor (or from the public API)."""
    found: dict[str, set[str]] = {}
    for path in sorted(core.rglob("*.py")):
        relative = path.relative_to(core)
        if len(relative.parts) < 2 or relative.parts[0] not in FLOORS:
            continue
        own = FLOORS.index(relative.parts[0])
        above = {module for module in imported_modules(path, core) if floor_of(module) > own}
        if above:
            found[relative.as_posix()] = above
    return found


def outside_the_floors(core: Path) -> list[str]:
    """Modules and folders of the engine that are in no floor (the public API's __init__.py aside)."""
    stray = [p.name for p in core.glob("*.py") if p.name != "__init__.py"]
    stray += [f"{d.name}/" for d in core.iterdir() if d.is_dir() and d.name not in FLOORS and d.name != "__pycache__"]
    stray += [f"{f}/__init__.py" for f in FLOORS if not (core / f / "__init__.py").is_file()]
    return sorted(stray)


def test_every_module_lives_in_a_floor() -> None:
    assert outside_the_floors(CORE) == [], "give the module a floor (its folder), or the floor its __init__.py"


def test_each_floor_imports_only_floors_beneath_it() -> None:
    found = {name: sorted(modules) for name, modules in upward_imports(CORE).items()}
    assert found == {}, "a floor imports a floor above it: state what it needs beneath, and let the cycle hand it in"


def _write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def house(tmp_path: Path) -> Path:
    """A small engine of two floors that imports only downward, to plant upward imports in."""
    core = tmp_path / "scheduler" / "core"
    _write(core, "__init__.py", "from scheduler.core.planning.cycle import plan_cycle\n")
    for floor in FLOORS:
        _write(core, f"{floor}/__init__.py", '"""A floor."""\n')
    _write(core, "gpus/catalog.py")
    _write(core, "model/snapshot.py", "from scheduler.core.gpus.catalog import GPU_MODELS\n")
    _write(
        core, "planning/cycle.py", "from scheduler.core.model import snapshot\nfrom scheduler.core.speedups import x\n"
    )
    return core


def test_the_scan_passes_a_house_that_imports_downward(house: Path) -> None:
    assert upward_imports(house) == {}
    assert outside_the_floors(house) == []


@pytest.mark.parametrize(
    "planted",
    [
        "from scheduler.core.planning.cycle import plan_cycle",
        "from scheduler.core.planning import cycle",
        "import scheduler.core.planning.cycle",
        "from ..planning.cycle import plan_cycle",
        "from scheduler.core import plan_cycle",
        "def late():\n    from scheduler.core.planning.cycle import plan_cycle",
    ],
)
def test_the_scan_catches_a_planted_upward_import(house: Path, planted: str) -> None:
    (house / "model" / "snapshot.py").write_text(planted + "\n", encoding="utf-8")
    found = upward_imports(house)
    assert list(found) == ["model/snapshot.py"]
    assert found["model/snapshot.py"] <= {"scheduler.core.planning.cycle", "scheduler.core"}


def test_a_module_outside_the_floors_is_caught(house: Path) -> None:
    _write(house, "loose.py")
    _write(house, "annex/thing.py")
    assert outside_the_floors(house) == ["annex/", "loose.py"]


def test_the_scan_sees_the_engine() -> None:
    assert sum(1 for _ in CORE.rglob("*.py")) > 40, "the scan would pass vacuously"
    cycle_imports = imported_modules(CORE / "planning" / "cycle.py", CORE)
    assert "scheduler.core.model.explain" in cycle_imports
    assert floor_of("scheduler.core.planning.cycle") == len(FLOORS) - 1
