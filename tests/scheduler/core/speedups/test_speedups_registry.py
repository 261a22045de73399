"""Every per-cycle cache of the engine goes through the cycle's memo (:mod:`scheduler.core.speedups`), so that
``speedups=False`` switches it off and the equivalence test (``test_speedups``) covers it. A new cache made
any other way fails here: a ``functools`` cache (``lru_cache``, ``cache``, ``cached_property``) outside the
speed-ups package and the pure functions declared below, or a new empty dict or set kept on an object or a
module, which must either be a cache table (``tables.table()``, handed to its owner by the cycle) or be declared
below as working state (what the rules read and write, not a remembered answer) or a static-fact table."""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler.core

CORE = Path(scheduler.core.__file__).parent
SPEEDUPS = CORE / "speedups"
FUNCTOOLS_CACHES = {"lru_cache", "cache", "cached_property"}

# Empty containers that hold the cycle's working state, not remembered answers: (module, attribute).
WORKING_STATE = {
    ("model/cluster_state.py", "gpus"),
    ("model/cluster_state.py", "_node_gpus"),
    ("model/cluster_state.py", "running"),
    ("model/cluster_state.py", "placed"),
    ("model/cluster_state.py", "jobs"),
    ("model/cluster_state.py", "usage"),
    ("model/cluster_state.py", "firm_usage"),
    ("model/cluster_state.py", "running_gone"),
    ("model/cluster_state.py", "held"),
    ("planning/run.py", "blockers"),
    ("planning/run.py", "_counted"),  # each team's jobs counted against the preemption search bound so far
    ("planning/run.py", "past_bound"),  # the jobs past it: this cycle's rule, not a remembered answer
    ("planning/cycle.py", "_blocked_production"),
    ("planning/cycle.py", "_pending_teams"),
    ("model/explain.py", "_pools"),  # each pool's profile, lowered by the jobs given a start on it
    ("model/explain.py", "_answered"),  # jobs given a time per GPU models, counted against the depth
    # The estimator's own build of its pools over the state the explanation reads after every decision (which
    # no longer changes): each GPU model's GPUs, their holders' ends and what they offer each shape, built
    # once per estimator, that is once per cycle — not answers carried from cycle to cycle.
    ("model/explain.py", "_by_model"),
    ("model/explain.py", "_ends"),
    ("model/explain.py", "_holders_of"),
    ("model/explain.py", "_model_releases"),
    ("placement/index.py", "group_of"),
    ("placement/index.py", "node_leaf"),
    ("placement/index.py", "node_spine"),
    ("placement/index.py", "leaf_members"),
    ("placement/index.py", "spine_leaves"),
    ("placement/index.py", "spine_loose"),
    ("placement/index.py", "mig"),
    ("placement/index.py", "_dirty"),
    ("placement/mix.py", "mig"),
    ("placement/mix.py", "share_sizes"),
    ("placement/mix.py", "_mig_totals"),
    ("placement/reconfigurations.py", "_claimed"),
    ("placement/reconfigurations.py", "bound_nodes"),
    ("decisions/reservation.py", "_taken"),
    # The provisioning rule's running account through one cycle: pools' room, capacity coming, requests, failures.
    ("decisions/provisioning.py", "coming"),
    ("decisions/provisioning.py", "failed"),
    ("decisions/provisioning.py", "held"),
    ("decisions/provisioning.py", "own"),
}

# Process-wide tables of static facts (the catalog's): they never branch on the memo, whose switch is per cycle.
PROCESS_TABLES = {("gpus/catalog.py", "_PROFILES_BY_NAME")}

# Modules that cache pure functions of their arguments for the process (``functools``): static facts of the
# catalog (MIG geometry, layouts, profile tables) and answers computed from them and a job's request alone
# (right-sizing, the memory estimate), which no cycle changes and no switch needs to turn off. (module, the
# functools names it uses.)
PURE_FUNCTION_CACHES = {
    ("gpus/catalog.py", "cache"),
    ("sizing/layouts.py", "lru_cache"),
    ("sizing/memory.py", "lru_cache"),
    ("sizing/rightsize.py", "lru_cache"),
    ("rules/reconfiguration.py", "lru_cache"),
    ("placement/fragscore.py", "lru_cache"),
}


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(CORE).as_posix(), ast.parse(path.read_text()))
        for path in sorted(CORE.rglob("*.py"))
        if SPEEDUPS not in path.parents
    ]


def _is_empty_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict):
        return not value.keys
    if isinstance(value, ast.Set):
        return False  # a set literal always has members
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        if value.func.id == "defaultdict":
            return len(value.args) <= 1  # the factory only
        return value.func.id in ("dict", "set", "OrderedDict") and not value.args and not value.keywords
    return False


def _functools_caches(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "functools":
            found += [(node.lineno, alias.name) for alias in node.names if alias.name in FUNCTOOLS_CACHES]
        if (
            isinstance(node, ast.Attribute)
            and node.attr in FUNCTOOLS_CACHES
            and isinstance(node.value, ast.Name)
            and node.value.id == "functools"
        ):
            found.append((node.lineno, node.attr))
    return found


def _kept_containers(tree: ast.Module) -> list[tuple[int, str]]:
    """Empty containers assigned to ``self.<name>`` anywhere, or to a name at module level."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if not _is_empty_container(value):
            continue
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                found.append((node.lineno, target.attr))
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        value = statement.value if isinstance(statement, ast.Assign | ast.AnnAssign) else None
        if _is_empty_container(value):
            found += [(statement.lineno, t.id) for t in targets if isinstance(t, ast.Name)]
    return found


def test_no_functools_cache_outside_the_speedups_but_the_declared_pure_functions() -> None:
    found = {(module, name) for module, tree in _modules() for _, name in _functools_caches(tree)}
    unknown = sorted(found - PURE_FUNCTION_CACHES)
    assert not unknown, f"cache per cycle through the cycle's tables instead: {unknown}"
    assert not PURE_FUNCTION_CACHES - found, "declared pure-function caches that no longer exist"


def test_every_kept_container_is_a_memo_table_or_declared_working_state() -> None:
    found = {(module, name) for module, tree in _modules() for _, name in _kept_containers(tree)}
    unknown = sorted(found - WORKING_STATE - PROCESS_TABLES)
    assert not unknown, f"a cache must be a table of the cycle's tables; working state is declared here: {unknown}"
    assert not (WORKING_STATE | PROCESS_TABLES) - found, "declared containers that no longer exist"


def test_static_facts_never_branch_on_the_memo() -> None:
    for module in {module for module, _ in PROCESS_TABLES | PURE_FUNCTION_CACHES}:
        text = (CORE / module).read_text()
        assert "current_memo" not in text and "speedups" not in text.split('"""', 2)[-1], module


def test_the_scan_finds_what_it_looks_for() -> None:
    source = """
from functools import lru_cache
import functools
CACHE = {}
class A:
    def __init__(self):
        self.answers = {}
        self.seen: set[str] = set()
        self.table = current_memo().table()
    @functools.cache
    def f(self): ...
"""
    tree = ast.parse(source)
    assert [name for _, name in _functools_caches(tree)] == ["lru_cache", "cache"]
    assert sorted(name for _, name in _kept_containers(tree)) == ["CACHE", "answers", "seen"]
