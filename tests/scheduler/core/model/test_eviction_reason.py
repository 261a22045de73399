"""Eviction reasons are one enum whose values are the strings plans, events and the database have always
carried, and that prints as its value (so a plan's repr, and its digest, did not change with the type)."""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler.core
from scheduler.core.model.plan import Evict
from scheduler.core.model.vocabulary import EvictionReason


def test_values_are_the_stored_strings() -> None:
    assert {reason.value for reason in EvictionReason} == {
        "reclaim",
        "priority",
        "production",
        "backfill",
        "repartition",
        "node-lost",
        "completed",
        "failed",
        "bind-refused",
        "app-failure",
        "spot-reclaim",
        "node-drain",
        "admin",
    }


def test_an_eviction_prints_its_reason_as_the_string() -> None:
    evict = Evict(job="a", reason=EvictionReason.RECONFIGURE, by="b")
    assert repr(evict) == "Evict(job='a', reason='repartition', by='b')"
    assert evict == Evict(job="a", reason="repartition", by="b")  # type: ignore[arg-type]  # a str compares equal


def test_the_engine_names_its_grounds_in_one_module() -> None:
    """Where reclaim is decided is answered by one module: every ground the engine evicts on is named in
    ``rules/eviction.py`` (the drain for a reconfiguration in ``placement/drain.py``); the search only reads
    the reclaim ground back, to cap it at the team's guarantee."""
    core = Path(scheduler.core.__file__).parent
    named: dict[str, set[str]] = {}
    for path in core.rglob("*.py"):
        if path.name == "vocabulary.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "EvictionReason"
            ):
                named.setdefault(path.relative_to(core).as_posix(), set()).add(node.attr)
    assert named == {
        "rules/eviction.py": {"PRIORITY", "RECLAIM", "PRODUCTION", "BACKFILL"},
        "placement/drain.py": {"RECONFIGURE"},
        "decisions/preemption.py": {"RECLAIM"},
    }
