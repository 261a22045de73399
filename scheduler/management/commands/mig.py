"""``manage.py mig profiles|layouts|validate|fit --gpu MODEL [...] [--json]``: the MIG catalog from a shell.

A thin edge over the pure core (:mod:`scheduler.core.gpus.catalog`, :mod:`scheduler.core.sizing.layouts`); it needs no
database. Exit codes: 0 on success (``validate``: the layout is valid), 1 when ``validate`` finds the layout
invalid or ``fit`` finds no profile, 2 for an unknown GPU model or a malformed argument. With ``--json``
every outcome, errors included, is one JSON object on stdout; errors also go to stderr.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, GpuModelSpec, LayoutError, validate_layout
from scheduler.core.sizing.layouts import fit, format_layout, maximal_layouts, mig_spec, named_layout, parse_layout

EXIT_NEGATIVE = 1  # an invalid layout, or no profile that fits
EXIT_USAGE = 2  # unknown model, malformed number


class Command(BaseCommand):
    help = "Inspect the MIG catalog: list profiles and maximal layouts, validate a layout, fit memory to a profile."

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="{profiles,layouts,validate,fit}")
        profiles = subcommands.add_parser("profiles", help="Every MIG profile of a GPU model with its geometry.")
        layouts = subcommands.add_parser("layouts", help="Every maximal valid MIG layout of a GPU model.")
        layouts.add_argument("--with-me", action="store_true", help="Also use the +me (media engine) profile.")
        validate = subcommands.add_parser("validate", help="Check a layout; exit 0 if valid, 1 if not.")
        validate.add_argument(
            "--layout", required=True, help='PROFILE@START items, e.g. "4g.40gb@0,3g.40gb@4", or a config name.'
        )
        fit_parser = subcommands.add_parser("fit", help="The smallest MIG profile whose memory holds X GiB.")
        fit_parser.add_argument("--memory-gib", required=True, help="Memory one replica needs, in GiB.")
        for sub in (profiles, layouts, validate, fit_parser):
            sub.add_argument("--gpu", required=True, help=f"GPU model: {', '.join(GPU_MODEL_BY_NAME)}.")
            sub.add_argument("--json", action="store_true", help="Print the result as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        self._json = bool(options["json"])
        try:
            spec = mig_spec(options["gpu"])
        except LayoutError as exc:
            raise self._error(str(exc), EXIT_USAGE) from exc
        if options["subcommand"] == "profiles":
            self._profiles(spec)
        elif options["subcommand"] == "layouts":
            self._layouts(spec, options["with_me"])
        elif options["subcommand"] == "validate":
            self._validate(spec, options["layout"])
        else:
            self._fit(spec, options["memory_gib"])

    # -- output ------------------------------------------------------------------------------------------

    def _emit(self, payload: dict[str, Any], text: str) -> None:
        self.stdout.write(json.dumps(payload, indent=2) if self._json else text)

    def _error(self, message: str, code: int, payload: dict[str, Any] | None = None) -> CommandError:
        if self._json:
            self.stdout.write(json.dumps(payload or {"error": message}, indent=2))
        return CommandError(message, returncode=code)

    # -- subcommands -------------------------------------------------------------------------------------

    def _profiles(self, spec: GpuModelSpec) -> None:
        rows: list[dict[str, Any]] = [
            {
                "name": p.name,
                "compute_slices": p.compute_slices,
                "memory_slices": p.memory_slices,
                "memory_mib": p.memory_mib,
                "max_count": p.max_count,
                "starts": list(p.starts),
            }
            for p in spec.profile_specs()
        ]
        header = f"{'PROFILE':<12} {'COMPUTE':>7} {'MEM SLICES':>10} {'MEMORY MiB':>10} {'MAX':>3}  STARTS"
        lines = [f"MIG profiles of {spec.name} (7 compute slices, 8 memory slices)", header]
        lines += [
            f"{r['name']:<12} {r['compute_slices']:>7} {r['memory_slices']:>10} {r['memory_mib']:>10} "
            f"{r['max_count']:>3}  {','.join(str(s) for s in r['starts'])}"
            for r in rows
        ]
        self._emit({"gpu_model": spec.name, "profiles": rows}, "\n".join(lines))

    def _layouts(self, spec: GpuModelSpec, with_me: bool) -> None:
        layouts = maximal_layouts(spec.name, with_me=with_me)
        lines = [f"{len(layouts)} maximal MIG layouts of {spec.name}" + (" (with +me)" if with_me else "")]
        lines += [f"  {format_layout(layout)}" for layout in layouts]
        payload = {"gpu_model": spec.name, "layouts": [[[name, start] for name, start in lay] for lay in layouts]}
        self._emit(payload, "\n".join(lines))

    def _validate(self, spec: GpuModelSpec, text: str) -> None:
        layout: Sequence[tuple[str, int]]
        try:
            if text.strip().startswith("all-"):
                layout = named_layout(spec.name, text.strip())
            else:
                layout = validate_layout(spec.name, [list(pair) for pair in parse_layout(text)])
        except LayoutError as exc:
            raise self._error(
                f"invalid layout for {spec.name}: {exc}", EXIT_NEGATIVE, {"valid": False, "reason": str(exc)}
            ) from exc
        shown = format_layout(layout) or "(empty: MIG off)"
        self._emit({"valid": True}, f"valid layout for {spec.name}: {shown}")

    def _fit(self, spec: GpuModelSpec, memory_gib: str) -> None:
        try:
            gib = float(memory_gib)
        except ValueError:
            gib = math.nan
        if not math.isfinite(gib) or gib <= 0:
            raise self._error(f"--memory-gib must be a positive number of GiB, not {memory_gib!r}", EXIT_USAGE)
        profile = fit(spec.name, math.ceil(gib * 1024))
        if profile is None:
            largest = max(
                (p for p in spec.profile_specs() if not p.media_engines), key=lambda p: (p.memory_mib, p.name)
            )
            raise self._error(
                f"no MIG profile of {spec.name} holds {gib:g} GiB: the largest, {largest.name}, has "
                f"{largest.memory_mib / 1024:.1f} GiB; request whole GPUs instead",
                EXIT_NEGATIVE,
            )
        memory_mib = spec.profiles()[profile].memory_mib
        self._emit(
            {"profile": profile, "memory_mib": memory_mib},
            f"{profile} on {spec.name}: {memory_mib} MiB ({memory_mib / 1024:.2f} GiB) holds {gib:g} GiB",
        )
