"""The order the suite's files are handed to pytest-xdist's workers: the slowest first.

``make test`` runs each file in one of two workers (``--dist loadfile``), handing out the next file as a worker
finishes one, in collection order (``--no-loadscope-reorder``: xdist's own reorder puts the files with the most
tests first, which leaves the slowest ones, a single two-minute browser test among them, to the end, where one
worker runs them while the other has nothing left). Longest first is the classic rule for the shortest
finish on identical workers (Graham's LPT), so the files below, the slowest measured with ``--durations``, go
first in this order; every other file keeps its place after them. A stale list costs only time: a file that
has become fast runs early, a new slow one late. ``tests/test_slow_first.py`` checks that each listed file is
still there.
"""

from __future__ import annotations

import pytest

# Seconds each file's slowest tests took on the two-core CI machine while it was loaded (pytest --durations=120,
# 2026-12-06, about twice the idle figures); files not listed took under 11 s there.
SLOW_FILES: tuple[str, ...] = (
    "tests/browser/test_demo_under_load.py",  # 224 s
    "tests/demo/test_demo_history.py",  # 101
    "tests/scheduler/sim/test_bench_cost.py",  # 81
    "tests/portal/test_settings.py",  # 72
    "tests/scheduler/gateways/kube/test_kube_peak.py",  # 70
    "tests/scheduler/core/speedups/test_focus.py",  # 66
    "tests/scheduler/test_scenarios.py",  # 59
    "tests/scheduler/sim/test_bench_mixed.py",  # 57
    "tests/portal/test_sqlite_under_load.py",  # 56
    "tests/scheduler/sim/test_bench_cost_autoscaled.py",  # 54
    "tests/browser/test_layout_widths.py",  # 52
    "tests/scheduler/sim/test_bench_goodput.py",  # 51
    "tests/scheduler/gateways/kube/test_rendezvous_torch.py",  # 48
    "tests/jobs/test_idempotency_faults.py",  # 43
    "tests/scheduler/sim/test_bench_scale.py",  # 41
    "tests/benchmarks/test_loop_bench.py",  # 39
    "tests/benchmarks/test_portal_bench.py",  # 37
    "tests/test_deploy_slow_clients.py",  # 37
    "tests/scheduler/sim/test_bench_causes.py",  # 32
    "tests/checkpointing/test_training_resume.py",  # 31
    "tests/scheduler/test_outages_services.py",  # 30
    "tests/test_engine_tests_without_django.py",  # 30
    "tests/scheduler/core/speedups/test_repeat.py",  # 29
    "tests/scheduler/test_cli_hostile_files.py",  # 29
    "tests/scheduler/gateways/kube/test_kube_rendezvous.py",  # 28
    "tests/scheduler/core/planning/test_cycle_garbage.py",  # 28
    "tests/scheduler/loop/test_lock_renewal.py",  # 25
    "tests/api/test_schemathesis.py",  # 24
    "tests/test_boundaries.py",  # 23
    "tests/browser/test_portal_journeys.py",  # 22
    "tests/test_admin.py",  # 22
    "tests/test_docs_references.py",  # 21
    "tests/scheduler/core/speedups/test_speedups.py",  # 19
    "tests/scheduler/properties/test_cycle_properties.py",  # 19
    "tests/scheduler/properties/test_fairshare_properties.py",  # 19
)


def slowest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the listed files first, in the list's order, each file's tests kept together
    and in their own order; the rest after them as collected."""
    rank = {path: index for index, path in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
