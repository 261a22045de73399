"""Many binds of the simulated fleet at once (:meth:`SimulatedFleet.jobs_bind`): what they read and write, shared.

One by one, a bind locks and reads its job's pods, reads the job's saved progress and the pods on each node it
lands on, and inserts its pods, each in a savepoint of its own: six statements and the ORM's work of building
them, for each of a first cycle's thousands of binds. :class:`BindView` reads all of that once for every request
of the call (the jobs' pods locked, their saved progress, the pods on every node the requests name), the fleet
checks each request against the view in order (the same checks as one by one,
:meth:`SimulatedFleet._start_pods`) and the view takes in what each accepted one changes, so a later request sees
the pods an earlier one started and no longer sees the stopping pods it cleared; :meth:`BindView.write` then
deletes the cleared pods and inserts the new ones in one statement each. A refused request changed nothing in
the view, so it leaves nothing behind, as its savepoint did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.gateways.protocol import BindRequest
from scheduler.models import Node, SimulatedPod, SimulatedProgress


@dataclass
class BindView:
    pods: dict[int, list[SimulatedPod]]  # job id -> its pods
    progress: dict[int, SimulatedProgress]  # job id -> its saved work
    on_nodes: dict[int, list[SimulatedPod]]  # node id -> every job's pods on it
    cleared: list[SimulatedPod] = field(default_factory=list)
    created: list[SimulatedPod] = field(default_factory=list)

    @classmethod
    def read(cls, requests: Sequence[BindRequest]) -> BindView:
        """The pods of the requests' jobs (locked, as one bind locks its job's), their saved progress and the
        pods on the nodes the requests name; three queries whatever the number of requests."""
        jobs = sorted({int(request.job) for request in requests})
        names = sorted({placement.node for request in requests for placement in request.placements})
        pods: dict[int, list[SimulatedPod]] = {job: [] for job in jobs}
        # In job order: two callers over the same jobs take their locks in the same order. Only the pods' rows
        # (``of``): their nodes, joined to name them, are not locked, as one bind does not lock them.
        locked = SimulatedPod.objects.select_for_update(of=("self",)).filter(job_id__in=jobs).select_related("node")
        for pod in locked.order_by("job_id", "pk"):
            pods[pod.job_id].append(pod)
        progress = {p.job_id: p for p in SimulatedProgress.objects.filter(job_id__in=jobs)}
        on_nodes: dict[int, list[SimulatedPod]] = {}
        for pod in SimulatedPod.objects.filter(node__name__in=names):
            on_nodes.setdefault(pod.node_id, []).append(pod)
        return cls(pods=pods, progress=progress, on_nodes=on_nodes)

    def pods_of(self, job: int) -> list[SimulatedPod]:
        return list(self.pods.get(job, []))

    def pods_on(self, node: Node) -> list[SimulatedPod]:
        return list(self.on_nodes.get(node.pk, []))

    def started(self, job: int, cleared: Sequence[SimulatedPod], created: Sequence[SimulatedPod]) -> None:
        """A request was accepted: its job's stopping pods ``cleared`` are gone, its pods ``created`` run."""
        gone = {pod.pk for pod in cleared}
        if gone:
            self.pods[job] = [pod for pod in self.pods.get(job, []) if pod.pk not in gone]
            for node in {pod.node_id for pod in cleared}:
                self.on_nodes[node] = [pod for pod in self.on_nodes.get(node, []) if pod.pk not in gone]
        self.pods.setdefault(job, []).extend(created)
        for pod in created:
            self.on_nodes.setdefault(pod.node_id, []).append(pod)
        self.cleared.extend(cleared)
        self.created.extend(created)

    def write(self) -> None:
        """Delete the cleared pods and insert the new ones: one statement each (none when there is nothing)."""
        if self.cleared:
            SimulatedPod.objects.filter(pk__in=[pod.pk for pod in self.cleared]).delete()
        if self.created:
            SimulatedPod.objects.bulk_create(self.created)
