"""The simulated fleet: the embedded default cluster, on the database inventory, in virtual time.

:class:`SimulatedFleet` is a :class:`scheduler.gateways.protocol.ClusterGateway`. Its "hardware" is the inventory
(``scheduler.Node``/``Gpu`` rows, MIG layouts included); its pods are :class:`scheduler.models.SimulatedPod`
rows. Work runs at ``speed`` virtual seconds per real second: a job finishes after its ``duration_s`` of
virtual time (minus what a checkpoint saved before a requeue). Spot nodes receive interruption notices at a
configurable rate, vanish when the notice runs out and come back (as a replacement node) later; a MIG reconfiguration
takes ``mig_reconfigure_s`` virtual seconds. All of that happens lazily, when the fleet is next observed, so
the simulation needs no process of its own and any number of workers see one consistent fleet.

Checkpoints follow the protocol of a real job (docs/checkpointing.md): a checkpointed job saves every
``checkpoint_interval_s`` of work, and the observation reports its newest save with a step and a path
(``<CHECKPOINT_DIR>/step-NNNNNNNNN.ckpt``). A simulated job's step is the whole virtual seconds of work its
checkpoint holds, counted from the job's first start, so steps only grow across requeues. Evicted with a grace
while its node is under a spot notice, its pods turn ``stopping``: a checkpointed job saves its work as of the
SIGTERM if ``checkpoint_cost_s`` fits in the grace and before the node goes, reports that save through
``jobs.services.checkpoint_record`` (source ``simulated``) as a job does through its credential, and exits once
saved; its next run starts from that work. Any other eviction stops the pods at once, keeping the work up to the
last periodic save.

A move starts the job's pods again as the next generation (``SimulatedPod.generation``) beside the running ones;
a pod is ready ``startup_s`` virtual seconds after its bind, and a release deletes the older generation's pods at
once (a server that checkpoints nothing has nothing to save), an abandon the newer one's.
"""

from scheduler.gateways.simulated.fleet import FleetSettings, SimulatedFleet

__all__ = ["FleetSettings", "SimulatedFleet"]
