"""The single-process reference trainer (`algorithm="sgd"`).

Plain minibatch SGD (optionally momentum / Nesterov) over the same global minibatch
sequence, schedule and metrics as every parallel algorithm. It is the oracle the parallel
algorithms are tested against, and the "one worker, no Dask" baseline.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from ..config import RunConfig
from ..data import global_batch
from ..maths.metrics import Evaluator
from ..maths.optim import make_optimizer
from ..problem import Problem
from ..results import Collector, OnRecord, RunResult, StepLog, build_result, eval_record, event_record
from ..util import machine
from .registry import AlgorithmSpec, register

FLUSH_S = 0.25  # how often records reach on_record (the live plots redraw a few times a second)


def train_reference(config: RunConfig, on_record: OnRecord | None = None,
                    should_stop: Callable[[], bool] | None = None,
                    trajectory: list | None = None) -> RunResult:
    """Train with single-process SGD; returns the `RunResult` (status completed/stopped/diverged).

    Args:
        config: the run; `algorithm` is ignored (this is always plain SGD).
        on_record: receives batches of records as they are produced.
        should_stop: polled every step; True ends the run as `stopped`.
        trajectory: if a list is given, a copy of the parameters after every step is appended
            (tests compare parallel algorithms against it).
    """
    t_called = time.time()
    problem = Problem.from_config(config)
    data, model, plan = problem.data, problem.new_model(), problem.plan
    params = problem.initial_params()
    opt = make_optimizer(config, model.layout(), np, params.dtype)
    evaluate = Evaluator(model, data)
    grad = np.empty_like(params)
    collector = Collector(on_record)
    log = StepLog()     # step records as rows of a NumPy buffer; live batches are binned summaries
    pending: list[dict] = []
    status, t0, last_flush = "completed", time.perf_counter(), time.perf_counter()
    started = time.time()   # time 0: the first training step

    def flush() -> None:
        collector.add_live({"rank": 0, "started": started, "steps": log.live_batch(plan.epoch),
                            "records": pending})

    before, usage = machine.snapshot(), machine.LoopUsage()
    try:
        for step in range(plan.total_steps):
            if should_stop is not None and should_stop():
                status = "stopped"
                pending.append(event_record(time.perf_counter() - t0, "stopped", message=f"stop requested at step {step}"))
                break
            t_start = time.perf_counter()
            idx = global_batch(data.n_train, plan.batch_size, config.seed, step)
            lr = plan.schedule(step)
            loss, _ = model.loss_and_grad(params, data.X_train[idx], data.y_train[idx], grad_out=grad)
            if not math.isfinite(loss):
                status = "diverged"
                pending.append(event_record(time.perf_counter() - t0, "diverged", 0,
                                            f"loss became {loss} at step {step} with lr {lr:.6g}"))
                break
            opt.step(params, grad, lr)
            t_end = time.perf_counter()
            if trajectory is not None:
                trajectory.append(params.copy())
            log.add(step, t_end - t0, loss, lr, len(idx), t_end - t_start, 0.0, 0.0, 0.0)
            if plan.is_eval_step(step):
                pending.append(eval_record(0, step, plan.epoch(step + 1), time.perf_counter() - t0,
                                           **evaluate(params)))
            if time.perf_counter() - last_flush > FLUSH_S:
                flush()
                pending, last_flush = [], time.perf_counter()
    except KeyboardInterrupt:
        status = "stopped"
        pending.append(event_record(time.perf_counter() - t0, "stopped", message="KeyboardInterrupt"))
    flush()
    columns = log.columns(plan.epoch)
    collector.add_steps(0, columns)
    state = machine.summarise(before, machine.snapshot(), [usage.stop(float(columns["compute_s"].sum()), "cpu", 0)])
    wall = time.time() - t_called   # start-up + training + teardown (measure.timing)
    workers = [{"name": "local", "kind": "cpu", "host": "localhost", "share": 1.0}]
    return build_result(config.to_dict(), collector, status=status, wall_time_s=wall, workers=workers,
                        extra={"lr_schedule": plan.schedule_text, "total_steps_planned": plan.total_steps,
                               "startup_s": started - t_called, "machine": state, "machine_note": state["note"]},
                        params=params)


register(AlgorithmSpec(
    "sgd", "single-process minibatch SGD (momentum/Nesterov): the reference every parallel run is checked against",
    None, sync=True, pattern="none", spans_hosts=False))
