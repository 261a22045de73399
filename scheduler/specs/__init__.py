"""Reading what people write: job specs (``job``), their field checks and error collector (``fields``), and
the safe reader of any file a command is handed (``files``).

Pure like the engine (no Django, no I/O beyond reading the file it is given): the apps parse a submitted job
with :func:`scheduler.specs.job.parse_job` and the simulator parses a scenario's jobs with the same function,
so a spec means the same thing in the portal, the API, the commands and the benchmarks.
"""
