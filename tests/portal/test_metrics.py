"""/metrics after a few cycles of the loop on the simulated fleet: every metric is there, with labels that carry
no job id and values that match the database; the bearer token when METRICS_TOKEN is set; closed (404) unless
METRICS_PUBLIC opens it."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from prometheus_client.parser import text_string_to_metric_families

from billing.models import LostWork
from billing.services import ledger_close_due
from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.jobs import gpu_equivalents
from jobs.services import job_submit
from portal.metrics import collector
from scheduler.bridge.cycle_stats import PHASES
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import core_job
from scheduler.core.sizing.need import replica_need
from scheduler.loop.cycle import cycle_run
from scheduler.models import CycleStats, Node, SimulatedPod
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

# Every metric docs/metrics.md lists, by the name its samples carry (counters with _total).
EXPORTED = {
    "microcosm_jobs",
    "microcosm_job_pending_seconds",
    "microcosm_queue_oldest_pending_seconds",
    "microcosm_gpus",
    "microcosm_gpu_effective_utilization_ratio",
    "microcosm_gpu_used_ratio",
    "microcosm_team_quota_gpus",
    "microcosm_cycle_duration_seconds",
    "microcosm_cycle_decisions",
    "microcosm_cycle_last_success_timestamp_seconds",
    "microcosm_cycle_interval_seconds",
    "microcosm_preemptions",
    "microcosm_mig_reconfigurations",
    "microcosm_mig_reconfigurations_in_flight",
    "microcosm_mig_reconfiguration_oldest_seconds",
    "microcosm_spot_interruptions",
    "microcosm_lost_gpu_hours",
    "microcosm_ledger_lag_seconds",
    "microcosm_eta_error_ratio",
}
TOKEN = "t" * 40


@pytest.fixture(autouse=True)
def _metrics_open(settings):
    """The figures' tests read /metrics as the demo does (METRICS_PUBLIC); the access tests below set their own."""
    settings.METRICS_PUBLIC = True
    settings.METRICS_TOKEN = ""


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    # The collector's "now" is the test's clock, which runs ahead of the wall clock as the test moves it.
    monkeypatch.setattr(collector.timezone, "now", clock)
    return clock


@pytest.fixture
def cycles(clock):
    """Two teams, a reserved box that runs one 8-GPU job while another waits, a MIG service, a spot job whose
    node is interrupted (a preemption, an interruption notice); five cycles; the ledger closed once."""
    fleet_seed()
    nlp, cv = team_seed("nlp"), team_seed("cv", guaranteed=2, burst=4)
    gateway = fleet(clock, notice_s=120.0, replace_after_s=60_000.0)

    def submit(team, **spec):
        return job_submit(team=team, spec={"kind": "training", **spec}, actor=None, now=clock.now)

    submit(nlp, gpus=8, tier="reserved-only", duration_s=60_000)
    submit(nlp, gpus=8, tier="reserved-only", duration_s=60_000)
    submit(cv, kind="inference", memory_gib=15, gpu_model="A100-SXM4-80GB")
    spot = submit(cv, gpus=2, tier="spot-ok", gpu_model="A100-PCIE-40GB", duration_s=60_000)
    cycle_run(gateway=gateway)
    clock.advance(30)
    cycle_run(gateway=gateway)
    state = SimulatedPod.objects.get(job=spot).node.simulated_state
    state.notice_at, state.gone_at = clock.now, clock.now + timedelta(seconds=2)
    state.back_at = clock.now + timedelta(days=1)
    state.save()
    cycle_run(gateway=gateway)  # drains the spot job
    clock.advance(3)
    cycle_run(gateway=gateway)  # the node is gone: the job is requeued
    clock.advance(30)
    cycle_run(gateway=gateway)
    ledger_close_due(now=clock.now + timedelta(hours=2))
    return {"nlp": nlp, "cv": cv, "spot": spot, "cycles": 5}


def _scrape(client, **headers):
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    return families


def _samples(family, name=None):
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples if name is None or s.name == name}


def test_every_metric_is_exported_without_job_ids_in_labels(client, cycles):
    families = _scrape(client)
    assert set(families) == EXPORTED
    for family in families.values():
        for sample in family.samples:
            assert not {"job", "job_id", "id", "pod", "node"} & set(sample.labels), sample
            assert not any(value.isdigit() for value in sample.labels.values()), sample


def test_job_counts_and_waits_match_the_database(client, cycles, clock):
    families = _scrape(client)
    rows = Counter(Job.objects.values_list("team__slug", "state", "priority", "kind"))
    assert _samples(families["microcosm_jobs"]) == {
        (("kind", k), ("priority", p), ("state", s), ("team", t)): float(n) for (t, s, p, k), n in rows.items()
    }
    assert rows[("nlp", "pending", "normal", "training")] == 1 and rows[("cv", "pending", "normal", "training")] == 1

    waits = defaultdict(list)
    for job in Job.objects.select_related("team"):
        first = JobEvent.objects.filter(job=job, type="bound").order_by("at").first()
        if first is not None:
            waits[(job.team.slug, job.priority)].append((first.at - job.submitted_at).total_seconds())
    pending = families["microcosm_job_pending_seconds"]
    counts = _samples(pending, "microcosm_job_pending_seconds_count")
    sums = _samples(pending, "microcosm_job_pending_seconds_sum")
    assert counts == {(("priority", p), ("team", t)): float(len(w)) for (t, p), w in waits.items()}
    assert sums == {(("priority", p), ("team", t)): pytest.approx(sum(w)) for (t, p), w in waits.items()}
    assert counts[(("priority", "normal"), ("team", "nlp"))] == 1  # the second 8-GPU job still waits

    oldest = _samples(families["microcosm_queue_oldest_pending_seconds"])
    waiting = Job.objects.get(team__slug="nlp", state="pending")
    assert oldest[(("priority", "normal"), ("team", "nlp"))] == (clock.now - waiting.submitted_at).total_seconds()
    requeued = JobEvent.objects.filter(job=cycles["spot"], type="requeued").latest("at").at
    assert oldest[(("priority", "normal"), ("team", "cv"))] == (clock.now - requeued).total_seconds()


def test_gpu_and_quota_figures_match_the_database(client, cycles):
    families = _scrape(client)
    gpus = families["microcosm_gpus"]
    by_state = defaultdict(float)
    for sample in gpus.samples:
        by_state[sample.labels["state"]] += sample.value
    live = Allocation.objects.filter(ended_at__isnull=True).exclude(node__state="gone")
    held = sum(gpu_equivalents(a.node.gpu_model.name, a.mig_profile) for a in live.select_related("node__gpu_model"))
    assert by_state["allocated"] == pytest.approx(held) and held > 8
    present = Node.objects.exclude(state="gone")
    assert sum(by_state.values()) == pytest.approx(sum(n.gpu_count for n in present))
    assert _samples(gpus)[(("gpu_model", "A100-SXM4-80GB"), ("state", "allocated"), ("tier", "reserved"))] == 8.0

    policy = policy_current()
    need = 0.0
    for job in Job.objects.filter(state="running").select_related("team", "project"):
        allocations = list(job.allocations.filter(ended_at__isnull=True).select_related("node__gpu_model"))
        mine = sum(gpu_equivalents(a.node.gpu_model.name, a.mig_profile) for a in allocations)
        engine = core_job(job)
        need += min(mine, replica_need(engine, allocations[0].node.gpu_model.name, policy) * engine.replicas)
    effective = families["microcosm_gpu_effective_utilization_ratio"].samples[0].value
    assert effective == pytest.approx(need / sum(n.gpu_count for n in present), abs=1e-6)
    assert 0 < effective <= by_state["allocated"] / sum(by_state.values()) + 1e-6  # never more than is held

    quotas = _samples(families["microcosm_team_quota_gpus"])
    assert quotas[(("gpu_class", "any"), ("kind", "guaranteed"), ("team", "nlp"))] == 8.0
    assert quotas[(("gpu_class", "any"), ("kind", "burst"), ("team", "cv"))] == 4.0
    assert quotas[(("gpu_class", "any"), ("kind", "in_use"), ("team", "nlp"))] == 8.0
    assert quotas[(("gpu_class", "any"), ("kind", "borrowed"), ("team", "nlp"))] == 0.0


def test_loop_counters_match_the_database(client, cycles):
    families = _scrape(client)
    stats = CycleStats.objects.get()
    durations = families["microcosm_cycle_duration_seconds"]
    counts = _samples(durations, "microcosm_cycle_duration_seconds_count")
    assert counts == {(("phase", phase),): float(cycles["cycles"]) for phase in PHASES}
    infinite = [s for s in durations.samples if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"]
    assert {s.value for s in infinite} == {float(cycles["cycles"])}

    decisions = _samples(families["microcosm_cycle_decisions"], "microcosm_cycle_decisions_total")
    assert decisions[(("kind", "bind"),)] == JobEvent.objects.filter(type="bound").count() >= 3
    assert decisions[(("kind", "eviction"),)] == 0.0  # the spot job was drained by the notice, not by the engine

    preemptions = _samples(families["microcosm_preemptions"], "microcosm_preemptions_total")
    assert preemptions[(("reason", "spot-reclaim"),)] == 1.0
    assert sum(preemptions.values()) == JobEvent.objects.filter(type="preempted").count()
    spot = families["microcosm_spot_interruptions"].samples[0].value
    assert spot == stats.spot_interruptions == 1

    last = families["microcosm_cycle_last_success_timestamp_seconds"].samples[0].value
    assert last == stats.last_success_at.timestamp()
    assert families["microcosm_cycle_interval_seconds"].samples[0].value == 10.0

    lost = LostWork.objects.aggregate(total=Sum("gpu_hours"))["total"]
    assert lost > Decimal(0)  # the spot job had no checkpoint: its whole run is lost
    assert families["microcosm_lost_gpu_hours"].samples[0].value == pytest.approx(float(lost))


def test_ledger_lag_is_how_far_behind_the_ledger_is_closed(client, clock):
    fleet_seed()
    team = team_seed()
    job_submit(team=team, spec={"kind": "training", "gpus": 1, "duration_s": 60_000}, actor=None, now=clock.now)
    assert _scrape(client)["microcosm_ledger_lag_seconds"].samples[0].value == 0.0  # nothing held yet
    cycle_run(gateway=fleet(clock))
    started = Allocation.objects.get().started_at
    clock.advance(3 * 3600)
    assert _scrape(client)["microcosm_ledger_lag_seconds"].samples[0].value == 3 * 3600
    ledger_close_due(now=clock.now)  # through the last whole hour before now − 5 min
    lag = _scrape(client)["microcosm_ledger_lag_seconds"].samples[0].value
    assert 0 < lag <= 3600 + 300 and lag < (clock.now - started).total_seconds()


def test_before_the_first_cycle_the_loop_metrics_are_zero_and_the_last_success_absent(client):
    families = _scrape(client)
    assert families["microcosm_cycle_last_success_timestamp_seconds"].samples == []
    assert {s.value for s in families["microcosm_cycle_decisions"].samples} == {0.0}
    assert families["microcosm_spot_interruptions"].samples[0].value == 0.0


def test_by_default_the_endpoint_is_off(client, settings):
    """Neither a token nor METRICS_PUBLIC: 404 (no credential could open it), saying what turns it on."""
    settings.METRICS_PUBLIC = False
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 404
    assert b"METRICS_TOKEN" in response.content and b"METRICS_PUBLIC=1" in response.content
    assert b"microcosm_" not in response.content and "WWW-Authenticate" not in response


def test_metrics_public_opens_the_endpoint_to_anyone(client, settings):
    settings.METRICS_PUBLIC = True
    assert "microcosm_jobs" in _scrape(client)


@pytest.mark.parametrize(
    "header",
    [None, f"Bearer {TOKEN[:-1]}x", f"Basic {TOKEN}", TOKEN, "Bearer ", f"Bearer {TOKEN}extra"],
    ids=["none", "wrong", "basic", "no-scheme", "empty", "longer"],
)
def test_with_a_token_setting_a_scrape_without_the_token_is_refused(client, settings, header):
    settings.METRICS_PUBLIC = False
    settings.METRICS_TOKEN = TOKEN
    response = client.get("/metrics", **({"HTTP_AUTHORIZATION": header} if header is not None else {}))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"microcosm_" not in response.content


def test_with_a_token_setting_a_scrape_with_the_token_is_answered(client, settings):
    settings.METRICS_PUBLIC = False
    settings.METRICS_TOKEN = TOKEN
    families = _scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert "microcosm_jobs" in families


def test_the_endpoint_only_reads(client):
    assert client.post("/metrics").status_code == 405
