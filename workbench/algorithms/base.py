"""The one worker loop every algorithm runs, and the context it hands them.

An algorithm is a small class with `step(step) -> StepOut`, `eval_params()` and
`finish()`; it talks to its peers only through `ctx.comm` (a collective) and
`ctx.server` (a parameter server / centre variable) and `ctx.shared` (shared-memory
arrays), never through Dask. The loop around it is the same for all: stop requests,
divergence, timing, records, periodic evaluation.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..backend import synchronize, to_numpy
from ..config import RunConfig
from ..data import global_batch, split_batch
from ..optim import Plan
from ..results import eval_record, event_record, step_record

FLUSH_S = 0.2  # records leave the worker a few times a second


@dataclass
class StepOut:
    """What one step reports; `stop` ends the loop ("stopped" or "diverged")."""

    loss: float = float("nan")
    lr: float = 0.0
    samples: int = 0
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    staleness: float = 0.0
    stop: str | None = None


@dataclass
class WorkerContext:
    """Everything a worker's algorithm may use; built once per run per worker."""

    rank: int
    size: int
    kind: str                    # "cpu" | "gpu"
    xp: Any                      # numpy or cupy
    config: RunConfig
    plan: Plan
    model: Any
    X: Any                       # training set on this worker's device, (N, F)
    y: Any                       # (N,)
    evaluator: Any = None        # on the ranks that evaluate (rank 0; LTFB: every trainer)
    comm: Any = None             # Comm among the run's workers
    server: Any = None           # Server proxy
    shared: dict[str, Any] = field(default_factory=dict)  # name -> SharedArray
    control: Any = None          # stop/abort requests
    emit: Callable[[list[dict]], None] | None = None
    t0_wall: float = 0.0         # the run's start, wall clock (time.time())
    extra: dict[str, Any] = field(default_factory=dict)   # per-algorithm setup (tournament sets, ...)
    _pending: list[dict] = field(default_factory=list)
    _last_flush: float = 0.0

    # ---------------------------------------------------------------- data
    def batch(self, step: int, lo: int, hi: int, batch_size: int | None = None,
              index: Any = None) -> tuple[Any, Any]:
        """Rows lo:hi of global batch `step` (the order depends on seed and epoch only).

        `index` maps batch positions into a subset (LTFB trainers' partitions)."""
        n = self.X.shape[0] if index is None else len(index)
        idx = global_batch(n, batch_size or self.plan.batch_size, self.config.seed, step)[lo:hi]
        if index is not None:
            idx = index[idx]
        if self.xp is not np:
            idx = self.xp.asarray(idx)
        return self.X[idx], self.y[idx]

    def my_slice(self, shares: list[float] | None = None, batch_size: int | None = None) -> tuple[int, int]:
        """This worker's rows of each global batch: equal shares unless given."""
        shares = shares or [1.0] * self.size
        return split_batch(batch_size or self.plan.batch_size, shares)[self.rank]

    # ---------------------------------------------------------------- clocks
    def now(self) -> float:
        """Seconds since the run started (wall clock, shared by all workers on a host)."""
        return time.time() - self.t0_wall

    def sync_device(self) -> None:
        synchronize(self.xp)

    # ---------------------------------------------------------------- communication helpers
    def allreduce(self, buf: Any) -> Any:
        """Allreduce through ctx.comm, staging device buffers through the host when the
        comm is host-only (shared memory, Dask); NCCL comms take device buffers."""
        if self.xp is np or getattr(self.comm, "device", False):
            return self.comm.allreduce(buf)
        return self.xp.asarray(self.comm.allreduce(to_numpy(buf)))

    def comm_buffer(self, m: int, dtype: Any) -> Any:
        """A buffer of m elements to fill and allreduce: the comm's own slot when it has
        one (shared memory: no copy in), else a fresh zeroed array on the device."""
        if self.xp is np and self.comm is not None:
            try:
                buf = self.comm.buffer(m)
                if buf.dtype == dtype:
                    buf[...] = 0
                    return buf
            except AttributeError:
                pass
        return self.xp.zeros(m, dtype=dtype)

    # ---------------------------------------------------------------- records
    def record(self, rec: dict) -> None:
        self._pending.append(rec)
        if time.perf_counter() - self._last_flush > FLUSH_S:
            self.flush()

    def event(self, event: str, message: str) -> None:
        self.record(event_record(self.now(), event, self.rank, message))

    def flush(self, done: bool = False) -> None:
        if done:
            self._pending.append({"kind": "done", "worker": self.rank})
        if self.emit is not None and self._pending:
            self.emit(self._pending)
        self._pending = []
        self._last_flush = time.perf_counter()

    def stop_requested(self) -> bool:
        return self.control is not None and self.control.stop_requested()


class Algorithm:
    """Base class: one instance per worker per run."""

    sync = True          # every worker must reach every step (a lost worker fails the run)
    evaluates = "rank0"  # who evaluates: "rank0" or "trainers" (LTFB)
    shm_server = True    # its server calls (pull/push/elastic/retire/centre) work on the shared-memory server

    def __init__(self, ctx: WorkerContext):
        self.ctx = ctx

    def step(self, step: int) -> StepOut:
        raise NotImplementedError

    def eval_params(self) -> Any:
        """The parameters to evaluate now (rank 0): the model, the server's, the centre."""
        raise NotImplementedError

    def finish(self) -> np.ndarray | None:
        """End of the run; rank 0 returns the final parameters (NumPy)."""
        return to_numpy(self.eval_params()) if self.ctx.rank == 0 else None

    def evaluate(self, step: int) -> None:
        """Periodic evaluation; LTFB overrides to evaluate every trainer."""
        ctx = self.ctx
        if ctx.rank == 0 and ctx.evaluator is not None:
            scores = ctx.evaluator(self.eval_params())
            ctx.record(eval_record(self.eval_name, step, ctx.plan.epoch(step + 1), ctx.now(), **scores))

    eval_name = "0"


def run_loop(ctx: WorkerContext, algo: Algorithm) -> dict[str, Any]:
    """Drive `algo` for the planned steps; returns {"status", "params" (rank 0)}."""
    plan, status = ctx.plan, "completed"
    step = -1
    for step in range(plan.total_steps):
        if not algo.sync and ctx.stop_requested():
            status = "stopped"
            break
        out = algo.step(step)
        if out.stop:
            status = out.stop
            if out.stop == "diverged" and (ctx.rank == 0 or not algo.sync):
                ctx.event("diverged", f"loss became {out.loss} at step {step} with lr {out.lr:.6g}")
            if out.stop == "stopped" and ctx.rank == 0:
                ctx.event("stopped", f"stop requested; ended at step {step}")
            break
        ctx.record(step_record(ctx.rank, step, plan.epoch(step + 1), ctx.now(), float(out.loss),
                               float(out.lr), int(out.samples), out.compute_s, out.comm_s, out.wait_s,
                               float(out.staleness)))
        if not algo.sync and not math.isfinite(out.loss):  # asynchronous: this worker saw it first
            # (synchronous algorithms decide together and set out.stop; sync_easgd's local
            # steps between exchanges may see a NaN that the next exchange reports to all)
            status = "diverged"
            ctx.event("diverged", f"loss became {out.loss} at step {step} with lr {out.lr:.6g}")
            if ctx.control is not None:
                ctx.control.request_stop("diverged")
            break
        if plan.is_eval_step(step):
            algo.evaluate(step)
    params = algo.finish()
    ctx.flush(done=True)
    return {"status": status, "params": params, "last_step": step, "summary": getattr(algo, "summary", {})}


def timed(xp: Any) -> Callable[[], float]:
    """A clock that first waits for queued device work (CuPy is asynchronous)."""
    def clock() -> float:
        synchronize(xp)
        return time.perf_counter()
    return clock
