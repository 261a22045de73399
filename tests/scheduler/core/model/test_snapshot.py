"""The snapshot's value types: a request states its size exactly one way; a team's quotas read by class."""

from __future__ import annotations

import pytest

from scheduler.core.model.snapshot import ModelProfile, Node, Request, Team

ONE_WAY = "state the request in exactly one way"


@pytest.mark.parametrize(
    "request_kwargs",
    [
        {"gpus": 2},
        {"mig_profile": "1g.10gb"},
        {"memory_gib": 20.0},
        {"model": ModelProfile(params_b=7)},
        {"gpu_milli": 250},
    ],
)
def test_a_request_stated_one_way_is_accepted(request_kwargs: dict[str, object]) -> None:
    request = Request(**request_kwargs)  # type: ignore[arg-type]
    ((key, value),) = request_kwargs.items()
    assert getattr(request, key) == value


@pytest.mark.parametrize(
    "request_kwargs",
    [{}, {"gpus": 1, "gpu_milli": 500}, {"mig_profile": "1g.10gb", "memory_gib": 10.0}],
)
def test_a_request_stated_no_way_or_two_ways_is_refused(request_kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=ONE_WAY):
        Request(**request_kwargs)  # type: ignore[arg-type]


TEAM = Team(name="t", guaranteed=(("A100", 2.0), ("any", 4.0)), burst=(("H100", 3.5),))


@pytest.mark.parametrize(
    ("gpu_class", "guaranteed", "burst"),
    [("A100", 2.0, None), ("any", 4.0, None), ("H100", None, 3.5), ("H200", None, None)],
)
def test_team_quotas_by_class(gpu_class: str, guaranteed: float | None, burst: float | None) -> None:
    assert TEAM.guaranteed_for(gpu_class) == guaranteed
    assert TEAM.burst_for(gpu_class) == burst


@pytest.mark.parametrize(("gpu", "layout"), [(0, (("7g.80gb", 0),)), (1, ()), (5, ())])
def test_a_node_layout_missing_or_empty_means_mig_off(gpu: int, layout: tuple[tuple[str, int], ...]) -> None:
    node = Node(name="n", gpu_model="A100-SXM4-80GB", gpu_count=8, mig=((("7g.80gb", 0),), ()))
    assert node.layout(gpu) == layout
