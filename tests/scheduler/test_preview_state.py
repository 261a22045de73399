"""The state the last cycle left, kept for the submit preview (scheduler.bridge.preview_state): the worker leaves
it after each cycle, a web process reads it once per cycle and brings the queue up to date; the preview answers
from it as from a snapshot built from the database; and whatever cannot be trusted is no state at all (the
preview then builds one)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache

from jobs.models import Job
from jobs.services import job_cancel, job_submit
from scheduler.bridge import preview_state
from scheduler.bridge.policy import policy_at_speed
from scheduler.bridge.preview import clock_speed, fleet_answer
from scheduler.bridge.preview_state import KEY, STAMP_KEY, last_state, publish
from scheduler.bridge.snapshot import build, inventory_observation
from scheduler.core import Job as CoreJob
from scheduler.core import Plan, Preview, Request, Slot, preview
from scheduler.core.model.vocabulary import JobKind
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=1, backoff_s=0.0, sleep=lambda _s: None)
ASKED = (
    CoreJob(id="asked", team="nlp", request=Request(gpus=1)),
    CoreJob(id="asked", team="nlp", request=Request(gpus=8)),
    CoreJob(id="asked", team="nlp", request=Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE),
    CoreJob(id="asked", team="nlp", request=Request(memory_gib=18.0), kind=JobKind.INFERENCE),
)


@pytest.fixture(autouse=True)
def publishing(settings: pytest.FixtureRequest) -> Iterator[None]:
    settings.PREVIEW_STATE_PUBLISH = True  # type: ignore[attr-defined]
    cache.delete_many([KEY, STAMP_KEY])
    preview_state.forget()
    yield
    cache.delete_many([KEY, STAMP_KEY])
    preview_state.forget()


def _cycled() -> Clock:
    """A fleet, a team with running and pending work, and one cycle run on it (which publishes its state)."""
    fleet_seed()
    team_seed("nlp", guaranteed=8, burst=12)
    clock = Clock()
    for gpus in (8, 4, 2, 8, 8):
        job_submit(team="nlp", spec={"kind": "training", "gpus": gpus, "duration_s": 3600}, actor=None, now=clock.now)
    cycle_run(gateway=fleet(clock), retry=NO_WAIT)
    return clock


def test_after_a_cycle_the_preview_answers_from_its_state_as_from_a_build() -> None:
    clock = _cycled()
    assert Job.objects.filter(state="running").exists() and Job.objects.filter(state="pending").exists()
    now, speed = clock.now.timestamp() + 2, clock_speed()
    policy = policy_at_speed(speed)
    state = last_state(now, speed)
    assert state is not None
    built = build(inventory_observation(now, speed), policy, now).snapshot
    assert sorted(j.id for j in state.pending) == sorted(j.id for j in built.pending)
    assert sorted(r.job.id for r in state.running) == sorted(r.job.id for r in built.running)
    for asked in ASKED:
        assert preview(state, asked, policy, now) == preview(built, asked, policy, now), asked
    assert last_state(now + 1, speed) is state  # read once per cycle: the process keeps it


def test_jobs_submitted_since_are_added_and_jobs_gone_since_taken_out() -> None:
    clock = _cycled()
    waiting = Job.objects.filter(state="pending").order_by("pk").first()
    assert waiting is not None
    job_cancel(job=waiting, actor=None, now=clock.now)
    new = job_submit(team="nlp", spec={"kind": "training", "gpus": 1}, actor=None, now=clock.now)
    state = last_state(clock.now.timestamp(), clock_speed())
    assert state is not None
    ids = {job.id for job in state.pending}
    assert str(new.pk) in ids and str(waiting.pk) not in ids
    answer = fleet_answer(CoreJob(id="asked", team="nlp", request=Request(gpus=1)), now=clock.now.timestamp())
    assert answer.preview.outcome in ("starts", "waits")


def test_a_job_bound_or_requeued_since_the_cycle_means_no_state() -> None:
    clock = _cycled()
    running = Job.objects.filter(state="running").first()
    assert running is not None
    Job.objects.filter(pk=running.pk).update(state="pending")  # requeued between cycles
    assert last_state(clock.now.timestamp(), clock_speed()) is None


def test_an_old_state_another_speed_or_none_at_all_means_no_state() -> None:
    clock = _cycled()
    now, speed = clock.now.timestamp(), clock_speed()
    assert last_state(now, speed) is not None
    assert last_state(now, speed * 2) is None
    stopped = now + preview_state.MAX_AGE_CYCLES * django_settings.SCHEDULER["cycle_s"] + 1  # the worker stopped
    assert last_state(stopped, speed) is None
    cache.delete(KEY)
    preview_state.forget()
    assert last_state(now, speed) is None


@pytest.mark.parametrize(
    "blob",
    [
        [b"not a pickle"],  # damaged
        [pickle.dumps((1, 2))],  # not a snapshot
        [],  # another release's layout of the entry: no blob where this one reads it
    ],
)
def test_a_state_that_cannot_be_unpacked_means_no_state_and_the_preview_still_answers(blob: list[bytes]) -> None:
    """A worker of another release (an upgrade rolling out) may leave a state this process cannot rebuild."""
    clock = _cycled()
    now, speed = clock.now.timestamp(), clock_speed()
    cache.set(KEY, (now, speed, *blob))
    cache.set(STAMP_KEY, now)
    preview_state.forget()
    assert last_state(now, speed) is None
    answer = fleet_answer(CoreJob(id="asked", team="nlp", request=Request(gpus=1)), now=now)
    assert answer.preview.outcome in ("starts", "waits")


def test_nothing_is_kept_where_the_web_does_not_share_the_workers_cache(settings: pytest.FixtureRequest) -> None:
    settings.PREVIEW_STATE_PUBLISH = False  # type: ignore[attr-defined]
    _cycled()
    assert cache.get(STAMP_KEY) is None and cache.get(KEY) is None


def test_a_cache_that_fails_costs_the_preview_nothing_but_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _cycled()

    def down(*_args: object, **_kwargs: object) -> None:
        raise ConnectionError("cache down")

    monkeypatch.setattr(preview_state.cache, "get", down)
    monkeypatch.setattr(preview_state.cache, "set", down)
    publish(build(inventory_observation(0.0, 1.0), policy_at_speed(1.0), 0.0).snapshot, Plan(), 0.0, 1.0)
    assert last_state(clock.now.timestamp(), clock_speed()) is None
    answer = fleet_answer(CoreJob(id="asked", team="nlp", request=Request(gpus=1)), now=clock.now.timestamp())
    assert answer.preview.outcome in ("starts", "waits")


def test_the_preview_plans_with_the_cyclic_collector_paused_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collection inside the plans walked the web process's whole heap every third preview (bridge.preview)."""
    import gc

    import scheduler.bridge.preview as bridge_preview

    clock = _cycled()
    seen = []

    def planning(*args: Any, **kwargs: Any) -> Preview:
        seen.append(gc.isenabled())
        return preview(*args, **kwargs)

    monkeypatch.setattr(bridge_preview, "preview", planning)
    assert gc.isenabled()
    fleet_answer(CoreJob(id="asked", team="nlp", request=Request(gpus=1)), now=clock.now.timestamp())
    assert seen == [False] and gc.isenabled()


def test_the_state_is_packed_and_unpacked_to_an_equal_snapshot() -> None:
    """The packed pickling (preview_state.packed) rebuilds every engine dataclass with the values it had."""
    clock = _cycled()
    now, speed = clock.now.timestamp(), clock_speed()
    snapshot = build(inventory_observation(now, speed), policy_at_speed(speed), now).snapshot
    assert snapshot.pending and snapshot.running and snapshot.nodes and snapshot.teams
    again = preview_state.unpacked(preview_state.packed(snapshot))
    assert again == snapshot and again is not snapshot
    assert type(again.pending[0].priority) is type(snapshot.pending[0].priority)  # enums stay enums
    with pytest.raises(TypeError, match="not a snapshot"):
        preview_state.unpacked(pickle.dumps((1, 2)))


class _MadeOnlyWithArguments:
    """As a compiled (mypyc) class whose ``__init__`` is written in its body: its ``__new__`` asks for the fields."""

    def __new__(cls, node: str) -> _MadeOnlyWithArguments:
        return super().__new__(cls)


def test_a_class_that_cannot_be_made_blank_is_rebuilt_by_its_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled Slot refuses ``cls.__new__(cls)``: the packer rebuilds such a class by calling it with its fields
    in order. Here the source's Slot is taken for one (CI's ``make compiled-check`` runs this file on the compiled
    classes themselves)."""
    assert not preview_state._blank_allowed(_MadeOnlyWithArguments)
    clock = _cycled()
    now, speed = clock.now.timestamp(), clock_speed()
    snapshot = build(inventory_observation(now, speed), policy_at_speed(speed), now).snapshot
    slot = snapshot.running[0].slots[0][0]
    monkeypatch.setattr(preview_state, "_REDUCTIONS", {})
    monkeypatch.setattr(preview_state, "_blank_allowed", lambda cls: cls is not Slot)
    reduce = preview_state._reduction(Slot)
    assert reduce is not None and reduce(slot) == (
        Slot,
        (slot.node, slot.gpu, slot.mig_profile, slot.mig_start, slot.milli),
    )
    again = preview_state.unpacked(preview_state.packed(snapshot))
    assert again == snapshot and again.running[0].slots[0][0] is not slot
