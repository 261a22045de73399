"""Eviction reasons are one enum whose values are the strings plans, events and the database have always
carried, and that prints as its value (so a plan's repr, and its digest, did not change with the type)."""

from __future__ import annotations

from scheduler.core.plan import Evict
from scheduler.core.vocabulary import EvictionReason


def test_values_are_the_stored_strings() -> None:
    assert {reason.value for reason in EvictionReason} == {
        "reclaim",
        "priority",
        "production",
        "repartition",
        "node-lost",
        "completed",
        "failed",
        "bind-refused",
    }


def test_an_eviction_prints_its_reason_as_the_string() -> None:
    evict = Evict(job="a", reason=EvictionReason.RECONFIGURE, by="b")
    assert repr(evict) == "Evict(job='a', reason='repartition', by='b')"
    assert evict == Evict(job="a", reason="repartition", by="b")  # type: ignore[arg-type]  # a str compares equal
