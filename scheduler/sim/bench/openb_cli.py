"""``bench openb [--trace PATH] [--nodes PATH] [--seeds 42-51] [--policies a,b] [--variants all17|a,b] [--json]``.

B1 of ``../shared/spec/benchmarks.md``: the FGD artifact's fragmentation replay of Alibaba's openb trace
(:mod:`scheduler.sim.openb`), every policy on the same pods and seeds, beside the authors' published rows.
The headline is the unallocated GPU % at arrived workload = 100 % (median, mean and sample std over seeds);
the curve is the mean over seeds of 100 − allocation % per arrived-workload bucket (the FGD paper's Fig. 9).

Sanity (spec B1): our ``random``, ``bestfit`` and ``fgd`` medians within ±0.5 points of the published
medians; only then does a ``microcosm`` figure mean anything. ``wall_s_per_seed`` is the mean wall time of one
replay (one policy, one seed), measured inside the worker that ran it; per policy too (B5 asks ≤ 60 s).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from scheduler.sim.bench.machine import RunRecord, started_line
from scheduler.sim.bench.registry import BenchUsageError, Claim, Outcome, positive
from scheduler.sim.bench.seeds import parse_seeds
from scheduler.sim.openb.matrix import Job, Result, run_all
from scheduler.sim.openb.published import ALLOCATION_FILE, PAPER_VARIANTS, Published, Summary, load_published
from scheduler.sim.openb.scorers import SCORER_NAMES
from scheduler.sim.traces import TraceError
from scheduler.sim.traces.rows import MAX_TRACE_BYTES
from scheduler.specs.files import SpecFileError, read_text

NAME = "openb"
HELP = "B1: fragmentation replay of Alibaba's openb trace, FGD protocol, beside the published rows."

PROJECT_ROOT = Path(__file__).resolve().parents[3]
TRACE_DIR = PROJECT_ROOT.parent / "shared" / "traces" / "alibaba-openb-2023"
PUBLISHED_DIR = PROJECT_ROOT.parent / "shared" / "traces" / "fgd-atc23-expected-results"
DEFAULT_TRACE = TRACE_DIR / "openb_pod_list_default.csv"
DEFAULT_NODES = TRACE_DIR / "openb_node_list_gpu_node.csv"
POD_LIST_PREFIX = "openb_pod_list_"
DEFAULT_SEEDS = "42-44"
SANITY_SCORERS = ("random", "bestfit", "fgd")
SANITY_POINTS = 0.5
# The targets B1 and B5 are held to (docs/benchmarks/openb.md states them).
PUBLISHED_FGD_DEFAULT = 4.77  # the FGD authors' published median on the default trace
REPLAY_TARGET_S = 60.0  # B5: one seed of the default trace (the FGD authors' Go simulator: ~10 min)
VARIANT_TARGET = 12  # of the 17 published variants

ALL_RUNS = {NAME: ()}
SLOW_RUNS = {f"{NAME}-matrix": ("--variants", "all17", "--seeds", "42-51", "--policies", "microcosm,fgd")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Pod list CSV (default: openb default).")
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="Node list CSV (default: the GPU nodes).")
    parser.add_argument(
        "--seeds",
        default=DEFAULT_SEEDS,
        help=f"Seeds: ranges and lists, e.g. 42-51 or 42,45 (default {DEFAULT_SEEDS}; the paper used 42-51).",
    )
    parser.add_argument("--policies", default=",".join(SCORER_NAMES), help="Comma list (default: all).")
    parser.add_argument("--variants", help="Pod lists beside --trace by suffix (default,cpu050,…) or all17.")
    parser.add_argument("--published", type=Path, default=PUBLISHED_DIR, help="Folder of the published tables.")
    parser.add_argument("--jobs", type=positive, default=min(2, os.cpu_count() or 1), help="Worker processes.")


def parse_scorers(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCORER_NAMES]
    if unknown or not names:
        raise BenchUsageError(
            f"--policies {text!r}: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(SCORER_NAMES)}"
        )
    return list(dict.fromkeys(names))


def traces(options: dict[str, Any]) -> list[Path]:
    """The pod lists to replay: --trace alone, or the --variants beside it. Missing files are an error."""
    trace = Path(options.get("trace") or DEFAULT_TRACE)
    variants = options.get("variants")
    if variants:
        names = list(PAPER_VARIANTS) if variants == "all17" else [v.strip() for v in variants.split(",") if v.strip()]
        paths = [trace.parent / f"{POD_LIST_PREFIX}{name}.csv" for name in names]
    else:
        paths = [trace]
    missing = [str(path) for path in paths if not path.exists()]  # a folder or a device: the reader says so
    if missing:
        raise BenchUsageError(
            f"{', '.join(missing)}: pod list not found — pass --trace PATH/openb_pod_list_X.csv "
            f"(the openb trace lives in ../shared/traces/alibaba-openb-2023/)"
        )
    return paths


def run(options: dict[str, Any]) -> Outcome:
    seeds = parse_seeds(str(options.get("seeds") or DEFAULT_SEEDS))
    policies = parse_scorers(str(options.get("policies") or ",".join(SCORER_NAMES)))
    paths = traces(options)
    nodes = Path(options.get("nodes") or DEFAULT_NODES)
    if not nodes.exists():
        raise BenchUsageError(f"{nodes}: node list not found (--nodes; use openb_node_list_gpu_node.csv)")
    published_dir = Path(options.get("published") or PUBLISHED_DIR)
    published: dict[tuple[str, str], Published] = {}  # without the table the comparison columns stay empty
    published_file = published_dir / ALLOCATION_FILE
    if published_file.is_file():
        # A table that is there but unreadable is a mistake to hear about, not to compare against silently.
        try:
            read_text(published_file, max_bytes=MAX_TRACE_BYTES)  # the text checks every user file gets, with positions
            published = load_published(published_dir)
        except (SpecFileError, TraceError) as error:
            raise BenchUsageError(str(error)) from None
        except (ValueError, csv.Error) as error:  # a malformed record the table's own reader does not name
            raise BenchUsageError(f"{published_file}: {error}") from None
    command = _command(options, seeds, policies)
    record = RunRecord(NAME, command)
    jobs = [Job(path, policy, seed) for path in paths for policy in policies for seed in seeds]
    started = time.perf_counter()
    try:
        results = run_all(nodes, jobs, workers=int(options.get("jobs") or 1))
    except (TraceError, ValueError) as error:
        raise BenchUsageError(str(error)) from None
    elapsed = time.perf_counter() - started
    per_trace = {
        path: _trace_payload(path, policies, [r for r in results if r.job.trace == path], published) for path in paths
    }
    payload: dict[str, Any] = record.head()
    if len(paths) == 1 and not options.get("variants"):
        payload.update(per_trace[paths[0]])
    else:
        payload["seeds"] = seeds
        payload["variants"] = {_stem(path): body for path, body in per_trace.items()}
    payload["wall_s_per_seed"] = round(statistics.mean(r.wall_s for r in results), 3)
    payload["wall_s_total"] = round(elapsed, 1)
    claims = _claims(per_trace) + _replay_claim(per_trace, nodes)
    payload["claims"] = [{"claim": c.claim, "measured": c.measured, "reproduced": c.reproduced} for c in claims]
    table = _table(payload, per_trace)
    figures = tuple(_figure(_stem(path), body) for path, body in per_trace.items())
    if len(paths) > 1:
        figures = (_variant_figure(per_trace), *figures)
    return Outcome(payload=payload, table=table, figures=figures, claims=claims)


def _stem(path: Path) -> str:
    return path.stem.removeprefix(POD_LIST_PREFIX)


def _command(options: dict[str, Any], seeds: Sequence[int], policies: Sequence[str]) -> str:
    parts = ["python manage.py bench openb"]
    if options.get("variants"):
        parts.append(f"--variants {options['variants']}")
    elif Path(options.get("trace") or DEFAULT_TRACE) != DEFAULT_TRACE:
        parts.append(f"--trace {options['trace']}")
    if Path(options.get("nodes") or DEFAULT_NODES) != DEFAULT_NODES:
        parts.append(f"--nodes {options['nodes']}")
    parts.append(f"--seeds {options.get('seeds') or DEFAULT_SEEDS}")
    if list(policies) != list(SCORER_NAMES):
        parts.append(f"--policies {','.join(policies)}")
    if options.get("json"):
        parts.append("--json")
    return " ".join(parts)


def _trace_payload(
    path: Path, policies: Sequence[str], results: Sequence[Result], published: dict[tuple[str, str], Published]
) -> dict[str, Any]:
    body: dict[str, Any] = {"trace": str(path), "seeds": sorted({r.job.seed for r in results}), "policies": {}}
    for policy in policies:
        mine = [r for r in results if r.job.policy == policy]
        at_100 = {r.job.seed: r.run.unallocated_pct_at(100) for r in mine}
        summary = Summary.of({seed: value for seed, value in at_100.items() if value is not None})
        row = published.get((path.stem, policy))
        entry: dict[str, Any] = {
            "unallocated_gpu_pct_at_100": summary.as_dict(),
            "curve": _mean_curve(mine),
            "failed_pods_mean": round(statistics.mean(r.run.failed for r in mine), 1),
            "pods_tried_mean": round(statistics.mean(r.run.pods_tried for r in mine), 1),
            "wall_s_per_seed": round(statistics.mean(r.wall_s for r in mine), 3),
            "published": None,
            "within_0_5_of_published": None,
        }
        if row is not None:
            entry["published"] = {**row.summary.as_dict(), "curve": [list(point) for point in row.curve]}
            entry["within_0_5_of_published"] = abs(summary.median - row.summary.median) <= SANITY_POINTS
        body["policies"][policy] = entry
    checked = [body["policies"].get(p, {}).get("within_0_5_of_published") for p in SANITY_SCORERS]
    body["sanity_within_0_5"] = all(checked) if None not in checked else None  # all three run and published
    fgd = published.get((path.stem, "fgd"))
    if "microcosm" in body["policies"] and fgd is not None:
        ours = body["policies"]["microcosm"]["unallocated_gpu_pct_at_100"]["median"]
        body["microcosm_vs_published_fgd"] = {
            "microcosm_median": ours,
            "published_fgd_median": fgd.summary.median,
            "fewer_unallocated": ours < fgd.summary.median,
        }
    return body


def _mean_curve(results: Sequence[Result]) -> list[list[float]]:
    """Mean over runs of (100 − allocation %) per bucket present in any run."""
    by_bucket: dict[int, list[float]] = {}
    for result in results:
        for bucket, allocation in result.run.curve:
            by_bucket.setdefault(bucket, []).append(100.0 - allocation)
    return [[bucket, round(statistics.mean(values), 2)] for bucket, values in sorted(by_bucket.items())]


def _claims(per_trace: dict[Path, dict[str, Any]]) -> tuple[Claim, ...]:
    claims: list[Claim] = []
    default = next((body for path, body in per_trace.items() if _stem(path) == "default"), None)
    if default is not None:
        policies = default["policies"]
        checked = [p for p in SANITY_SCORERS if p in policies and policies[p]["published"] is not None]
        if checked:
            measured = "; ".join(
                f"{p} {policies[p]['unallocated_gpu_pct_at_100']['median']:.2f} vs "
                f"{policies[p]['published']['median']:.2f}"
                for p in checked
            )
            claims.append(
                Claim(
                    claim="B1 sanity: random, bestfit and fgd medians within ±0.5 points of the published rows "
                    "(unallocated GPU % at arrived 100 %, default trace)",
                    measured=measured,
                    reproduced=all(policies[p]["within_0_5_of_published"] for p in checked)
                    if len(checked) == len(SANITY_SCORERS)
                    else None,
                )
            )
        if "microcosm" in policies:
            ours = policies["microcosm"]["unallocated_gpu_pct_at_100"]["median"]
            claims.append(
                Claim(
                    claim=f"microcosm leaves fewer unallocated GPUs than the published FGD ({PUBLISHED_FGD_DEFAULT} %) "
                    "on the default trace",
                    measured=f"microcosm median {ours:.2f} %",
                    reproduced=ours < PUBLISHED_FGD_DEFAULT,
                )
            )
    compared = [
        body["microcosm_vs_published_fgd"] for body in per_trace.values() if "microcosm_vs_published_fgd" in body
    ]
    if len(compared) > 1:
        wins = sum(1 for c in compared if c["fewer_unallocated"])
        claims.append(
            Claim(
                claim=f"microcosm beats the published FGD on at least {VARIANT_TARGET} of the 17 published pod lists",
                measured=f"{wins} of {len(compared)} pod lists run",
                reproduced=wins >= VARIANT_TARGET if len(compared) >= len(PAPER_VARIANTS) else None,
            )
        )
    return tuple(claims)


def _replay_claim(per_trace: dict[Path, dict[str, Any]], nodes: Path) -> tuple[Claim, ...]:
    """B5: the whole default trace on the GPU nodes, one seed, replayed in ≤ ``REPLAY_TARGET_S`` —
    measured only when this run replayed exactly those files (a slice says nothing about it)."""
    body = next((b for path, b in per_trace.items() if path.resolve() == DEFAULT_TRACE.resolve()), None)
    if body is None or nodes.resolve() != DEFAULT_NODES.resolve():
        return ()
    walls = {policy: entry["wall_s_per_seed"] for policy, entry in body["policies"].items()}
    slowest = max(walls, key=walls.__getitem__)
    return (
        Claim(
            claim=f"B5: the openb default trace, one seed, replayed in ≤ {REPLAY_TARGET_S:.0f} s (every policy)",
            measured=f"slowest {slowest} {walls[slowest]:.1f} s per seed"
            + (f", microcosm {walls['microcosm']:.1f} s" if "microcosm" in walls and slowest != "microcosm" else ""),
            reproduced=walls[slowest] <= REPLAY_TARGET_S,
        ),
    )


def _fmt(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "-"
    return f"{summary['median']:6.2f} ({summary['mean']:.2f} ± {summary['std']:.2f})"


def _table(payload: dict[str, Any], per_trace: dict[Path, dict[str, Any]]) -> str:
    seeds = next(iter(per_trace.values()))["seeds"]
    head = [
        "B1 openb (FGD protocol): unallocated GPU % at arrived workload = 100 %, median (mean ± std) over seeds "
        f"{_seed_text(seeds)}",
        f"command: {payload['command']}",
        started_line(payload),
        f"wall: {payload['wall_s_per_seed']:.1f} s per replay (one policy, one seed) on average; "
        f"{payload['wall_s_total']:.0f} s in all",
    ]
    lines = list(head)
    for path, body in per_trace.items():
        lines += ["", f"pod list: {_stem(path)} ({path})"]
        columns = f"{'policy':<15} {'ours':>24} {'published':>24} {'diff':>6} {'±0.5':>5} {'failed':>7} {'s/seed':>7}"
        lines += [columns, "-" * len(columns)]
        for policy, entry in body["policies"].items():
            ours, theirs = entry["unallocated_gpu_pct_at_100"], entry["published"]
            diff = f"{ours['median'] - theirs['median']:+.2f}" if theirs else "-"
            ok = {None: "-", True: "yes", False: "NO"}[entry["within_0_5_of_published"]]
            lines.append(
                f"{policy:<15} {_fmt(ours):>24} {_fmt(theirs):>24} {diff:>6} {ok:>5} "
                f"{entry['failed_pods_mean']:>7.0f} {entry['wall_s_per_seed']:>7.1f}"
            )
        sanity = {None: "not checked", True: "holds", False: "DOES NOT HOLD"}[body["sanity_within_0_5"]]
        lines.append(f"sanity (random, bestfit, fgd within ±0.5 of published): {sanity}")
        if "microcosm_vs_published_fgd" in body:
            versus = body["microcosm_vs_published_fgd"]
            verdict = "fewer" if versus["fewer_unallocated"] else "NOT fewer"
            lines.append(
                f"microcosm {versus['microcosm_median']:.2f} % vs published FGD "
                f"{versus['published_fgd_median']:.2f} %: {verdict} unallocated GPUs"
            )
    return "\n".join(lines)


def _seed_text(seeds: Sequence[int]) -> str:
    if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1:
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(str(seed) for seed in seeds)


def _figure(stem: str, body: dict[str, Any]) -> go.Figure:
    """Unallocated GPU % vs arrived workload, one line per policy (FGD paper Fig. 9); published dashed."""
    figure = go.Figure()
    for policy, entry in body["policies"].items():
        xs, ys = zip(*entry["curve"], strict=True) if entry["curve"] else ((), ())
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=policy))
        if entry["published"] is not None:
            pxs, pys = zip(*entry["published"]["curve"], strict=True)
            figure.add_trace(
                go.Scatter(
                    x=pxs, y=pys, mode="lines", name=f"{policy} (published)", line={"dash": "dot"}, visible="legendonly"
                )
            )
    figure.update_layout(
        title=f"Unallocated GPU vs arrived workload — {stem}",
        xaxis_title="arrived workload (% of GPU capacity)",
        yaxis_title="unallocated GPU (%)",
    )
    return figure


def _variant_figure(per_trace: dict[Path, dict[str, Any]]) -> go.Figure:
    """Median unallocated GPU % at arrived 100 % per pod list and policy (ours), and published FGD."""
    stems = [_stem(path) for path in per_trace]
    policies = list(next(iter(per_trace.values()))["policies"])
    figure = go.Figure()
    for policy in policies:
        figure.add_trace(
            go.Bar(
                name=policy,
                x=stems,
                y=[body["policies"][policy]["unallocated_gpu_pct_at_100"]["median"] for body in per_trace.values()],
            )
        )
    figure.add_trace(
        go.Scatter(
            name="fgd (published)",
            x=stems,
            mode="markers",
            y=[
                (body["policies"].get("fgd") or {}).get("published", {})
                and body["policies"]["fgd"]["published"]["median"]
                for body in per_trace.values()
            ],
        )
    )
    figure.update_layout(
        barmode="group", title="Unallocated GPU % at arrived 100 % per pod list", yaxis_title="unallocated GPU (%)"
    )
    return figure
