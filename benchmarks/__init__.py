"""The benchmarks behind ``manage.py bench`` (spec/benchmarks.md): the simulator's, from the registry of
:mod:`scheduler.sim.bench`, and the portal's own (:mod:`benchmarks.portal_bench`: how fast the pages answer
with a big queue). A room of its own because it is the one place that runs both the simulator and the apps.
"""
