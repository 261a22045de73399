"""scheduler.core.sizing.bounds: the one table of job-request ranges, as the engine reads it."""

from __future__ import annotations

import math

import pytest

from scheduler.core import bounds
from scheduler.core.model.snapshot import Job, ModelProfile, Request


def _job(request: Request | None = None, **fields: object) -> Job:
    return Job(id="j", team="t", request=request or Request(gpus=1), **fields)  # type: ignore[arg-type]


def test_a_job_inside_every_bound_has_no_problem() -> None:
    model = ModelProfile(params_b=bounds.MAX_PARAMS_B, context=bounds.MAX_CONTEXT, batch=bounds.MAX_BATCH)
    assert bounds.job_problems(_job(Request(model=model), replicas=512, duration_s=bounds.MAX_SECONDS)) == []
    assert bounds.job_problems(_job(Request(memory_gib=bounds.MIN_MEMORY_GIB), rank=-bounds.MAX_RANK)) == []
    assert bounds.job_problems(_job(Request(gpu_milli=8000))) == []  # a trace's whole GPUs in milli-GPU


@pytest.mark.parametrize(
    ("job", "key", "words"),
    [
        (_job(Request(gpus=0)), "gpus", "at least 1 and at most 64, got 0"),
        (_job(Request(gpus=10**400)), "gpus", "an integer of about 401 digits"),
        (_job(Request(gpu_milli=0)), "gpu_milli", "at least 1"),
        (_job(Request(memory_gib=math.nan)), "memory_gib", "got nan"),
        (_job(Request(memory_gib=0.001)), "memory_gib", "at least 0.01 and at most 1,128"),
        (_job(Request(memory_gib=1e308)), "memory_gib", "got 1e+308"),
        (_job(Request(model=ModelProfile(params_b=1e300))), "model.params_b", "a positive number, at most 2,000"),
        (_job(Request(model=ModelProfile(params_b=0.0))), "model.params_b", "positive"),
        (_job(Request(model=ModelProfile(params_b=7, context=10**300))), "model.context", "about 301 digits"),
        (_job(Request(model=ModelProfile(params_b=7, batch=0))), "model.batch", "at least 1"),
        (_job(replicas=0), "replicas", "at least 1 and at most 512"),
        (_job(duration_s=math.inf), "duration_s", "got inf"),
        (_job(duration_s=-1.0), "duration_s", "positive"),
        (_job(checkpoint_interval_s=bounds.MAX_SECONDS + 1.0), "checkpoint_interval_s", "at most 31,536,000"),
        (_job(rank=2**40), "rank", "2,147,483,647"),
        (_job(Request(gpus="8")), "gpus", "must be a number, got '8'"),  # type: ignore[arg-type]
        (_job(replicas=True), "replicas", "must be a number, got True"),  # type: ignore[arg-type]
    ],
)
def test_a_number_outside_its_bound_is_named_with_the_bound(job: Job, key: str, words: str) -> None:
    problems = dict(bounds.job_problems(job))
    assert key in problems and words in problems[key], problems


def test_bounds_read_as_a_person_writes_them() -> None:
    assert bounds.out_of_bounds("gpus", 8) is None
    assert bounds.out_of_bounds("memory_gib", 0.0) == "must be at least 0.01 and at most 1,128, got 0"
    assert bounds.out_of_bounds("duration_s", 0) == "must be a positive number, at most 31,536,000, got 0"
    assert bounds.Bound(0.5, 2.25, low_open=True).text() == "above 0.50 and at most 2.25"
    assert bounds.out_of_bounds("rank", 10**38).endswith(f"got {10**38}")  # short enough to write whole
    assert bounds.out_of_bounds("rank", 1e37).endswith("got 1e+37")


def test_the_memory_bound_is_the_largest_gpu_times_the_gpus_of_one_replica() -> None:
    # H200 141 GB (144,384 MiB) × 8 GPUs per replica.
    assert pytest.approx(144_384 * 8 / 1024) == bounds.MAX_MEMORY_GIB


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("llama-7b", None),
        ("ünïcødé ✓", None),
        ("a\x00b", "must not contain a NUL character"),
        ("a\ud800b", "must be valid Unicode text (it holds a lone surrogate)"),
    ],
)
def test_text_that_cannot_be_stored_is_named(text: str, problem: str | None) -> None:
    assert bounds.text_problem(text) == problem
