"""The scheduling rules, each in one module named for it, apart from the speed-ups (:mod:`..speedups`).

- :mod:`.eviction` — who may evict whom, on which ground (reclaim, priority, production), in which order;
- :mod:`.fairshare` — admission against guarantees and burst limits, borrowed work, the fair order of teams;
- :mod:`.limits` — a team's guarantee and burst limits, and the units a placement holds;
- :mod:`.gang` — all-or-nothing gangs, and how many replicas a kind of node holds;
- :mod:`.tiers` — which capacity tiers a job may run on, in preference order;
- :mod:`.topology` — where a whole-GPU gang goes on the network;
- :mod:`.fabric` — a multi-node gang on one fabric, a real one before TCP, then one placement group;
- :mod:`.reconfiguration` — MIG reconfiguration: which idle GPUs change, to which layout, how many per cycle.

How the rules combine in one cycle is :mod:`scheduler.core.cycle`; the rules are stated for people in
``docs/scheduling-rules.md``.
"""
