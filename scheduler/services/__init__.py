"""The scheduler app's writes, one room each (HackSoft services: callers import the module that does the job).

- :mod:`scheduler.services.fleet`: the inventory (GPU models, nodes and their GPUs), stated whole and idempotent.
- :mod:`scheduler.services.sync`: the inventory made to match an observation of the cluster.
- :mod:`scheduler.services.mig`: MIG maintenance on the MIG-watch beat, and the stuck changes reported.
- :mod:`scheduler.services.samples`: utilization samples.
"""
