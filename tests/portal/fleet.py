"""Builders shared by the portal and API tests: a small fleet, running jobs with their allocations, and a
big pending queue (bulk-inserted, as the scheduler would have left it)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from scheduler.models import Gpu, Node
from teams.models import Team
from tests.factories import GpuModelFactory, NodeFactory

BALANCED_80GB = [["1g.10gb", 0], ["1g.10gb", 1], ["2g.20gb", 2], ["3g.40gb", 4]]


def fleet() -> Node:
    """One 8 × A100-SXM4-80GB node (reserved, $2.10/GPU-h): GPU 0 in the all-balanced MIG layout, 1–7 whole."""
    model = GpuModelFactory(name="A100-SXM4-80GB", gpu_class="A100", memory_mib=81920, mig_capable=True)
    node = NodeFactory(name="a100-res-01", gpu_model=model, gpu_count=8, tier="reserved")
    Gpu.objects.create(node=node, index=0, mig_layout=BALANCED_80GB)
    for index in range(1, 8):
        Gpu.objects.create(node=node, index=index, mig_layout=[])
    return node


def running_job(
    team: Team,
    node: Node,
    *,
    name: str = "trainer",
    gpu_index: int = 1,
    mig_profile: str = "",
    mig_start: int | None = None,
    started_at: datetime | None = None,
    price: Decimal = Decimal("2.1000"),
    **fields: object,
) -> Job:
    started = started_at or timezone.now() - timedelta(hours=2)
    request = {"mig_profile": mig_profile} if mig_profile else {"gpus": 1}
    job = Job.objects.create(
        team=team,
        name=name,
        kind="training",
        state="running",
        submitted_at=started,
        started_at=started,
        **request,
        **fields,
    )
    JobEvent.objects.create(job=job, type="submitted", at=started)
    JobEvent.objects.create(job=job, type="bound", at=started, details={"node": node.name})
    Allocation.objects.create(
        job=job,
        replica=0,
        node=node,
        gpu_index=gpu_index,
        mig_profile=mig_profile,
        mig_start=mig_start,
        tier=node.tier,
        price_per_gpu_hour=price,
        started_at=started,
    )
    return job


def pending_queue(team: Team, count: int, *, submitted_by=None, start_position: int = 1) -> None:  # type: ignore[no-untyped-def]
    """``count`` pending jobs of ``team`` with the positions and ETAs a scheduling cycle writes."""
    now = timezone.now()
    Job.objects.bulk_create(
        [
            Job(
                team=team,
                name=f"queued-{i:05d}",
                kind="training",
                gpus=1,
                submitted_by=submitted_by,
                submitted_at=now - timedelta(seconds=count - i),
                state="pending",
                state_reason="waits for 1 free A100 GPU; 3 jobs of higher priority are ahead",
                queue_position=start_position + i,
                team_queue_position=i + 1,
                eta_at=now + timedelta(minutes=i + 1),  # ahead: an estimate that has passed is not shown
            )
            for i in range(count)
        ],
        batch_size=2000,
    )
