"""The scheduling rules, each in one module named for it and stated in plain code: who may evict whom, on which ground
and in which order (``eviction``); fair share, admission and the fair order of teams (``fairshare``, its quota
arithmetic in ``limits``); the capacity tiers a job may use, in preference order (``tiers``); which idle GPUs change to
which MIG layout (``reconfiguration``); and the checkpoint interval proposed to a job (``checkpointing``).
``docs/scheduling-rules.md`` states them for people. Rules import sizing, the model and the GPU catalog: never
placement, the decisions, the speed-ups or the cycle."""
