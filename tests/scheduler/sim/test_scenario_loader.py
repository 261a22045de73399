"""The scenario loader: every kind of invalid file is an error naming the file, the key path and the reason;
valid files become core types."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.core.model.snapshot import ModelProfile, Node, Request, Team
from scheduler.core.model.vocabulary import (
    CapacityTier,
    Dtype,
    Fabric,
    Interconnect,
    JobKind,
    JobTier,
    ModelMode,
    Priority,
)
from scheduler.sim import ScenarioError, load_scenario, parse_scenario
from scheduler.sim import scenario as sc

SOURCE = "cases/example.json"


def base() -> dict[str, Any]:
    return {
        "name": "base",
        "cycle_s": 10,
        "until": 3600,
        "policy": {"mig_reconfigure_s": 60},
        "cluster": {
            "nodes": [
                {"name": "dgx-1", "gpu_model": "A100-SXM4-80GB", "gpus": 8, "leaf": "leaf-1", "tier": "reserved"},
                {"name": "pcie-1", "gpu_model": "A100-PCIE-40GB", "gpus": 4, "interconnect": "nvlink-pairs"},
            ]
        },
        "teams": [{"name": "nlp", "guaranteed_gpus": 4, "burst_gpus": 8}, {"name": "vision"}],
        "events": [
            {"t": 0, "submit": {"id": "j1", "team": "nlp", "gpus": 1, "duration_s": 600}},
            {"t": 10, "observe": "later"},
        ],
    }


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation that sets ``value`` at a dotted path (integers index lists); ``...`` deletes the key."""

    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split("/")]
        target: Any = doc
        for part in parents:
            target = target[part]
        if value is ...:
            del target[last]
        elif isinstance(target, list) and last == len(target):
            target.append(value)
        else:
            target[last] = value

    return mutate


def _job(**keys: Any) -> dict[str, Any]:
    return {"id": "j9", "team": "nlp", "gpus": 1, "duration_s": 60, **keys}


def _submit(t: Any = 5, **keys: Any) -> Callable[[dict[str, Any]], None]:
    job = _job(**keys)
    for key, value in list(keys.items()):
        if value is ...:
            del job[key]
    return _set("events/2", {"t": t, "submit": job})


def _event(event: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return _set("events/2", event)


INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    # (case, mutation, key path, reason fragment)
    ("unknown top-level key", _set("colour", "blue"), "colour", "unknown key"),
    ("name not a string", _set("name", 3), "name", "non-empty string"),
    ("cycle_s zero", _set("cycle_s", 0), "cycle_s", "positive number"),
    ("cycle_s below a second", _set("cycle_s", 0.001), "cycle_s", "must be at least 1 s"),
    ("until infinite", _set("until", float("inf")), "until", "must be a number"),
    ("t infinite", _event({"t": float("inf"), "observe": "never"}), "events[2].t", "non-negative number"),
    ("t not a number", _event({"t": float("nan"), "observe": "never"}), "events[2].t", "non-negative number"),
    ("until negative", _set("until", -5), "until", "positive number"),
    ("until a string", _set("until", "1h"), "until", "must be a number"),
    ("cluster missing", _set("cluster", ...), "cluster", "required key is missing"),
    ("teams missing", _set("teams", ...), "teams", "required key is missing"),
    ("events not a list", _set("events", {}), "events", "must be a list"),
    ("cluster unknown key", _set("cluster/racks", []), "cluster.racks", "unknown key"),
    ("policy unknown key", _set("policy/speed", 1), "policy.speed", "unknown policy key"),
    ("policy wrong type", _set("policy/min_runtime_s", "5m"), "policy.min_runtime_s", "must be a number"),
    ("policy bool wrong type", _set("policy/fairness", 1), "policy.fairness", "true or false"),
    (
        "policy int wrong type",
        _set("policy/reconfiguration_hysteresis_cycles", 1.5),
        "policy.reconfiguration_hysteresis_cycles",
        "integer",
    ),
    ("policy cycle_s", _set("policy/cycle_s", 5), "policy.cycle_s", "top level"),
    ("policy not an object", _set("policy", []), "policy", "must be an object"),
    # nodes
    (
        "node unknown model",
        _set("cluster/nodes/0/gpu_model", "V100"),
        "cluster.nodes[0].gpu_model",
        "unknown GPU model",
    ),
    (
        "node model is a class",
        _set("cluster/nodes/0/gpu_model", "A100"),
        "cluster.nodes[0].gpu_model",
        "unknown GPU model",
    ),
    ("node gpus zero", _set("cluster/nodes/0/gpus", 0), "cluster.nodes[0].gpus", "integer between 1 and 64"),
    ("node gpus string", _set("cluster/nodes/0/gpus", "8"), "cluster.nodes[0].gpus", "must be an integer"),
    ("node gpus bool", _set("cluster/nodes/0/gpus", True), "cluster.nodes[0].gpus", "must be an integer"),
    ("node name missing", _set("cluster/nodes/0/name", ...), "cluster.nodes[0].name", "required key is missing"),
    ("node unknown key", _set("cluster/nodes/0/rack", "r1"), "cluster.nodes[0].rack", "unknown key"),
    (
        "node bad interconnect",
        _set("cluster/nodes/0/interconnect", "infiniband"),
        "cluster.nodes[0].interconnect",
        "one of nvswitch",
    ),
    ("node bad tier", _set("cluster/nodes/0/tier", "preemptible"), "cluster.nodes[0].tier", "one of reserved"),
    (
        "node negative price",
        _set("cluster/nodes/0/price_per_gpu_hour", -1),
        "cluster.nodes[0].price_per_gpu_hour",
        "≥ 0",
    ),
    ("node sharing not bool", _set("cluster/nodes/0/sharing", "yes"), "cluster.nodes[0].sharing", "true or false"),
    ("node bad fabric", _set("cluster/nodes/0/fabric", "myrinet"), "cluster.nodes[0].fabric", "one of tcp, efa"),
    (
        "node placement group not text",
        _set("cluster/nodes/0/placement_group", 7),
        "cluster.nodes[0].placement_group",
        "",
    ),
    ("duplicate node", _set("cluster/nodes/1/name", "dgx-1"), "cluster.nodes[1].name", "duplicate node name"),
    ("node not an object", _set("cluster/nodes/1", "pcie-1"), "cluster.nodes[1]", "must be an object"),
    # MIG layouts
    (
        "mig GPU index out of range",
        _set("cluster/nodes/0/mig", {"8": "all-balanced"}),
        "cluster.nodes[0].mig.8",
        "GPU index from 0 to 7",
    ),
    (
        "mig GPU index not a number",
        _set("cluster/nodes/0/mig", {"first": "all-balanced"}),
        "cluster.nodes[0].mig.first",
        "GPU index",
    ),
    (
        "mig unknown profile",
        _set("cluster/nodes/0/mig", {"0": ["3g.40gb", "5g.50gb"]}),
        "cluster.nodes[0].mig.0[1]",
        "not a MIG profile of A100-SXM4-80GB",
    ),
    (
        "mig profile of another model",
        _set("cluster/nodes/0/mig", {"0": ["1g.5gb"]}),
        "cluster.nodes[0].mig.0[0]",
        "not a MIG profile",
    ),
    (
        "mig profiles that do not fit",
        _set("cluster/nodes/0/mig", {"0": ["4g.40gb", "4g.40gb"]}),
        "cluster.nodes[0].mig.0",
        "do not fit together",
    ),
    (
        "mig pair bad start",
        _set("cluster/nodes/0/mig", {"0": [["3g.40gb", 2]]}),
        "cluster.nodes[0].mig.0",
        "cannot start at memory slice 2",
    ),
    (
        "mig pairs overlap",
        _set("cluster/nodes/0/mig", {"0": [["4g.40gb", 0], ["2g.20gb", 2]]}),
        "cluster.nodes[0].mig.0",
        "overlaps",
    ),
    (
        "mig pair malformed",
        _set("cluster/nodes/0/mig", {"0": [["3g.40gb"]]}),
        "cluster.nodes[0].mig.0",
        "[profile, start] pair",
    ),
    (
        "mig mixed list",
        _set("cluster/nodes/0/mig", {"0": ["1g.10gb", ["3g.40gb", 4]]}),
        "cluster.nodes[0].mig.0",
        "not a mix",
    ),
    (
        "mig unknown config name",
        _set("cluster/nodes/0/mig", "all-3g.20gb"),
        "cluster.nodes[0].mig",
        "unknown MIG config",
    ),
    ("mig all-enabled", _set("cluster/nodes/0/mig", {"2": "all-enabled"}), "cluster.nodes[0].mig.2", "no instance"),
    ("mig wrong type", _set("cluster/nodes/0/mig", 7), "cluster.nodes[0].mig", "must be an object"),
    ("mig GPU entry wrong type", _set("cluster/nodes/0/mig", {"0": 7}), "cluster.nodes[0].mig.0", "must be a list"),
    # teams
    ("team unknown key", _set("teams/0/quota", 4), "teams[0].quota", "unknown key"),
    ("team name missing", _set("teams/1/name", ...), "teams[1].name", "required key is missing"),
    ("duplicate team", _set("teams/1/name", "nlp"), "teams[1].name", "duplicate team name"),
    ("team burst below guarantee", _set("teams/0/burst_gpus", 2), "teams[0].burst_gpus", "≥ guaranteed_gpus"),
    ("team negative guarantee", _set("teams/0/guaranteed_gpus", -1), "teams[0].guaranteed_gpus", "≥ 0"),
    ("team weight zero", _set("teams/0/weight", 0), "teams[0].weight", "positive number"),
    ("team guarantee huge", _set("teams/0/guaranteed_gpus", 1e308), "teams[0].guaranteed_gpus", "at most 1,000,000"),
    ("team weight huge", _set("teams/0/weight", 1e9), "teams[0].weight", "at most 1,000"),
    ("team unknown class", _set("teams/0/guaranteed", {"V100": 2}), "teams[0].guaranteed.V100", "unknown GPU class"),
    (
        "team class burst below class guarantee",
        lambda d: d["teams"][0].update(guaranteed={"H100": 2}, burst={"H100": 1}),
        "teams[0].burst.H100",
        "≥ guaranteed.H100",
    ),
    ("teams not a list", _set("teams", {"nlp": {}}), "teams", "must be a list"),
    ("team not an object", _set("teams/1", "vision"), "teams[1]", "must be an object"),
    ("team classes not an object", _set("teams/0/burst", 4), "teams[0].burst", "must be an object"),
    ("submit not an object", _event({"t": 5, "submit": "j9"}), "events[2].submit", "must be an object"),
    ("model not an object", _submit(gpus=..., model=7), "events[2].submit.model", "must be an object"),
    ("interrupt not an object", _event({"t": 5, "interrupt": "dgx-1"}), "events[2].interrupt", "must be an object"),
    (
        "interrupt unknown key",
        _event({"t": 5, "interrupt": {"node": "dgx-1", "notice_s": 5, "reason": "spot"}}),
        "events[2].interrupt.reason",
        "unknown key",
    ),
    (
        "set_priority not an object",
        _event({"t": 5, "set_priority": "j1"}),
        "events[2].set_priority",
        "must be an object",
    ),
    ("remove_node not a string", _event({"t": 5, "remove_node": {"name": "dgx-1"}}), "events[2].remove_node", "string"),
    # events
    ("event without t", _event({"observe": "x"}), "events[2].t", "required key is missing"),
    ("negative t", _event({"t": -1, "observe": "x"}), "events[2].t", "non-negative number"),
    ("t a string", _event({"t": "10", "observe": "x"}), "events[2].t", "non-negative number"),
    ("t a boolean", _event({"t": True, "observe": "x"}), "events[2].t", "non-negative number"),
    ("t after until", _event({"t": 4000, "observe": "x"}), "events[2].t", "after until"),
    ("unknown event type", _event({"t": 5, "explode": "dgx-1"}), "events[2].explode", "unknown event type"),
    ("two event types", _event({"t": 5, "cancel": "j1", "finish": "j1"}), "events[2]", "exactly one of"),
    ("event not an object", _event(["t", 5]), "events[2]", "must be an object"),
    # submit
    ("job unknown team", _submit(team="robotics"), "events[2].submit.team", "unknown team 'robotics'"),
    ("duplicate job id", _submit(id="j1"), "events[2].submit.id", "duplicate job id 'j1'"),
    ("two requests", _submit(mig_profile="3g.40gb"), "events[2].submit", "exactly one way"),
    ("no request", _submit(gpus=...), "events[2].submit", "found none"),
    ("gpus zero", _submit(gpus=0), "events[2].submit.gpus", "at least 1 and at most 64"),
    ("gpus fractional", _submit(gpus=1.5), "events[2].submit.gpus", "must be an integer"),
    (
        "unknown mig profile",
        _submit(gpus=..., mig_profile="9g.90gb"),
        "events[2].submit.mig_profile",
        "not a MIG profile of any catalog GPU",
    ),
    (
        "mig profile of another class",
        _submit(gpus=..., mig_profile="1g.5gb", gpu_model="H100"),
        "events[2].submit.mig_profile",
        "not a MIG profile of a H100",
    ),
    ("gpu_milli a whole GPU", _submit(gpus=..., gpu_milli=1000), "events[2].submit.gpu_milli", "between 1 and 999"),
    ("memory_gib negative", _submit(gpus=..., memory_gib=-4), "events[2].submit.memory_gib", "at least 0.01"),
    (
        "model without params",
        _submit(gpus=..., model={"dtype": "bf16"}),
        "events[2].submit.model.params_b",
        "required key is missing",
    ),
    (
        "model bad dtype",
        _submit(gpus=..., model={"params_b": 7, "dtype": "fp4"}),
        "events[2].submit.model.dtype",
        "one of bf16",
    ),
    (
        "model unknown key",
        _submit(gpus=..., model={"params_b": 7, "layers": 32}),
        "events[2].submit.model.layers",
        "unknown key",
    ),
    (
        "model context zero",
        _submit(gpus=..., model={"params_b": 7, "context": 0}),
        "events[2].submit.model.context",
        "at least 1 and at most 10,000,000",
    ),
    ("bad kind", _submit(kind="serving"), "events[2].submit.kind", "one of training, inference, batch"),
    ("bad priority", _submit(priority="urgent"), "events[2].submit.priority", "one of production"),
    ("bad tier", _submit(tier="spot"), "events[2].submit.tier", "one of any, reserved-only, spot-ok"),
    ("replicas zero", _submit(replicas=0), "events[2].submit.replicas", "at least 1 and at most 512"),
    ("preemptible a string", _submit(preemptible="yes"), "events[2].submit.preemptible", "true or false"),
    (
        "consolidate a string",
        _submit(consolidate="no"),
        "events[2].submit.consolidate",
        "must be true (production started on larger capacity may be moved to its right-sized slice, the default) "
        "or false (the job stays where it starts), got 'no'",
    ),
    ("consolidate and another problem", _submit(consolidate=1, gpus=0), "events[2].submit.gpus", "got 0"),
    ("duration zero", _submit(duration_s=0), "events[2].submit.duration_s", "positive number"),
    (
        "checkpoint interval negative",
        _submit(checkpoint_interval_s=-1),
        "events[2].submit.checkpoint_interval_s",
        "positive",
    ),
    (
        "unknown gpu_model constraint",
        _submit(gpu_model="B200"),
        "events[2].submit.gpu_model",
        "unknown GPU model or class",
    ),
    ("rank fractional", _submit(rank=1.5), "events[2].submit.rank", "must be an integer"),
    ("job unknown key", _submit(deadline=5), "events[2].submit.deadline", "unknown key"),
    ("job id missing", _submit(id=...), "events[2].submit.id", "required key is missing"),
    ("command not a list", _submit(command="python train.py"), "events[2].submit.command", "must be a list"),
    ("env value not a string", _submit(env={"SEED": 1}), "events[2].submit.env.SEED", "must be a string"),
    ("expect inside a job", _submit(expect=[]), "events[2].submit.expect", "unknown key"),
    # other events
    ("cancel unknown job", _event({"t": 5, "cancel": "nope"}), "events[2].cancel", "unknown job 'nope'"),
    (
        "finish before submit",
        lambda d: d["events"].extend([{"t": 5, "finish": "late"}, {"t": 6, "submit": _job(id="late")}]),
        "events[2].finish",
        "no submit before",
    ),
    ("checkpoint not a string", _event({"t": 5, "checkpoint": 3}), "events[2].checkpoint", "non-empty string"),
    (
        "set_priority neither",
        _event({"t": 5, "set_priority": {"job": "j1"}}),
        "events[2].set_priority",
        "a priority, a rank or both",
    ),
    (
        "set_priority bad priority",
        _event({"t": 5, "set_priority": {"job": "j1", "priority": "top"}}),
        "events[2].set_priority.priority",
        "one of production",
    ),
    (
        "set_priority unknown job",
        _event({"t": 5, "set_priority": {"job": "x", "rank": 1}}),
        "events[2].set_priority.job",
        "unknown job 'x'",
    ),
    (
        "interrupt unknown node",
        _event({"t": 5, "interrupt": {"node": "gpu-9", "notice_s": 30}}),
        "events[2].interrupt.node",
        "unknown node 'gpu-9'",
    ),
    (
        "interrupt without notice",
        _event({"t": 5, "interrupt": {"node": "dgx-1"}}),
        "events[2].interrupt.notice_s",
        "required key is missing",
    ),
    (
        "interrupt twice",
        lambda d: d["events"].extend(
            [
                {"t": 5, "interrupt": {"node": "dgx-1", "notice_s": 60}},
                {"t": 6, "interrupt": {"node": "dgx-1", "notice_s": 60}},
            ]
        ),
        "events[3].interrupt.node",
        "already under an interruption notice",
    ),
    (
        "interrupt after the node is gone",
        lambda d: d["events"].extend(
            [{"t": 5, "interrupt": {"node": "dgx-1", "notice_s": 60}}, {"t": 65, "remove_node": "dgx-1"}]
        ),
        "events[3].remove_node",
        "not in the cluster at t=65",
    ),
    ("remove unknown node", _event({"t": 5, "remove_node": "gpu-9"}), "events[2].remove_node", "unknown node 'gpu-9'"),
    (
        "add existing node",
        _event({"t": 5, "add_node": {"name": "dgx-1", "gpu_model": "H100-SXM5-80GB", "gpus": 8}}),
        "events[2].add_node.name",
        "already exists",
    ),
    (
        "add node with bad model",
        _event({"t": 5, "add_node": {"name": "h-1", "gpu_model": "H100", "gpus": 8}}),
        "events[2].add_node.gpu_model",
        "unknown GPU model",
    ),
    (
        "set_quota bad team",
        _event({"t": 5, "set_quota": {"name": "nlp", "weight": -1}}),
        "events[2].set_quota.weight",
        "positive number",
    ),
    ("observe final", _event({"t": 5, "observe": "final"}), "events[2].observe", "names the final state"),
    (
        "observe duplicate label",
        _event({"t": 15, "observe": "later"}),
        "events[2].observe",
        "already used at events[1].observe",
    ),
    ("observe empty label", _event({"t": 5, "observe": ""}), "events[2].observe", "non-empty string"),
    (
        "no until and a job without duration",
        lambda d: _drop_until_and_duration(d),
        "events[0].submit.duration_s",
        "no until",
    ),
]


def _expect_error(mutate: Callable[[dict[str, Any]], None]) -> list[str]:
    doc = base()
    mutate(doc)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(doc, source=SOURCE)
    assert caught.value.source == SOURCE
    assert all(message.startswith(f"{SOURCE}: ") for message in caught.value.errors), caught.value.errors
    return caught.value.errors


@pytest.mark.parametrize(("mutate", "path", "reason"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_file_names_the_path_and_the_reason(mutate, path: str, reason: str) -> None:
    errors = _expect_error(mutate)
    wanted = f"{SOURCE}: {path}: "
    matching = [e for e in errors if e.startswith(wanted) and reason in e[len(wanted) :]]
    assert matching, f"no error at {path!r} mentioning {reason!r}; got:\n" + "\n".join(errors)


def _drop_until_and_duration(doc: dict[str, Any]) -> None:
    doc.pop("until")
    del doc["events"][0]["submit"]["duration_s"]


def test_the_base_document_is_valid() -> None:
    parse_scenario(base(), source=SOURCE)


def test_a_node_states_its_fabric_and_placement_group_and_has_none_unless_it_does() -> None:
    doc = base()
    doc["cluster"]["nodes"][0].update({"fabric": "efa", "placement_group": "pg-1"})
    first, second = parse_scenario(doc, source=SOURCE).nodes[:2]
    assert (first.fabric, first.placement_group) == (Fabric.EFA, "pg-1")
    assert (second.fabric, second.placement_group) == (Fabric.TCP, "")


def test_every_problem_is_reported_in_one_error() -> None:
    doc = base()
    doc["colour"] = "blue"
    doc["cluster"]["nodes"][0]["gpus"] = 0
    doc["events"].append({"t": -1, "submit": {"id": "x", "team": "robotics"}})
    errors = _expect_error(lambda d: d.update(doc))
    assert len(errors) == 4, errors  # the unknown team of an invalid job is not checked: the job is not built
    assert str(ScenarioError(SOURCE, errors)) == "\n".join(errors)


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(ScenarioError, match=r"cases/example.json: must be an object"):
        parse_scenario([1, 2], source=SOURCE)


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"name": "x",\n  "cycle_s": }\n')
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.errors[0].startswith(f"{path}:2:")


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"nope\.json: no such file"):
        load_scenario(tmp_path / "nope.json")


def test_expect_is_accepted_at_the_top_level_and_kept_verbatim() -> None:
    doc = base()
    doc["expect"] = [{"at": "final", "job": "j1", "state": "completed"}]
    scenario = parse_scenario(doc, source=SOURCE)
    assert scenario.expect == doc["expect"]


def test_until_may_be_left_out_when_every_job_has_a_duration() -> None:
    doc = base()
    del doc["until"]
    assert parse_scenario(doc, source=SOURCE).until is None


# -- conversion to core types --------------------------------------------------------------------------------


def _valid(mutate: Callable[[dict[str, Any]], None] | None = None) -> sc.Scenario:
    doc = base()
    if mutate:
        mutate(doc)
    return parse_scenario(doc, source=SOURCE)


def test_nodes_become_core_nodes() -> None:
    scenario = _valid(_set("cluster/nodes/1/price_per_gpu_hour", 1.5))
    assert scenario.nodes[0] == Node(
        name="dgx-1", gpu_model="A100-SXM4-80GB", gpu_count=8, leaf="leaf-1", tier=CapacityTier.RESERVED
    )
    assert scenario.nodes[1].interconnect == Interconnect.NVLINK_PAIRS
    assert scenario.nodes[1].price_per_gpu_hour == 1.5
    assert scenario.nodes[1].tier == CapacityTier.ON_DEMAND


BALANCED_80GB = (("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4))


@pytest.mark.parametrize(
    ("mig", "expected"),
    [
        ("all-balanced", (BALANCED_80GB,) * 8),
        ("all-disabled", ((),) * 8),
        ({"1": "all-7g.80gb"}, ((), (("7g.80gb", 0),), (), (), (), (), (), ())),
        ({"0": ["3g.40gb", "4g.40gb"]}, ((("4g.40gb", 0), ("3g.40gb", 4)), *((),) * 7)),
        ({"0": [["3g.40gb", 4], ["2g.20gb", 0]]}, ((("2g.20gb", 0), ("3g.40gb", 4)), *((),) * 7)),
        ({"7": ["1g.20gb", "2g.20gb", "3g.40gb"]}, (*((),) * 7, (("2g.20gb", 0), ("1g.20gb", 2), ("3g.40gb", 4)))),
    ],
    ids=["named for all", "all-disabled", "named per GPU", "profiles placed", "pairs sorted", "mixed sizes placed"],
)
def test_mig_layouts(mig: Any, expected: tuple[Any, ...]) -> None:
    node = _valid(_set("cluster/nodes/0/mig", mig)).nodes[0]
    if mig == {"7": ["1g.20gb", "2g.20gb", "3g.40gb"]}:
        # place_profiles chooses the starts; what matters is that the layout is legal and complete
        assert sorted(p for p, _ in node.mig[7]) == ["1g.20gb", "2g.20gb", "3g.40gb"]
        assert node.mig[:7] == expected[:7]
    else:
        assert node.mig == expected


def test_teams_become_core_teams() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["teams"].append({"name": "rl", "weight": 2, "guaranteed": {"H100": 2}, "burst": {"H100": 4}})

    teams = _valid(mutate).teams
    assert teams[0] == Team(name="nlp", guaranteed=(("any", 4.0),), burst=(("any", 8.0),))
    assert teams[1] == Team(name="vision")
    assert teams[2] == Team(name="rl", weight=2.0, guaranteed=(("H100", 2.0),), burst=(("H100", 4.0),))


def test_jobs_become_core_jobs() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["events"].append(
            {
                "t": 30,
                "submit": {
                    "id": "i1",
                    "team": "vision",
                    "project": "search",
                    "kind": "inference",
                    "priority": "production",
                    "model": {"params_b": 7, "dtype": "int8", "context": 2048, "batch": 4, "mode": "inference"},
                    "replicas": 2,
                    "gpu_model": "A100",
                    "preemptible": False,
                    "tier": "reserved-only",
                    "rank": -1,
                    "name": "chat",
                    "image": "vllm:latest",
                    "command": ["serve"],
                    "env": {"A": "1"},
                },
            }
        )

    job = next(
        e.action.job for e in _valid(mutate).events if isinstance(e.action, sc.Submit) and e.action.job.id == "i1"
    )
    assert job.request == Request(
        model=ModelProfile(params_b=7.0, dtype=Dtype.INT8, context=2048, batch=4, mode=ModelMode.INFERENCE)
    )
    assert (job.kind, job.priority, job.tier) == (JobKind.INFERENCE, Priority.PRODUCTION, JobTier.RESERVED_ONLY)
    assert (job.replicas, job.gpu_model, job.rank, job.project, job.submitted_at) == (2, "A100", -1, "search", 30.0)
    assert job.duration_s is None


@pytest.mark.parametrize(
    ("request_keys", "expected"),
    [
        ({"gpus": 4}, Request(gpus=4)),
        ({"gpus": 2.0}, Request(gpus=2)),
        ({"mig_profile": "2g.10gb"}, Request(mig_profile="2g.10gb")),
        ({"memory_gib": 12.5}, Request(memory_gib=12.5)),
        ({"gpu_milli": 250}, Request(gpu_milli=250)),
    ],
)
def test_requests(request_keys: dict[str, Any], expected: Request) -> None:
    scenario = _valid(lambda d: d["events"].append({"t": 1, "submit": {"id": "r", "team": "nlp", **request_keys}}))
    job = next(e.action.job for e in scenario.events if isinstance(e.action, sc.Submit) and e.action.job.id == "r")
    assert job.request == expected


def test_events_are_sorted_by_time_then_file_order() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["events"] = [
            {"t": 20, "observe": "c"},
            {"t": 5, "submit": _job(id="a")},
            {"t": 20, "cancel": "a"},
            {"t": 5, "set_priority": {"job": "a", "priority": "high", "rank": 2}},
            {"t": 7, "interrupt": {"node": "pcie-1", "notice_s": 0}},
            {"t": 8, "add_node": {"name": "pcie-1", "gpu_model": "A100-PCIE-40GB", "gpus": 4}},
            {"t": 9, "set_quota": {"name": "robotics", "guaranteed_gpus": 1}},
            {"t": 9, "submit": _job(id="b", team="robotics")},
            {"t": 10, "checkpoint": "a"},
            {"t": 11, "finish": "b"},
            {"t": 12, "remove_node": "dgx-1"},
        ]

    scenario = _valid(mutate)
    assert [e.index for e in scenario.events] == [1, 3, 4, 5, 6, 7, 8, 9, 10, 0, 2]
    kinds = [type(e.action).__name__ for e in scenario.events]
    assert kinds == [
        "Submit",
        "SetPriority",
        "Interrupt",
        "AddNode",
        "SetQuota",
        "Submit",
        "Checkpoint",
        "Finish",
        "RemoveNode",
        "Observe",
        "Cancel",
    ]
    assert scenario.events[1].action == sc.SetPriority("a", Priority.HIGH, 2)
    assert scenario.events[2].action == sc.Interrupt("pcie-1", 0.0)


def test_policy_takes_the_scenario_cycle() -> None:
    scenario = _valid(_set("policy/fairness", False))
    assert scenario.cycle_s == scenario.policy.cycle_s == 10.0
    assert scenario.policy.mig_reconfigure_s == 60.0
    assert scenario.policy.fairness is False


def test_defaults() -> None:
    doc = base()
    for key in ("name", "cycle_s", "policy"):
        del doc[key]
    scenario = parse_scenario(doc, source="dir/my-case.json")
    assert scenario.name == "my-case"
    assert scenario.cycle_s == 10.0
    assert scenario.until == 3600.0


def test_load_scenario_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(base()))
    scenario = load_scenario(path)
    assert scenario.source == str(path)
    assert scenario.name == "base"


def test_a_job_may_opt_out_of_consolidation() -> None:
    """``consolidate`` (docs/job-spec.md): true by default, false keeps production where it starts."""
    opted_out = _valid(_submit(consolidate=False))
    stated = _valid(_submit(consolidate=True))
    default = _valid(_submit())
    jobs = [
        next(e.action.job for e in s.events if isinstance(e.action, sc.Submit) and e.action.job.id == "j9")
        for s in (opted_out, stated, default)
    ]
    assert [job.consolidate for job in jobs] == [False, True, True]
