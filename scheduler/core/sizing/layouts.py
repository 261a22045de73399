"""MIG layouts: enumerate, name, place, parse and fit, on the placement table of :mod:`scheduler.core.gpus.catalog`.

A layout is a :data:`~scheduler.core.model.snapshot.MigLayout`: ``(profile, start memory slice)`` pairs sorted by start.
Everything here is computed from the catalog's placement table (``docs/gpu-facts.md``, MIG geometry and placements),
never from summing the "g" in names, and cached per model: the tables are tiny and the answers never change.
They are static facts, so they are cached for the process (``functools``), not by the cycle's speed-ups.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

from scheduler.core.gpus.catalog import (
    COMPUTE_SLICES,
    GPU_MODEL_BY_NAME,
    MEMORY_SLICES,
    GpuModelSpec,
    LayoutError,
    ProfileSpec,
)
from scheduler.core.model.snapshot import MigLayout

# A placement candidate: the profile, its start, and the memory slices it covers as a bit mask.
_Candidate = tuple[ProfileSpec, int, int]

# all-balanced = 2×1g + 1×2g + 1×3g on 7-slice GPUs (docs/gpu-facts.md, GPU Operator default configs).
_BALANCED_KEYS = ("3g", "2g", "1g", "1g")
_LAYOUT_ITEM = re.compile(r"^\s*([0-9]+g\.[0-9]+gb(?:\+me)?)\s*@\s*([0-9]+)\s*$")


def mig_spec(model: str) -> GpuModelSpec:
    """The catalog entry of a MIG-capable ``model``; raises :class:`LayoutError` naming the known ones."""
    spec = GPU_MODEL_BY_NAME.get(model)
    if spec is None:
        raise LayoutError(f"unknown GPU model {model!r}; known: {', '.join(GPU_MODEL_BY_NAME)}")
    if not spec.mig_capable:
        raise LayoutError(f"{model} is not MIG-capable")
    return spec


def _mask(profile: ProfileSpec, start: int) -> int:
    return ((1 << profile.memory_slices) - 1) << start


def _candidates(spec: GpuModelSpec, names: Iterable[str]) -> tuple[_Candidate, ...]:
    profiles = spec.profiles()
    return tuple(
        (profiles[name], start, _mask(profiles[name], start)) for name in names for start in profiles[name].starts
    )


def _fits(candidate: _Candidate, used: int, counts: Counter[str]) -> bool:
    # The +me profile's max_count of 1 is the "one set of media engines per GPU" rule (docs/gpu-facts.md, MIG
    # geometry and placements).
    profile, _, mask = candidate
    return not used & mask and counts[profile.name] < profile.max_count


def _profile_names(spec: GpuModelSpec, with_me: bool, profiles: Sequence[str] | None) -> tuple[str, ...]:
    if profiles is not None:
        unknown = [name for name in profiles if name not in spec.profiles()]
        if unknown:
            raise LayoutError(f"{', '.join(unknown)}: not MIG profiles of {spec.name}")
        return tuple(profiles)
    return tuple(p.name for p in spec.profile_specs() if with_me or not p.media_engines)


def maximal_layouts(model: str, with_me: bool = False, profiles: Sequence[str] | None = None) -> tuple[MigLayout, ...]:
    """Every maximal valid layout of ``model``: no further instance of any considered profile fits.

    The considered profiles are all of the model's, without the ``+me`` variant unless ``with_me``, or
    exactly ``profiles`` when given (maximality is judged against those). Each layout is sorted by start;
    the tuple is ordered by compute slices used (most first), then by instance sizes (largest first), then by
    the pairs themselves, so the order is the same in every process.
    """
    spec = mig_spec(model)
    return _maximal(spec.name, _profile_names(spec, with_me, profiles))


@lru_cache(maxsize=256)
def _maximal(model: str, names: tuple[str, ...]) -> tuple[MigLayout, ...]:
    spec = GPU_MODEL_BY_NAME[model]
    candidates = _candidates(spec, dict.fromkeys(names))
    by_start: dict[int, list[_Candidate]] = {i: [] for i in range(MEMORY_SLICES)}
    for candidate in candidates:
        by_start[candidate[1]].append(candidate)
    found: list[MigLayout] = []
    chosen: list[_Candidate] = []
    counts: Counter[str] = Counter()

    def walk(index: int, used: int) -> None:
        # Each memory slice is either left empty or is the start of one instance: every packing once.
        if index == MEMORY_SLICES:
            if not any(_fits(c, used, counts) for c in candidates):
                found.append(tuple((profile.name, start) for profile, start, _ in chosen))
            return
        if used & (1 << index):
            walk(index + 1, used)
            return
        walk(index + 1, used)
        for candidate in by_start[index]:
            if _fits(candidate, used, counts):
                chosen.append(candidate)
                counts[candidate[0].name] += 1
                walk(index + 1, used | candidate[2])
                counts[candidate[0].name] -= 1
                chosen.pop()

    walk(0, 0)
    return tuple(sorted(found, key=lambda layout: _layout_order(spec, layout)))


def _layout_order(spec: GpuModelSpec, layout: MigLayout) -> tuple[object, ...]:
    profiles = spec.profiles()
    sizes = sorted(((profiles[n].compute_slices, profiles[n].memory_slices) for n, _ in layout), reverse=True)
    return (-compute_slices_used(spec.name, layout), [(-c, -m) for c, m in sizes], layout)


def compute_slices_used(model: str, layout: Iterable[tuple[str, int]]) -> int:
    """SM slices a layout's instances hold (7 = the whole GPU's compute)."""
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    return sum(profiles[name].compute_slices for name, _ in layout)


def addable(model: str, layout: MigLayout, profiles: Sequence[str] | None = None) -> tuple[tuple[str, int], ...]:
    """Instances (``(profile, start)``) that could still be added to a valid ``layout`` of ``model``.

    ``profiles`` limits the candidates (default: every profile of the model, ``+me`` included).
    """
    spec = mig_spec(model)
    names = tuple(profiles) if profiles is not None else tuple(spec.profiles())
    used = 0
    counts: Counter[str] = Counter()
    for name, start in layout:
        used |= _mask(spec.profiles()[name], start)
        counts[name] += 1
    return tuple(
        (p.name, start) for p, start, mask in _candidates(spec, names) if _fits((p, start, mask), used, counts)
    )


def place_profiles(model: str, profiles: Sequence[str]) -> MigLayout | None:
    """Legal starts for the multiset ``profiles`` on one GPU of ``model``, or None if they cannot coexist.

    Instances are placed largest first (the creation order the driver needs, ``docs/gpu-facts.md``, Why some
    combinations are impossible) by a complete search. Among the placements that exist, the one leaving the most room is
    chosen: the largest profile that could still be added, then the number of instances that could still be added, then
    the lexicographically smallest layout. So ``["3g.40gb"]`` lands at 4 (keeping 0–3 for a 4g), not at 0, where it
    would strand SM slice 3. Raises :class:`LayoutError` for an unknown model or profile.
    """
    spec = mig_spec(model)
    _profile_names(spec, True, profiles)
    return _place(spec.name, tuple(sorted(profiles)))


@lru_cache(maxsize=4096)
def _place(model: str, profiles: tuple[str, ...]) -> MigLayout | None:
    spec = GPU_MODEL_BY_NAME[model]
    table = spec.profiles()
    order = sorted(profiles, key=lambda n: (-table[n].memory_slices, -table[n].compute_slices, n))
    all_candidates = _candidates(spec, table)
    best: tuple[tuple[int, int], MigLayout] | None = None
    chosen: list[tuple[str, int]] = []
    counts: Counter[str] = Counter()

    def walk(index: int, used: int, lowest_start: int) -> None:
        nonlocal best
        if index == len(order):
            room = [c for c in all_candidates if _fits(c, used, counts)]
            score = (max((c[0].compute_slices for c in room), default=0), len(room))
            layout = tuple(sorted(chosen, key=lambda pair: pair[1]))
            if best is None or score > best[0] or (score == best[0] and layout < best[1]):
                best = (score, layout)
            return
        profile = table[order[index]]
        for start in profile.starts:
            # Identical instances are placed in rising starts: each placement is searched once.
            candidate = (profile, start, _mask(profile, start))
            if start >= lowest_start and _fits(candidate, used, counts):
                chosen.append((profile.name, start))
                counts[profile.name] += 1
                same_next = index + 1 < len(order) and order[index + 1] == profile.name
                walk(index + 1, used | candidate[2], start + 1 if same_next else 0)
                counts[profile.name] -= 1
                chosen.pop()

    walk(0, 0, 0)
    return best[1] if best else None


def named_layout(model: str, name: str) -> MigLayout:
    """The layout a GPU Operator config name gives on ``model`` (``docs/gpu-facts.md``, GPU Operator default
    configs).

    ``all-disabled`` → ``()`` (MIG off: the whole GPU). ``all-balanced`` → 2×1g + 1×2g + 1×3g.
    ``all-<profile>`` (``+`` written ``.``: ``all-1g.10gb.me``) → the profile's maximum count; note that on
    A100-40GB ``1g.10gb`` is the two-memory-slice 1g, so ``all-1g.10gb`` is 4 instances there, 7 on 80 GB
    parts. ``all-enabled`` (MIG on, no instances) offers nothing to schedule and is refused, as is any
    unknown name; the error lists the names the model knows.
    """
    spec = mig_spec(model)
    if name == "all-disabled":
        return ()
    if name == "all-enabled":
        raise LayoutError("all-enabled turns MIG on without instances: nothing could run; use all-disabled")
    if name == "all-balanced":
        by_key = {p.key: p.name for p in spec.profile_specs()}
        return _checked_place(spec, [by_key[key] for key in _BALANCED_KEYS])
    for profile in spec.profile_specs():
        if name == "all-" + profile.name.replace("+", "."):
            return _checked_place(spec, [profile.name] * profile.max_count)
    raise LayoutError(f"unknown MIG config {name!r} for {model}; known: {', '.join(named_layouts(model))}")


def named_layouts(model: str) -> tuple[str, ...]:
    """The config names :func:`named_layout` accepts for ``model``, as the GPU Operator writes them."""
    spec = mig_spec(model)
    names = ["all-disabled", "all-enabled", "all-balanced"]
    names += ["all-" + p.name.replace("+", ".") for p in spec.profile_specs()]
    return tuple(names)


def _checked_place(spec: GpuModelSpec, profiles: list[str]) -> MigLayout:
    layout = _place(spec.name, tuple(sorted(profiles)))
    if layout is None:  # pragma: no cover - the GPU Operator's named configs all fit; kept as a guard
        raise LayoutError(f"{', '.join(profiles)} do not fit on one {spec.name}")
    return layout


def parse_layout(text: str) -> MigLayout:
    """Parse ``"4g.40gb@0,3g.40gb@4"`` into pairs, in the order written; ``""`` is the empty layout.

    Only the syntax is checked here (``profile@start`` items separated by commas); whether the layout can
    exist on a GPU is :func:`scheduler.core.gpus.catalog.validate_layout`'s question. Raises :class:`LayoutError`
    naming the first malformed item.
    """
    if not text.strip():
        return ()
    pairs = []
    for item in text.split(","):
        match = _LAYOUT_ITEM.match(item)
        if match is None:
            raise LayoutError(f"{item.strip()!r} is not PROFILE@START, e.g. 3g.40gb@4 (start = first memory slice)")
        pairs.append((match.group(1), int(match.group(2))))
    return tuple(pairs)


def format_layout(layout: Iterable[tuple[str, int]]) -> str:
    """The inverse of :func:`parse_layout`: ``"4g.40gb@0,3g.40gb@4"``."""
    return ",".join(f"{name}@{start}" for name, start in layout)


def fit(model: str, memory_mib: int, with_me: bool = False) -> str | None:
    """The profile of ``model`` whose real memory holds ``memory_mib`` with the fewest compute slices, then
    the least memory; None when no profile holds it (or the model has no MIG). ``+me`` profiles only with
    ``with_me`` (they are scarce: one per GPU, and a memory request does not need media engines)."""
    spec = GPU_MODEL_BY_NAME.get(model)
    if spec is None or not spec.mig_capable:
        return None
    return _fit(spec.name, memory_mib, with_me)


@lru_cache(maxsize=16384)
def _fit(model: str, memory_mib: int, with_me: bool) -> str | None:
    holding = [
        p
        for p in GPU_MODEL_BY_NAME[model].profile_specs()
        if p.memory_mib >= memory_mib and (with_me or not p.media_engines)
    ]
    if not holding:
        return None
    return min(holding, key=lambda p: (p.compute_slices, p.memory_mib, p.memory_slices, p.name)).name


def is_full_compute(model: str, layout: MigLayout) -> bool:
    """True when the layout's instances hold all 7 SM slices."""
    return compute_slices_used(model, layout) == COMPUTE_SLICES
