"""The parallel algorithms: one small module per family, all on the loop in `base`.

Each module declares its algorithms once (`registry.register(AlgorithmSpec(...))`): what
the algorithm is and what a run of it needs. `SPECS` holds every one, the single-process
reference `sgd` included; `REGISTRY` the ones the engine runs (all but `sgd`).
"""
from __future__ import annotations

from .base import Algorithm, StepOut, WorkerContext, run_loop
from .registry import AlgorithmSpec, Needs, register, specs

SPECS = specs()
REGISTRY: dict[str, AlgorithmSpec] = {name: spec for name, spec in SPECS.items() if not spec.single_process}

__all__ = ["REGISTRY", "SPECS", "AlgorithmSpec", "Needs", "Algorithm", "StepOut", "WorkerContext", "run_loop",
           "register"]
