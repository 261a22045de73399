"""The architecture's walls (DESIGN.md §2), checked on the source: the engine, the simulator and the spec
parser stay pure, kubernetes stays in one module, the simulator stays behind its commands, the apps reach the
engine only through its public names, the portal composes the apps and no app imports it, and nothing outside
portal/env.py reads the environment."""

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
    "scheduler.core.vocabulary",
    "scheduler.core.catalog",
    "scheduler.core.units",
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
    assert builders == {"scheduler/loop/policy.py"}


def test_only_settings_reads_the_environment() -> None:
    readers = set()
    for path in _python_files(*SOURCE_DIRS):
        text = path.read_text()
        if "os.environ" in text or "os.getenv" in text:
            readers.add(_relative(path))
    # env.py holds the readers; manage.py/wsgi.py only set DJANGO_SETTINGS_MODULE's default.
    assert readers <= {"portal/env.py", "portal/wsgi.py", "portal/celery.py"}
