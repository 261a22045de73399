"""The simulated fleet: the embedded default cluster, on the database inventory, in virtual time.

:class:`SimulatedFleet` is a :class:`scheduler.gateways.protocol.ClusterGateway`. Its "hardware" is the inventory
(``scheduler.Node``/``Gpu`` rows, MIG layouts included); its pods are :class:`scheduler.models.SimulatedPod`
rows. Work runs at ``speed`` virtual seconds per real second: a job finishes after its ``duration_s`` of
virtual time (minus what a checkpoint saved before a requeue). Spot nodes receive interruption notices at a
configurable rate, vanish when the notice runs out and come back (as a replacement node) later; a MIG change
takes ``mig_reconfigure_s`` virtual seconds. All of that happens lazily, when the fleet is next observed, so
the simulation needs no process of its own and any number of workers see one consistent fleet.
"""

from scheduler.gateways.simulated.fleet import FleetSettings, SimulatedFleet

__all__ = ["FleetSettings", "SimulatedFleet"]
