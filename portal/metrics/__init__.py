"""``/metrics``: the state of the cluster, its queue and the scheduling loop in the Prometheus text format.

Every figure is read from the database when Prometheus scrapes (:class:`~portal.metrics.collector.DatabaseCollector`),
never counted in a process's memory. The scheduling loop runs in a Celery worker, the endpoint in any of the web
pods' gunicorn workers: prometheus_client's multiprocess mode shares counters between the processes of one pod
through files in ``PROMETHEUS_MULTIPROC_DIR``, but not between pods, and it loses them when a pod restarts. The
database is the one store every process sees, so the collector is multi-process safe by construction and every
web pod answers with the same figures:

- gauges are the rows as they are now (jobs, GPUs, quotas, the ledger);
- counters are totals of rows that are never deleted: ``preempted`` job events, lost-work rows;
- what the loop knows and no row records (phase durations, decisions per kind, MIG reconfigurations seen to end,
  interruption notices, the last cycle's end) it adds up itself in one row, ``CycleStats``
  (:mod:`scheduler.loop.stats`), which only ever grows.

Labels carry teams, priorities, kinds, states, GPU models and classes, tiers and reasons: sets bounded by the
vocabulary and the inventory, never a job id. docs/metrics.md lists every metric.
"""
