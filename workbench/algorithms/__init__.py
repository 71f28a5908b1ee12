"""The parallel algorithms: one small module per family, all on the loop in `base`.

Each algorithm is declared once, in `registry`'s table (an `AlgorithmSpec` naming its
class): what the algorithm is and what a run of it needs. `REGISTRY` (also `SPECS`) holds
every one, the one-worker reference `sgd` included: the engine runs them all.

Importing this package reads the declarations only; the loop (`base`) and each family's
module load on first use (`Algorithm`, `StepOut`, `WorkerContext`, `run_loop` below, or a
spec's `cls`), so validating a `RunConfig` stays light.
"""
from __future__ import annotations

from typing import Any

from ..config.registry import AlgorithmSpec, Needs, register, specs

SPECS = specs()
REGISTRY: dict[str, AlgorithmSpec] = SPECS

__all__ = ["REGISTRY", "SPECS", "AlgorithmSpec", "Needs", "Algorithm", "StepOut", "WorkerContext", "run_loop",
           "register"]


def __getattr__(name: str) -> Any:
    if name in ("Algorithm", "StepOut", "WorkerContext", "run_loop"):   # the loop: imported on first use
        from . import base
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
