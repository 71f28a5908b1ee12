"""How a run executes: the engine (one run path for every transport), the clusters it runs
on, the checks made before any worker starts, and per-worker set-up."""
