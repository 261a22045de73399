"""The architecture's walls (DESIGN.md §2), checked on the source: the engine, the simulator and the spec
parser stay pure, kubernetes stays in one module, the simulator stays behind its commands, the apps reach the
engine only through its public names, the portal composes the apps and no app imports it, and nothing outside
scheduler/env.py reads the environment."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import scheduler.core

ROOT = Path(__file__).resolve().parents[1]
APPS = ("teams", "jobs", "billing", "audit", "demo", "benchmarks", "scheduler")  # the Django apps; portal composes them
SOURCE_DIRS = ("portal", *APPS)
PURE = ("scheduler/core", "scheduler/sim", "scheduler/specs")
FRAMEWORK = {"django", "rest_framework", "celery", "redis", "kubernetes"}
FORBIDDEN_IN_PURE = FRAMEWORK | {"portal", *APPS} - {"scheduler"}
# The engine's public names: the package itself (its __all__) and the two tables every layer shares.
ENGINE_PUBLIC_MODULES = {
    "scheduler.core",
    "scheduler.core.model.vocabulary",
    "scheduler.core.gpus.catalog",
    "scheduler.core.gpus.units",
}
# Where the simulator may be used besides itself: the benchmarks' room (it runs the simulator's benchmarks
# beside the portal's) and the scenario command (it replays scenario files). The apps use the engine instead.
SIMULATOR_USERS = ("benchmarks", "scheduler/management/commands/scenario.py")


def _python_files(*dirs: str) -> Iterator[Path]:
    for folder in dirs:
        yield from (p for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts)


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _imports(path: Path) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Every absolute import of ``path`` as (module, names imported from it; () for ``import module``)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, tuple(alias.name for alias in node.names)


def _imported_roots(path: Path) -> set[str]:
    return {module.split(".")[0] for module, _names in _imports(path)}


def _imports_under(path: Path, package: str) -> bool:
    return any(module == package or module.startswith(package + ".") for module, _ in _imports(path))


def _under(path: str, *folders: str) -> bool:
    return any(path == folder or path.startswith(folder + "/") for folder in folders)


def test_the_engine_the_simulator_and_the_spec_parser_import_nothing_of_the_framework() -> None:
    offenders = {_relative(path): sorted(_imported_roots(path) & FORBIDDEN_IN_PURE) for path in _python_files(*PURE)}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_pure_rooms_really_are_checked() -> None:
    for folder in PURE:
        assert any(_python_files(folder)), f"the boundary test would pass vacuously on {folder}"


def test_only_the_kube_client_imports_kubernetes() -> None:
    importers = {_relative(path) for path in _python_files(*SOURCE_DIRS) if "kubernetes" in _imported_roots(path)}
    assert importers <= {"scheduler/gateways/kube/client.py"}


def test_only_the_simulator_and_its_commands_import_the_simulator() -> None:
    importers = {
        _relative(path)
        for path in _python_files(*SOURCE_DIRS)
        if _imports_under(path, "scheduler.sim") and not _under(_relative(path), "scheduler/sim", *SIMULATOR_USERS)
    }
    assert importers == set()


def test_apps_reach_the_engine_only_through_its_public_names() -> None:
    public = set(scheduler.core.__all__)
    offenders: dict[str, list[str]] = {}
    for path in _python_files("portal", *(app for app in APPS if app != "scheduler")):
        for module, names in _imports(path):
            if not _under(module.replace(".", "/"), "scheduler/core"):
                continue
            if module not in ENGINE_PUBLIC_MODULES:
                offenders.setdefault(_relative(path), []).append(module)
            elif module == "scheduler.core" and not set(names) <= public:
                offenders.setdefault(_relative(path), []).extend(f"scheduler.core.{n}" for n in set(names) - public)
    assert offenders == {}


def test_no_app_imports_the_portal() -> None:
    """The portal is the composition root (settings, URLs, Celery, the bench and demo commands): it may import
    every app, and an app that imported it back would tie the apps to one deployment."""
    importers = {_relative(path) for path in _python_files(*APPS) if "portal" in _imported_roots(path)}
    assert importers == set()


def test_one_module_reads_the_policy_from_settings() -> None:
    """The loop and the apps must agree on the engine's policy, so one function builds it (policy_current)."""
    builders = set()
    for path in _python_files("portal", *APPS):
        if _under(_relative(path), *PURE):
            continue  # the simulator builds policies from scenario files, not from settings
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "from_mapping"
                and getattr(node.value, "id", "") == "Policy"
            ):
                builders.add(_relative(path))
    assert builders == {"scheduler/bridge/policy.py"}


def test_only_settings_reads_the_environment() -> None:
    readers = set()
    for path in _python_files(*SOURCE_DIRS):
        text = path.read_text()
        if "os.environ" in text or "os.getenv" in text:
            readers.add(_relative(path))
    # env.py holds the readers; manage.py/wsgi.py only set DJANGO_SETTINGS_MODULE's default.
    assert readers <= {"scheduler/env.py", "portal/wsgi.py", "portal/celery.py"}


# The rooms built on the fleet's app (DESIGN.md §2); the scheduler app itself hosts the loop and runs it. The
# benchmarks' room runs it too (`bench loop` times whole cycles): nothing imports that room, so it closes no circle
# (test_nothing_imports_the_benchmarks_room keeps that true).
LOOP_FREE_APPS = ("portal", "teams", "jobs", "billing", "audit", "demo")
LOOP = "scheduler.loop"
BRIDGE = "scheduler.bridge"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _every_import(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, at module level or inside a function (a late import is still an import):
    ``from a import b`` yields ``a`` and ``a.b`` (b may be a module), and each yields its parent packages, which
    Python runs first."""
    for module, names in _imports(path):
        for name in (module, *(f"{module}.{n}" for n in names)):
            parts = name.split(".")
            yield from (".".join(parts[:end]) for end in range(1, len(parts) + 1))


def _project_imports() -> dict[str, set[str]]:
    """The project's import graph: each module → the project modules it imports."""
    modules = {_module_name(path): path for path in _python_files(*SOURCE_DIRS)}
    return {name: {m for m in _every_import(path) if m in modules and m != name} for name, path in modules.items()}


def _reaches(graph: dict[str, set[str]], start: str, target: str) -> list[str] | None:
    """The import chain from ``start`` to a module under ``target``, or None when there is none."""
    chains = {start: [start]}
    todo = [start]
    while todo:
        module = todo.pop()
        for imported in sorted(graph[module]):
            if imported in chains:
                continue
            chains[imported] = [*chains[module], imported]
            if imported == target or imported.startswith(target + "."):
                return chains[imported]
            todo.append(imported)
    return None


def test_nothing_imports_the_benchmarks_room() -> None:
    """The benchmarks' room may run the loop (LOOP_FREE_APPS) only because it is a leaf: no other room imports it."""
    importers = {
        f"{_relative(path)}: {module}"
        for path in _python_files(*(d for d in SOURCE_DIRS if d != "benchmarks"))
        for module in _every_import(path)
        if module == "benchmarks" or module.startswith("benchmarks.")
    }
    assert importers == set()


def test_no_app_imports_the_loop() -> None:
    """The apps read the fleet and ask the engine through the bridge (scheduler/bridge/); the loop is the one
    that records into the apps, so an app importing it, even late inside a function, closes a circle."""
    importers = {
        f"{_relative(path)}: {module}"
        for path in _python_files(*LOOP_FREE_APPS)
        for module in _every_import(path)
        if module == LOOP
    }
    assert importers == set()


def test_the_bridge_and_what_the_loop_imports_never_lead_back_to_the_loop() -> None:
    """No circle through the loop: the bridge, and every module the loop imports from outside itself (the job
    services it records through, the models, the gateways), reach the loop by no chain of imports."""
    graph = _project_imports()
    bridge = {m for m in graph if m == BRIDGE or m.startswith(BRIDGE + ".")}
    assert bridge, "the boundary test would pass vacuously on the bridge"
    used_by_loop = {
        imported
        for module, imports in graph.items()
        if module.startswith(LOOP + ".")
        for imported in imports
        if imported != LOOP and not imported.startswith(LOOP + ".") and imported != "scheduler"
    }
    assert "jobs.services" in used_by_loop
    chains = {start: _reaches(graph, start, LOOP) for start in sorted(bridge | used_by_loop)}
    assert {start: chain for start, chain in chains.items() if chain} == {}


# The fleet's Django models: what the database holds must not depend on how one backend reaches a cluster. They may
# use the gateways' shared protocol, which is no backend; the vocabulary a model and a backend both need (which label
# names a node's pool) lives in scheduler/pool_labels.py, beside them.
MODELS = ("scheduler/models.py", "scheduler/autoscaled.py")
BACKENDS = ("scheduler.gateways.kube", "scheduler.gateways.simulated")


def test_the_fleets_models_import_no_backend_gateway() -> None:
    offenders = {
        f"{model}: {module}"
        for model in MODELS
        for module in _every_import(ROOT / model)
        if any(module == backend or module.startswith(backend + ".") for backend in BACKENDS)
    }
    assert offenders == set()


def test_the_pool_label_vocabulary_is_neutral() -> None:
    """No framework and no project module: the model and the gateway may both import it."""
    path = ROOT / "scheduler" / "pool_labels.py"
    assert _imported_roots(path) <= {"__future__", "collections"}
