"""Blocker kinds are one enum (scheduler.core.model.vocabulary.BlockerKind) whose values are the strings the cluster's
record, the API and the simulator's wait analysis have always carried: typing them changed no stored value."""

from __future__ import annotations

from scheduler.core.model.plan import Waiting
from scheduler.core.model.vocabulary import BlockerKind


def test_the_values_are_the_stored_strings() -> None:
    assert {kind.name: kind.value for kind in BlockerKind} == {
        "CAPACITY": "capacity",
        "QUOTA": "quota",
        "RECONFIGURING": "reconfiguring",
        "HELD": "held",
        "NOT_READY": "not-ready",
        "RESERVED": "reserved",
        "PROVISIONING": "provisioning",
    }


def test_a_kind_prints_and_compares_as_its_value() -> None:
    waiting = Waiting("j", 1, 1, "…", blocker=BlockerKind.NOT_READY)
    assert repr(waiting) == "Waiting(job='j', position=1, team_position=1, reason='…', eta_s=None, blocker='not-ready')"
    assert waiting.blocker == "not-ready" and f"{waiting.blocker}" == "not-ready"
    assert Waiting("j", 1, 1, "…").blocker is None  # a planner that does not say
