"""The parallel algorithms: one small module per family, all on the loop in `base`.

Each module declares its algorithms once (`registry.register(AlgorithmSpec(...))`): what
the algorithm is and what a run of it needs. `REGISTRY` (also `SPECS`) holds every one, the
one-worker reference `sgd` included: the engine runs them all.
"""
from __future__ import annotations

from .base import Algorithm, StepOut, WorkerContext, run_loop
from .registry import AlgorithmSpec, Needs, register, specs

SPECS = specs()
REGISTRY: dict[str, AlgorithmSpec] = SPECS

__all__ = ["REGISTRY", "SPECS", "AlgorithmSpec", "Needs", "Algorithm", "StepOut", "WorkerContext", "run_loop",
           "register"]
