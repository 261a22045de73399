"""The simulator pauses the cyclic garbage collector around a cycle and puts it back as it was."""

from __future__ import annotations

import gc

import pytest

from scheduler.gcpause import gc_paused


def test_the_collector_is_off_inside_and_back_on_after() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off_even_when_the_block_raises() -> None:
    gc.disable()
    try:
        with pytest.raises(RuntimeError), gc_paused():
            raise RuntimeError("boom")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_engine_leaves_the_collector_alone() -> None:
    from scheduler.core import Policy, Snapshot, plan_cycle

    plan_cycle(Snapshot(nodes=(), teams=()), Policy(), 0.0)
    assert gc.isenabled()
