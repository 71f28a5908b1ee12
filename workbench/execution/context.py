"""A worker's context, built from its config and links: data on its device, its own model
instance, the plan, its links (`build_context`). The engine's `worker_main` builds one per
worker; the simulator's lockstep path builds one per virtual rank (transports may import
this module, never the engine)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..algorithms import REGISTRY, WorkerContext
from ..comm.base import Emulated
from ..config import RunConfig
from ..maths.accumulate import accumulated
from ..maths.backend import get_xp
from ..maths.metrics import Evaluator
from ..problem import Problem
from ..results.records import StepLog


def build_context(config: RunConfig, rank: int, size: int, kind: str, *, comm: Any = None,
                  server: Any = None, shared: dict | None = None, control: Any = None,
                  emit: Callable | None = None, t0_wall: float = 0.0, extra: dict | None = None,
                  start_barrier: Callable | None = None, timer: Callable[[], float] | None = None) -> WorkerContext:
    """Everything one worker needs: data on its device, its own model instance, plan, links."""
    xp = get_xp(kind)
    problem = Problem.from_config(config)   # built once per process: a warm worker skips the load
    data, plan = problem.data, problem.plan
    model = accumulated(problem.new_model(), config.accumulate)   # this worker's own instance (its work
    #                                       buffers), in `accumulate` micro-batches a pass when asked
    X, y = (data.X_train, data.y_train) if xp is np else (xp.asarray(data.X_train), xp.asarray(data.y_train))
    if config.latency_ms or config.bandwidth_gbps:
        comm = Emulated(comm, config.latency_ms, config.bandwidth_gbps) if comm is not None else None
        server = Emulated(server, config.latency_ms, config.bandwidth_gbps) if server is not None else None
    ctx = WorkerContext(rank=rank, size=size, kind=kind, xp=xp, config=config, plan=plan, model=model,
                        X=X, y=y, comm=comm, server=server, shared=shared or {}, control=control,
                        emit=emit, t0_wall=t0_wall, extra=dict(extra or {}), start_barrier=start_barrier)
    if timer is not None:
        ctx.timer = timer
    ctx.steps = StepLog(capacity=min(4096, plan.total_steps + 1))   # its rows: one a step (it grows if need be)
    spec = REGISTRY[config.algorithm]
    if rank == 0 or spec.evaluates in ("trainers", "all"):
        ctx.evaluator = Evaluator(model, data, xp)
    ctx.extra["dataset"] = data
    return ctx
