"""The GPU catalog, the engine's lowest floor: the GPU models and their MIG geometry (``catalog``) and the units GPU
capacity is counted in (``units``), static facts that hold on every cluster and in every cycle. It imports nothing else
of the engine; every floor above, and the apps, may read it."""
