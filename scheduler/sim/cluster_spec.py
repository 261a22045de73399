"""Nodes and teams of a scenario file (spec/scenario.md, "Input") → core :class:`Node` and :class:`Team`.

MIG layouts are written per GPU index, as a named GPU Operator config (``"all-balanced"``), a list of
profiles the engine places (``["3g.40gb", "2g.20gb"]``), or explicit ``[profile, start]`` pairs; a single
name for ``mig`` applies to every GPU. A GPU the file does not mention has MIG off (a whole GPU).

Extension (documented in the spec's spirit): ``"sharing": true`` on a node marks its MIG-off GPUs as
time-sliced, so milli-GPU requests (a job's ``gpu_milli``) may share them. ``"fabric"`` (``tcp`` — none, the
default —, ``efa``, ``gpudirect-tcpx``, ``gpudirect-tcpxo``, ``infiniband``) and ``"placement_group"`` state the
network a gang spanning the node talks over and the cloud placement group it belongs to: the engine's fabric
rule reads them, and the topology model charges TCP speed to a multi-node run on nodes without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.gpus import catalog
from scheduler.core.model.snapshot import MigLayout, Node, Team
from scheduler.core.model.vocabulary import CapacityTier, Fabric, Interconnect
from scheduler.specs.fields import (
    Errors,
    check_keys,
    describe,
    join,
    read_bool,
    read_choice,
    read_int,
    read_list,
    read_number,
    read_object,
    read_str,
)

NODE_KEYS = (
    "name",
    "gpu_model",
    "gpus",
    "interconnect",
    "leaf",
    "spine",
    "zone",
    "tier",
    "price_per_gpu_hour",
    "mig",
    "sharing",
    "fabric",
    "placement_group",
)
TEAM_KEYS = ("name", "guaranteed_gpus", "burst_gpus", "weight", "guaranteed", "burst")
# MIG on with no instance leaves nothing to schedule, and an empty layout means "MIG off" to the engine.
UNSCHEDULABLE_CONFIGS = ("all-enabled",)

# Upper bounds of a scenario's figures: beyond them the engine's integer units and the cost sums overflow, and
# no real cluster comes near (a million GPUs per quota, $10,000 per GPU-hour, a weight of 1,000).
MAX_QUOTA_GPUS = 1_000_000.0
MAX_PRICE = 10_000.0
MAX_WEIGHT = 1_000.0


def parse_node(errors: Errors, path: str, value: Any) -> Node | None:
    """A node object, or None after recording every problem with it."""
    data = read_object(errors, path, value)
    if data is None:
        return None
    check_keys(errors, path, data, NODE_KEYS, required=("name", "gpu_model", "gpus"))
    before = len(errors.messages)
    name = read_str(errors, join(path, "name"), data["name"]) if "name" in data else None
    model = _read_model(errors, join(path, "gpu_model"), data["gpu_model"]) if "gpu_model" in data else None
    gpus = read_int(errors, join(path, "gpus"), data["gpus"], minimum=1, maximum=64) if "gpus" in data else None
    interconnect = _optional_choice(errors, path, data, "interconnect", Interconnect, Interconnect.NVSWITCH)
    tier = _optional_choice(errors, path, data, "tier", CapacityTier, CapacityTier.ON_DEMAND)
    fabric = _optional_choice(errors, path, data, "fabric", Fabric, Fabric.TCP)  # none stated: none
    topology = {
        key: read_str(errors, join(path, key), data[key], allow_empty=True) or "" if key in data else ""
        for key in ("leaf", "spine", "zone", "placement_group")
    }
    price = 0.0
    if "price_per_gpu_hour" in data:
        price = (
            read_number(errors, join(path, "price_per_gpu_hour"), data["price_per_gpu_hour"], maximum=MAX_PRICE) or 0.0
        )
    sharing = bool(read_bool(errors, join(path, "sharing"), data["sharing"])) if "sharing" in data else False
    mig: tuple[MigLayout, ...] = ()
    if "mig" in data and model is not None and gpus is not None:
        mig = parse_mig(errors, join(path, "mig"), data["mig"], model, gpus)
    if len(errors.messages) > before or name is None or model is None or gpus is None:
        return None
    return Node(
        name=name,
        gpu_model=model,
        gpu_count=gpus,
        interconnect=interconnect,
        leaf=topology["leaf"],
        spine=topology["spine"],
        zone=topology["zone"],
        tier=tier,
        price_per_gpu_hour=price,
        mig=mig,
        sharing=sharing,
        fabric=fabric,
        placement_group=topology["placement_group"],
    )


def _read_model(errors: Errors, path: str, value: Any) -> str | None:
    if not isinstance(value, str) or value not in catalog.GPU_MODEL_BY_NAME:
        known = ", ".join(catalog.GPU_MODEL_BY_NAME)
        errors.add(path, f"unknown GPU model {describe(value)}; a node needs one of the catalog's models: {known}")
        return None
    return value


def _optional_choice(errors: Errors, path: str, data: Mapping[str, Any], key: str, enum: Any, default: Any) -> Any:
    if key not in data:
        return default
    return read_choice(errors, join(path, key), data[key], enum) or default


def parse_mig(errors: Errors, path: str, value: Any, model: str, gpu_count: int) -> tuple[MigLayout, ...]:
    """Per-GPU layouts for a node's ``mig`` key; GPUs left out have MIG off."""
    spec = catalog.GPU_MODEL_BY_NAME[model]
    if not spec.mig_capable:
        errors.add(path, f"{model} is not MIG-capable; remove the mig key")
        return ()
    if isinstance(value, str):
        layout = _layout(errors, path, value, model)
        return tuple(layout or () for _ in range(gpu_count))
    data = read_object(errors, path, value)
    if data is None:
        return ()
    layouts: list[MigLayout] = [() for _ in range(gpu_count)]
    for key, entry in data.items():
        where = join(path, key)
        if not (key.isascii() and key.isdigit()) or int(key) >= gpu_count:
            errors.add(where, f"must be a GPU index from 0 to {gpu_count - 1}, written as a string")
            continue
        layouts[int(key)] = _layout(errors, where, entry, model) or ()
    return tuple(layouts)


def _layout(errors: Errors, path: str, value: Any, model: str) -> MigLayout | None:
    """One GPU's layout: a named config, a list of profiles to place, or a list of ``[profile, start]`` pairs."""
    from scheduler.core.sizing import layouts  # the MIG helper's module; imported late so a missing name reads clearly

    if isinstance(value, str):
        if value in UNSCHEDULABLE_CONFIGS:
            errors.add(path, f"{value!r} enables MIG with no instance, which leaves nothing to schedule")
            return None
        try:
            return tuple(layouts.named_layout(model, value))
        except (ValueError, KeyError) as exc:
            errors.add(path, _reason(exc))
            return None
    items = read_list(errors, path, value)
    if items is None:
        return None
    profiles = catalog.GPU_MODEL_BY_NAME[model].profiles()
    if all(isinstance(item, str) for item in items):
        unknown = [i for i, item in enumerate(items) if item not in profiles]
        for i in unknown:
            errors.add(
                join(path, i),
                f"{describe(items[i])} is not a MIG profile of {model}; use one of: {', '.join(profiles)}",
            )
        if unknown:
            return None
        placed = layouts.place_profiles(model, items)
        if placed is None:
            errors.add(path, f"these profiles do not fit together on one {model}: {', '.join(items)}")
            return None
        return tuple(placed)
    if all(isinstance(item, list) for item in items):
        try:
            return tuple((name, start) for name, start in catalog.validate_layout(model, items))
        except catalog.LayoutError as exc:
            errors.add(path, str(exc))
            return None
    errors.add(path, 'write either profile names ["3g.40gb", "2g.20gb"] or [profile, start] pairs, not a mix')
    return None


def _reason(exc: Exception) -> str:
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def parse_team(errors: Errors, path: str, value: Any) -> Team | None:
    """A team object: overall and per-class guarantees and burst limits in GPU-equivalents, and a weight.

    Written as ``scheduler.core.rules.fairshare`` reads a :class:`Team`: ``guaranteed_gpus`` / ``burst_gpus`` become
    the ``"any"`` entries, the ``guaranteed`` / ``burst`` maps the per-class entries. Without
    ``guaranteed_gpus`` the overall guarantee is the sum of the class entries (and a class left out is not
    guaranteed); without ``burst_gpus`` there is no overall burst limit (borrowing idle capacity is bounded
    only by what is idle).
    """
    data = read_object(errors, path, value)
    if data is None:
        return None
    check_keys(errors, path, data, TEAM_KEYS, required=("name",))
    before = len(errors.messages)
    name = read_str(errors, join(path, "name"), data["name"]) if "name" in data else None
    weight = 1.0
    if "weight" in data:
        weight = read_number(errors, join(path, "weight"), data["weight"], positive=True, maximum=MAX_WEIGHT) or 1.0
    per_class = {key: _per_class(errors, join(path, key), data[key]) for key in ("guaranteed", "burst") if key in data}
    guaranteed_by_class = per_class.get("guaranteed", {})
    burst_by_class = per_class.get("burst", {})
    guaranteed = sum(guaranteed_by_class.values())
    overall: tuple[tuple[str, float], ...] = ()
    if "guaranteed_gpus" in data:
        guaranteed = (
            read_number(errors, join(path, "guaranteed_gpus"), data["guaranteed_gpus"], maximum=MAX_QUOTA_GPUS) or 0.0
        )
        overall = (("any", guaranteed),)
    burst = None
    if "burst_gpus" in data:
        burst = read_number(errors, join(path, "burst_gpus"), data["burst_gpus"], maximum=MAX_QUOTA_GPUS)
        if burst is not None and burst < guaranteed:
            errors.add(join(path, "burst_gpus"), f"must be ≥ guaranteed_gpus ({guaranteed:g}), got {burst:g}")
    for gpu_class, limit in burst_by_class.items():
        floor = guaranteed_by_class.get(gpu_class)
        if floor is not None and limit < floor:
            errors.add(join(join(path, "burst"), gpu_class), f"must be ≥ guaranteed.{gpu_class} ({floor:g})")
    if len(errors.messages) > before or name is None:
        return None
    return Team(
        name=name,
        weight=weight,
        guaranteed=overall + tuple(guaranteed_by_class.items()),
        burst=((("any", burst),) if burst is not None else ()) + tuple(burst_by_class.items()),
    )


def _per_class(errors: Errors, path: str, value: Any) -> dict[str, float]:
    data = read_object(errors, path, value)
    if data is None:
        return {}
    limits: dict[str, float] = {}
    for gpu_class, amount in data.items():
        where = join(path, gpu_class)
        if gpu_class not in catalog.GPU_CLASSES:
            errors.add(where, f"unknown GPU class; use one of: {', '.join(catalog.GPU_CLASSES)}")
            continue
        number = read_number(errors, where, amount, maximum=MAX_QUOTA_GPUS)
        if number is not None:
            limits[gpu_class] = number
    return limits
