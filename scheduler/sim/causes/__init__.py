"""Where waits come from: the engine's own ``Waiting.blocker`` joined to what the simulator measured.

``bench causes`` (:mod:`scheduler.sim.bench.causes_cli`) replays B2 with the engine and asks two questions:

- **Production inference waits** (:mod:`.waits`): every second a production inference job spent pending in
  the measured window, labelled with the kind of block the engine gave it in that cycle; for waits blocked by
  ``capacity``, whether the cluster as that cycle left it had room for the job after all, or lower-priority
  work running where it could run (:mod:`.room`).
- **idle_while_pending by cause** (:mod:`.idle`): the GPU-time of the work-conservation gap
  (:mod:`scheduler.sim.idle_pending`), attributed to the pending jobs its first fit took, by their blocker and
  by job class.

:mod:`.log` records what each cycle's plan said (it observes a planner; the replay is the same with or without
it). Blocker kinds are kept as the engine names them, including kinds this package does not know; kinds the
simulator adds for time no cycle explained are in parentheses (:mod:`.kinds`).
"""
