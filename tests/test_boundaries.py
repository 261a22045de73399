"""The architecture's walls (DESIGN.md §2), checked on the source: the core stays pure, kubernetes stays in
one module, and nothing outside portal/settings.py reads the environment."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("portal", "teams", "jobs", "billing", "scheduler")
FORBIDDEN_IN_CORE = {"django", "rest_framework", "celery", "redis", "kubernetes", "teams", "jobs", "billing", "portal"}


def _python_files(*dirs: str) -> Iterator[Path]:
    for folder in dirs:
        yield from (p for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts)


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_scheduler_core_and_sim_import_nothing_of_the_framework() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported_roots(path) & FORBIDDEN_IN_CORE)
        for path in _python_files("scheduler/core", "scheduler/sim")
        if (ROOT / "scheduler/sim").exists() or "sim" not in path.parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_core_really_is_checked() -> None:
    assert any(_python_files("scheduler/core")), "the boundary test would pass vacuously"


def test_only_scheduler_kube_imports_kubernetes() -> None:
    importers = {
        str(path.relative_to(ROOT)) for path in _python_files(*SOURCE_DIRS) if "kubernetes" in _imported_roots(path)
    }
    assert importers <= {"scheduler/gateways/kube/client.py"}


def test_only_settings_reads_the_environment() -> None:
    readers = set()
    for path in _python_files(*SOURCE_DIRS):
        text = path.read_text()
        if "os.environ" in text or "os.getenv" in text:
            readers.add(str(path.relative_to(ROOT)))
    # env.py holds the readers; manage.py/wsgi.py only set DJANGO_SETTINGS_MODULE's default.
    assert readers <= {"portal/env.py", "portal/wsgi.py", "portal/celery.py"}
