""" "What will this get": the submit page's answer is what the scheduler then allocates.

On the demo fleet (A100 80 GB, H100 80 GB and A100 PCIe 40 GB; reserved, on-demand and spot; MIG on part of it),
for each GPU model and a grid of model sizes and kinds: the answer is asked, the job submitted, and the real loop
runs on the simulated fleet until the job is bound — the allocation must be on the GPU model, tier and node(s)
the answer named, holding the MIG profile or GPU count it named, and the answer's cost per hour must be the
catalog price of what was allocated.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from billing.services import price_book_load
from demo.seed import demo_seed
from jobs.models import Allocation, Job
from jobs.selectors.rightsizing import Suggestion, suggest
from jobs.services import job_submit
from scheduler.core.gpus.catalog import compute_fraction
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from teams.models import Team
from tests.scheduler.loop_helpers import Clock, fleet

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=1, backoff_s=0.0, sleep=lambda _s: None)
FLEET_MODELS = ("A100-PCIE-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB")
# (params_b, kind): services from small to large, and training that needs one GPU to several.
GRID = [(1, "inference"), (7, "inference"), (13, "inference"), (34, "inference"), (70, "inference"), (7, "training")]
MAX_CYCLES = 12


def _bound(job: Job, gateway, clock: Clock) -> list[Allocation]:
    for _ in range(MAX_CYCLES):
        cycle_run(gateway=gateway, retry=NO_WAIT)
        live = list(Allocation.objects.filter(job=job, ended_at__isnull=True).select_related("node__gpu_model"))
        if live:
            return live
        clock.advance(5)  # a simulated MIG reconfiguration takes 300 virtual seconds: 5 real seconds at 60×
    reason = Job.objects.get(pk=job.pk).state_reason
    raise AssertionError(f"job {job.pk} was not bound in {MAX_CYCLES} cycles: {reason}")


def _check(answer: Suggestion, allocations: list[Allocation], replicas: int) -> None:
    assert answer.now is not None and answer.now.option is not None, answer.now
    best = answer.best
    assert best is not None
    by_replica: dict[int, list[Allocation]] = {}
    for allocation in allocations:
        by_replica.setdefault(allocation.replica, []).append(allocation)
    assert len(by_replica) == replicas
    for replica, held in sorted(by_replica.items()):
        node = held[0].node
        assert node.name == answer.now.nodes[replica]
        assert (node.gpu_model.name, node.tier) == (best.gpu_model, best.tier)
        if best.mig_profile:
            assert [a.mig_profile for a in held] == [best.mig_profile]
        else:
            assert len(held) == best.gpus and all(not a.mig_profile for a in held)
    prices = price_book_load()
    expected = Decimal(0)
    for allocation in allocations:
        node = allocation.node
        price = prices.price_at(gpu_model=node.gpu_model.name, tier=node.tier, at=allocation.started_at)
        assert price is not None
        share = compute_fraction(node.gpu_model.name, allocation.mig_profile) if allocation.mig_profile else 1.0
        expected += price * Decimal(repr(share))
    assert answer.cost_per_hour == expected.quantize(Decimal("0.01"))


@pytest.mark.parametrize("gpu_model", FLEET_MODELS)
@pytest.mark.parametrize(("params_b", "kind"), GRID)
def test_the_answer_is_what_the_scheduler_allocates(gpu_model: str, params_b: int, kind: str) -> None:
    demo_seed(history=False)
    team = Team.objects.order_by("slug").first()
    assert team is not None
    clock = Clock()
    gateway = fleet(clock)
    spec = {"kind": kind, "model": {"params_b": params_b, "dtype": "bf16"}, "gpu_model": gpu_model}
    answer = suggest(spec, team=team.slug, now=clock.now.timestamp())
    if answer.reason:  # the engine's own refusal: a submit is refused with it too
        with pytest.raises(Exception, match="could never run"):
            job_submit(team=team, spec={**spec, "name": "sized"}, actor=None, now=clock.now)
        return
    job = job_submit(team=team, spec={**spec, "name": "sized"}, actor=None, now=clock.now)
    _check(answer, _bound(job, gateway, clock), replicas=1)
    if answer.now is not None and answer.now.outcome == "after-mig-change":
        # Three cycles of hysteresis (30 s), a change of 300 virtual seconds (5 real seconds at 60×), and the
        # bind at the first 10-second cycle after it.
        assert answer.now.after_s == pytest.approx(40.0)


def test_the_answer_holds_as_the_fleet_fills() -> None:
    """One job after another on the A100 80 GB servers: partly used GPUs, slices larger than the right size
    where the right size is not free, whole GPUs — each answer is the allocation; and the job that would take the
    team past its guarantee is told it waits, with the reason the cycle then gives it."""
    demo_seed(history=False)
    team = Team.objects.order_by("slug").first()
    assert team is not None
    clock = Clock()
    gateway = fleet(clock)
    sizes = [7, 7, 13, 1, 7, 13, 34, 7]  # 2.43 GPUs of the nlp team's A100 guarantee of 4
    outcomes = set()
    for number, params_b in enumerate(sizes):
        spec = {"kind": "inference", "model": {"params_b": params_b, "dtype": "bf16"}, "gpu_model": "A100-SXM4-80GB"}
        answer = suggest(spec, team=team.slug, now=clock.now.timestamp())
        assert answer.now is not None
        outcomes.add((answer.now.outcome, answer.best.mig_profile if answer.best else None))
        job = job_submit(team=team, spec={**spec, "name": f"svc-{number}"}, actor=None, now=clock.now)
        _check(answer, _bound(job, gateway, clock), replicas=1)
    # The sequence reached the cases the answer exists for: a change of layout first, then slices bound at once.
    assert ("after-mig-change", "1g.20gb") in outcomes and any(o == "starts" for o, _ in outcomes)
    spec = {"kind": "inference", "model": {"params_b": 70, "dtype": "bf16"}, "gpu_model": "A100-SXM4-80GB"}
    answer = suggest(spec, team=team.slug, now=clock.now.timestamp())
    assert answer.now is not None and answer.now.outcome == "waits"  # 2 more GPUs: above the guarantee
    job = job_submit(team=team, spec={**spec, "name": "svc-70b"}, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "pending" and job.state_reason == answer.now.reason


def test_a_job_behind_the_queue_is_told_it_waits_with_the_engines_reason() -> None:
    demo_seed(history=False)
    team = Team.objects.order_by("slug").first()
    assert team is not None
    clock = Clock()
    gateway = fleet(clock)
    filler = {"kind": "training", "gpus": 8, "gpu_model": "H100-SXM5-80GB", "duration_s": 36_000}
    for number in range(3):  # the three 8-GPU H100 servers
        job_submit(team=team, spec={**filler, "name": f"fill-{number}"}, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    answer = suggest({**filler, "gpus": 4}, team=team.slug, now=clock.now.timestamp())
    assert answer.now is not None and answer.now.outcome == "waits" and answer.now.option is None
    assert answer.now.reason.startswith("waiting for 4 H100")
    # The first choice is still named, so the page can say what it will get once it starts.
    assert answer.best is not None and answer.best.gpus == 4 and answer.best.gpu_model == "H100-SXM5-80GB"


def test_options_are_the_engines_order_with_catalog_prices() -> None:
    demo_seed(history=False)
    answer = suggest({"kind": "inference", "model": {"params_b": 7, "dtype": "bf16"}})
    assert answer.now is None  # no team: quotas decide whether it waits
    # Tier any: reserved first, then on-demand, then spot; within a tier MIG before whole GPUs, smaller GPU first.
    tiers = [o.tier for o in answer.options]
    assert tiers == sorted(tiers, key=["reserved", "on-demand", "spot"].index)
    first = answer.options[0]
    assert (first.gpu_model, first.tier, first.mig_profile) == ("A100-PCIE-40GB", "reserved", "3g.20gb")
    assert first.price_per_gpu_hour == Decimal("1.7810")  # p4d's $2.74 on demand, 35 % off for reserved
    assert answer.cost_per_hour == (Decimal("1.7810") * 3 / 7).quantize(Decimal("0.01"))
    assert "weights 13.0 GiB" in answer.memory_breakdown
    training = suggest({"kind": "training", "memory_gib": 100})
    assert {o.label for o in training.options} == {"2 whole GPUs", "3 whole GPUs"}
    impossible = suggest({"kind": "inference", "memory_gib": 1000})  # 13 × 80 GB > 8 per replica
    assert impossible.best is None and "largest GPU" in impossible.reason
    beyond = suggest({"kind": "inference", "memory_gib": 5000})  # beyond any GPU × 8: a spec error
    assert beyond.best is None and "at most 1,128" in beyond.errors["memory_gib"][0]
    assert "gpus" in suggest({"kind": "inference", "gpus": 0}).errors


def test_the_answer_reads_the_policy_as_the_loop_does(settings) -> None:
    """One reader of settings.SCHEDULER: a key the loop would refuse is refused here too, not dropped."""
    demo_seed(history=False)
    settings.SCHEDULER = {**settings.SCHEDULER, "simulated_speed": 2.0}  # the fleet's own keys are fine
    assert suggest({"kind": "inference", "memory_gib": 10}).best is not None
    settings.SCHEDULER = {**settings.SCHEDULER, "cycle_secs": 5}
    with pytest.raises(ValueError, match="cycle_secs"):
        suggest({"kind": "inference", "memory_gib": 10})


NEVER = [
    ({"kind": "inference", "model": {"params_b": 500, "dtype": "bf16"}}, "the largest GPU in the cluster"),
    ({"gpus": 64}, "no node in the cluster can hold one replica"),
    ({"gpus": 8, "replicas": 512}, "the cluster can hold at most"),
    ({"gpus": 1, "gpu_model": "H200"}, "asks for H200 GPUs; the cluster has A100-PCIE-40GB"),
]


@pytest.mark.parametrize(("spec", "reason"), NEVER)
def test_what_the_answer_says_never_runs_is_refused_at_submit(spec, reason, client) -> None:
    demo_seed(history=False)
    team = Team.objects.get(slug="nlp")
    answer = suggest(spec, team=team.slug)
    assert answer.best is None and reason in answer.reason
    assert answer.now is not None and answer.now.outcome == "never"
    lead = team.memberships.get(role="lead").user
    response = api(lead).post("/api/v1/jobs/", {**spec, "team": team.slug}, format="json")
    assert response.status_code == 400 and reason in response.json()["non_field_errors"][0]
    assert not Job.objects.filter(state="pending").exists()


def test_the_form_offers_only_the_fleets_gpu_models(client) -> None:
    demo_seed(history=False)
    lead = Team.objects.get(slug="nlp").memberships.get(role="lead").user
    client.force_login(lead)
    page = client.get("/jobs/submit/").content.decode()
    choices = page[page.index('name="gpu_model"') : page.index("</select>", page.index('name="gpu_model"'))]
    for model in FLEET_MODELS:
        assert f'value="{model}"' in choices
    assert 'value="H200-SXM5-141GB"' not in choices and 'value="H200"' not in choices
    assert 'value="A100"' in choices and 'value="H100"' in choices


def test_the_form_and_the_api_give_the_same_answer_with_the_same_defaults(client) -> None:
    demo_seed(history=False)
    lead = Team.objects.get(slug="nlp").memberships.get(role="lead").user
    model = {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 1}  # no mode: the kind's
    by_api = api(lead).post("/api/v1/rightsize/", {"model": model, "team": "nlp"}, format="json").json()
    client.force_login(lead)
    team_pk = Team.objects.get(slug="nlp").pk
    fields = {"team": team_pk, "request_by": "model", "params_b": 7, "dtype": "bf16", "context": 4096, "batch": 1}
    fields |= {"mode": "", "replicas": 1, "priority": "normal", "tier": "any"}
    page = client.get("/jobs/submit/").content.decode()
    assert 'value="training" selected' in page  # the spec's default kind, as the API's
    assert '<option value="" selected>as the kind</option>' in page  # the memory model follows it
    partial = client.post("/jobs/suggest/", {**fields, "kind": "training"}).content.decode()
    best = by_api["best"]
    assert by_api["memory_breakdown"].startswith("training memory model: weights + gradients + optimizer states")
    assert by_api["now"]["outcome"] == "starts" and best["label"] == "2 whole GPUs"  # 7 B × 16 bytes > 80 GB
    assert f"{best['label']} on {best['gpu_model']}" in partial
    assert f"${by_api['cost_per_hour']}" in partial


def test_the_api_answers_for_the_users_team_only() -> None:
    demo_seed(history=False)
    lead = Team.objects.get(slug="nlp").memberships.get(role="lead").user
    outsider = Team.objects.get(slug="vision").memberships.get(role="lead").user
    ours = api(lead).post("/api/v1/rightsize/", {"gpus": 1}, format="json")
    assert ours.status_code == 200 and ours.json()["now"]["outcome"] == "starts"  # the lead's only team
    theirs = api(outsider).post("/api/v1/rightsize/", {"gpus": 1, "team": "nlp"}, format="json")
    assert theirs.status_code == 404
    typed = api(lead).post("/api/v1/rightsize/", {"gpus": 1, "team": 7}, format="json")
    assert typed.status_code == 400 and "team" in typed.json()


def test_the_api_asks_for_a_preemptible_job_too() -> None:
    """Above the team's A100 guarantee, work that is not preemptible waits for it and preemptible work borrows:
    the API is asked either way, as the submit page is."""
    demo_seed(history=False)
    lead = Team.objects.get(slug="nlp").memberships.get(role="lead").user
    spec = {"gpus": 8, "gpu_model": "A100-SXM4-80GB", "team": "nlp"}  # nlp's A100 guarantee is 4
    firm = api(lead).post("/api/v1/rightsize/", spec, format="json").json()["now"]
    assert firm["outcome"] == "waits" and "above its guarantee of 4" in firm["reason"]
    borrowing = api(lead).post("/api/v1/rightsize/", {**spec, "preemptible": True}, format="json")
    assert borrowing.status_code == 200 and borrowing.json()["now"]["outcome"] == "starts"


def api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_form_refuses_a_job_that_could_never_run_and_keeps_what_was_typed(client) -> None:
    demo_seed(history=False)
    team = Team.objects.get(slug="nlp")
    client.force_login(team.memberships.get(role="lead").user)
    fields = {"team": team.pk, "name": "too-wide", "kind": "training", "request_by": "gpus", "gpus": 64}
    fields |= {"replicas": 1, "priority": "normal", "tier": "any", "params_b": 7, "dtype": "bf16"}
    fields |= {"context": 4096, "batch": 1, "mode": "inference", "restart_limit": 3}
    page = client.post("/jobs/submit/", fields)
    text = page.content.decode()
    assert page.status_code == 200 and "could never run on this cluster" in text
    assert "no node in the cluster can hold one replica" in text and 'value="too-wide"' in text
    assert not Job.objects.filter(name="too-wide").exists()
