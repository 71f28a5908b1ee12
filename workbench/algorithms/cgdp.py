"""`cgdp`: CPU-GPU data parallel SGD (Le et al., ICPE'18).

The master weights and the optimiser state live in host memory, with a master on a CPU
worker. Device workers (GPUs, or CPU workers standing in for them) compute the gradient
of their slice of each global batch; as the backward pass finishes a chunk of layers, the
worker ships that chunk's weighted gradient to the master without waiting and goes on
with the backward pass. When every worker's part of a chunk has arrived, the master sums
them (in rank order: deterministic) and updates that chunk of the master weights with
the shared SGD rule: host-side aggregation and update overlap with the devices'
remaining backward work. Before the next forward pass each worker fetches the fresh
weights.

The maths is sync_sgd's (and so single-process SGD's on the same global batch): a chunk
of the update only uses that chunk's gradient and optimiser state.

Chunking: layers are grouped `chunk_layers` at a time in backward order (the paper syncs
per group of layers). With `chunk_layers="auto"` the master times iterations: it starts
at one layer per chunk and grows the chunk while an iteration gets faster, then keeps
the best (the paper's run-time choice). Every worker learns the chunking for the next
step from its fetch, so all agree.

Records: compute_s is the forward+backward including the non-blocking sends; comm_s the
fetch (waiting for the last chunk's update and copying weights back); wait_s the part of
that fetch spent waiting for slower workers.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..maths.backend import to_numpy
from ..maths.optim import SGD
from .base import Algorithm, StepOut, WorkerContext
from .sync import SpeedBalancer

TUNE_STEPS = 4       # iterations timed per chunk size while auto-tuning (after a warm-up step)


def chunk_bounds(groups: list[tuple[int, int]], chunk_layers: int) -> list[tuple[int, int]]:
    """Flat-vector slices of each chunk, in BACKWARD order (last layers first).

    >>> chunk_bounds([(0, 10), (10, 15), (15, 18)], 2)
    [(10, 18), (0, 10)]
    """
    back = list(reversed(groups))
    chunks = []
    for i in range(0, len(back), chunk_layers):
        part = back[i:i + chunk_layers]
        chunks.append((min(lo for lo, _ in part), max(hi for _, hi in part)))
    return chunks


class ChunkTuner:
    """Grow the chunk while iterations get faster; keep the best (the paper's rule)."""

    def __init__(self, setting: int | str, n_layers: int):
        self.auto = setting == "auto"
        self.n_layers = n_layers
        self.current = 1 if self.auto else min(int(setting), n_layers)
        self.best: tuple[float, int] | None = None
        self.samples: list[float] = []
        self.done = not self.auto

    def observe(self, step_s: float) -> int:
        """Record one iteration's time; returns the chunk size for the next iteration."""
        if self.done:
            return self.current
        self.samples.append(step_s)
        if len(self.samples) < TUNE_STEPS + 1:
            return self.current
        t = float(np.median(self.samples[1:]))  # the first step after a change warms caches
        self.samples = []
        if self.best is None or t < self.best[0]:
            self.best = (t, self.current)
            if self.current < self.n_layers:
                self.current += 1
                return self.current
        self.current, self.done = self.best[1], True
        return self.current


class ChunkMaster:
    """Master weights, optimiser and the per-chunk reduction; front-end free."""

    def __init__(self, params: np.ndarray, size: int, groups: list[tuple[int, int]], chunk_layers: int | str,
                 momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0):
        self.x = np.array(params, copy=True)
        self.opt = SGD(self.x.shape[0], np, self.x.dtype, momentum, nesterov, weight_decay)
        self.size, self.groups = size, [tuple(g) for g in groups]
        self.tuner = ChunkTuner(chunk_layers, len(self.groups))
        self.parts: dict[tuple[int, int], dict[int, np.ndarray]] = {}
        self.step, self.chunks_left, self.loss, self.stop = -1, 0, 0.0, False
        self.outcome = (0.0, False, [0.0] * size)   # (loss, stop, compute times) of the last completed step
        self.times: dict[int, float] = {}
        self.last_done = time.perf_counter()
        self.chunk_history: list[int] = []

    def add(self, step: int, rank: int, lo: int, hi: int, grad: np.ndarray, lr: float,
            loss_w: float = 0.0, stop: bool = False, compute_s: float | None = None) -> bool:
        """One worker's weighted chunk; updates that chunk once every worker's part is
        in. Returns True when this completed the whole step.

        The stop flag rides on the first chunk sent (rank 0's last layers), so it is
        known before any chunk of the step completes: a stopped step changes nothing."""
        if step != self.step:  # first chunk of a new step
            self.step, self.loss, self.stop = step, 0.0, False
            self.chunks_left = len(chunk_bounds(self.groups, self.tuner.current))
        parts = self.parts.setdefault((lo, hi), {})
        parts[rank] = grad
        self.loss += loss_w
        self.stop = self.stop or stop
        if compute_s is not None:
            self.times[rank] = compute_s
        if len(parts) < self.size:
            return False
        total = parts[0].copy()
        for r in range(1, self.size):  # rank order: deterministic sums
            total += parts[r]
        del self.parts[(lo, hi)]
        if not self.stop:
            self.opt.step_chunk(self.x, total, lr, lo, hi)
        self.chunks_left -= 1
        if self.chunks_left:
            return False
        # A fast worker may start the next step before a slow one fetches this one:
        # keep this step's outcome apart from the running sums.
        self.outcome = (float(self.loss), bool(self.stop), [self.times.get(r, 0.0) for r in range(self.size)])
        now = time.perf_counter()
        self.chunk_history.append(self.tuner.current)
        self.tuner.observe(now - self.last_done)
        self.last_done = now
        return True

    def result(self) -> tuple[np.ndarray, float, bool, int, list[float]]:
        """Fresh weights, the step's global loss, the stop flag, next step's chunk size,
        every worker's compute time (for speed-based shares)."""
        loss, stop, times = self.outcome
        return self.x.copy(), loss, stop, self.tuner.current, times


class ThreadChunkMaster:
    """ChunkMaster for workers that are threads: a lock, and a condition per step."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.core = ChunkMaster(*args, **kwargs)
        self.cond = threading.Condition()
        self.completed = -1

    def push(self, step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
        with self.cond:
            if self.core.add(step, rank, lo, hi, grad, lr, loss_w, stop, compute_s):
                self.completed = step
                self.cond.notify_all()

    def fetch(self, step: int):
        with self.cond:
            while not self.cond.wait_for(lambda: self.completed >= step, timeout=0.5):
                pass
            return self.core.result()

    def wait_sent(self) -> None:
        pass  # pushes are synchronous here

    def history(self) -> list[int]:
        return list(self.core.chunk_history)


class ChunkMasterActor:
    """ChunkMaster as a Dask actor: coroutines on the hosting worker's event loop, so
    chunk sums and updates run while the devices are still in their backward pass."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.core = ChunkMaster(*args, **kwargs)
        self.completed = -1
        self._cond: asyncio.Condition | None = None

    def _c(self) -> asyncio.Condition:
        if self._cond is None:  # made on the worker's loop, at first use
            self._cond = asyncio.Condition()
        return self._cond

    async def push(self, step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
        if self.core.add(step, rank, lo, hi, grad, lr, loss_w, stop, compute_s):
            cond = self._c()
            async with cond:
                self.completed = step
                cond.notify_all()

    async def fetch(self, step: int):
        cond = self._c()
        async with cond:
            await cond.wait_for(lambda: self.completed >= step)
        return self.core.result()

    async def history(self) -> list[int]:
        return list(self.core.chunk_history)


class ChunkMasterProxy:
    """Worker side of ChunkMasterActor: pushes are fire-and-forget (checked before the
    fetch), fetches block, polling for an aborted run."""

    def __init__(self, actor: Any, control: Any = None):
        from ..comm.dask import _ActorCall
        self.caller = _ActorCall(actor, control)
        self.actor = actor
        self.sent: list[Any] = []

    def push(self, *args: Any) -> None:
        self.sent.append(self.actor.push(*args))

    def wait_sent(self) -> None:
        for fut in self.sent:
            fut.result()
        self.sent = []

    def fetch(self, step: int):
        return self.caller.call("fetch", step)

    def history(self) -> list[int]:
        return self.caller.call("history")


# ------------------------------------------------------------------ the master in shared memory
# Segment layout: int64 header | int64 arrivals per chunk | float64 outcome | float32 arrays
H_COMPLETED, H_STOP, H_FINAL_DONE, N_HEADER = 0, 1, 2, 8    # header slots
F_LAST_DONE, F_STEP_S, F_LOSS, F_STOP, N_FLOATS = 0, 1, 2, 3, 4   # then times[P], loss_w[P], compute_s[P]


def master_nbytes(n: int, size: int, n_layers: int, momentum: bool) -> int:
    """Bytes of a shared-memory chunk master: n parameters, P workers."""
    return 8 * (N_HEADER + n_layers) + 8 * (N_FLOATS + 3 * size) + 4 * n * (1 + int(momentum) + size)


def create_master_segment(name: str, params: np.ndarray, size: int, n_layers: int, momentum: bool) -> str:
    """Create and fill a ShmChunkMaster segment (runs on one worker of the host)."""
    from ..comm.shm import _OWNED, create_segment
    seg = create_segment(name, master_nbytes(params.shape[0], size, n_layers, momentum))
    views = _master_views(_OWNED[seg].buf, params.shape[0], size, n_layers, momentum)
    views["x"][:] = params
    views["header"][[H_COMPLETED, H_STOP]] = -1
    views["floats"][F_LAST_DONE] = time.perf_counter()   # CLOCK_MONOTONIC: one clock for the host
    return seg


def _master_views(buf: Any, n: int, size: int, n_layers: int, momentum: bool) -> dict[str, np.ndarray]:
    off = 0

    def take(shape: tuple, dtype: Any) -> np.ndarray:
        nonlocal off
        a = np.ndarray(shape, dtype=dtype, buffer=buf, offset=off)
        off += a.nbytes
        return a
    v = {"header": take((N_HEADER,), np.int64), "arrivals": take((n_layers,), np.int64),
         "floats": take((N_FLOATS + 3 * size,), np.float64), "x": take((n,), np.float32)}
    v["velocity"] = take((n,), np.float32) if momentum else None
    v["slots"] = take((size, n), np.float32)                     # (P, n): each worker's weighted chunks
    return v


class ShmChunkMaster:
    """ChunkMaster in shared memory, for workers on one host: no master process at all.

    The master weights, the velocity and one slot row per worker live in one segment.
    A worker writes its weighted chunk into its row and counts itself in under a kernel
    file lock (as `ShmServer`). The worker that completes a chunk sums the rows in rank
    order and updates that chunk of the master weights, while the others go on with
    their backward pass: the aggregation still overlaps with the remaining backward
    work, as in the paper, without a round trip through another process's event loop.
    The final chunk (the first layers, every worker's last push) has no backward work
    left to hide behind, so all workers complete it together, each summing and updating
    its own column block, like the shared-memory allreduce; the last to finish publishes
    the step's outcome (loss summed in rank order, stop flag, every worker's compute
    time, the step's duration). Every worker keeps its own `ChunkTuner`, fed the same
    durations, so all agree on the next step's chunking without a message.

    Why nothing is overwritten too early: a worker pushes its final chunk only after
    completing any chunk it had to, so the step is whole once every block of the final
    chunk is done; and a worker's next pushes follow its fetch, so no chunk of step s+1
    can complete (changing weights or outcome) before every worker has fetched step s.
    """

    def __init__(self, segment: str, lock_path: str, rank: int, size: int, groups: list[tuple[int, int]],
                 chunk_layers: int | str, n: int, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, control: Any = None):
        from ..comm.shm import attach
        self.shm = attach(segment)
        self.rank, self.size, self.control = rank, size, control
        self.groups = [tuple(g) for g in groups]
        v = _master_views(self.shm.buf, n, size, len(self.groups), momentum > 0)
        self.header, self.arrivals, self.floats = v["header"], v["arrivals"], v["floats"]
        self.x, self.slots = v["x"], v["slots"]
        self.times, self.loss_w, self.compute_s = (self.floats[N_FLOATS + k * size:N_FLOATS + (k + 1) * size]
                                                   for k in range(3))
        self.opt = SGD(n, np, np.float32, 0.0, nesterov, weight_decay)
        if momentum > 0:  # the velocity is master state: shared, not per worker
            self.opt.momentum, self.opt.velocity = momentum, v["velocity"]
        self.total = np.empty(n, np.float32)   # scratch for the sums this worker makes
        self.fetched = np.empty(n, np.float32)  # this worker's copy of the fresh weights
        self.tuner = ChunkTuner(chunk_layers, len(self.groups))
        self._chunking()
        self.chunk_history: list[int] = []
        self.lockfile = open(lock_path, "a+")

    def _chunking(self) -> None:
        self.index = {c: i for i, c in enumerate(chunk_bounds(self.groups, self.tuner.current))}

    def _locked(self, fn: Callable[[], Any]) -> Any:
        import fcntl
        fcntl.flock(self.lockfile, fcntl.LOCK_EX)
        try:
            return fn()
        finally:
            fcntl.flock(self.lockfile, fcntl.LOCK_UN)

    def _wait(self, ready: Callable[[], bool]) -> None:
        """Spin, then sleep, until `ready()`; an aborted run ends the wait."""
        from ..comm.shm import wait_until
        wait_until(ready, self.control, "cgdp master")

    def _reduce(self, step: int, lo: int, hi: int, lr: float) -> None:
        """Sum every worker's rows of [lo, hi) in rank order, and update the master there."""
        total = self.total[lo:hi]
        np.copyto(total, self.slots[0, lo:hi])
        for r in range(1, self.size):
            total += self.slots[r, lo:hi]
        if self.header[H_STOP] != step:      # a stopped step changes nothing
            self.opt.step_chunk(self.x, total, lr, lo, hi)

    def push(self, step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
        i = self.index[(lo, hi)]
        final = i == len(self.index) - 1
        if grad is not None:                 # None: already written through `slot`
            self.slots[rank, lo:hi] = grad
        if compute_s is not None:            # the worker's last chunk carries its loss and time
            self.loss_w[rank], self.compute_s[rank] = loss_w, compute_s
        if stop:                             # rank 0's first chunk: before any chunk can complete
            self.header[H_STOP] = step

        def arrive() -> bool:
            self.arrivals[i] += 1
            if final or self.arrivals[i] < self.size:
                return False
            self.arrivals[i] = 0             # complete: the next arrival is next step's
            return True
        if self._locked(arrive):
            self._reduce(step, lo, hi, lr)   # this worker completes the chunk
        if not final:
            return
        self._wait(lambda: self.arrivals[i] == self.size)
        m, r, p = hi - lo, self.rank, self.size
        self._reduce(step, lo + r * m // p, lo + (r + 1) * m // p, lr)   # my block of the final chunk

        def block_done() -> bool:
            self.header[H_FINAL_DONE] += 1
            if self.header[H_FINAL_DONE] < self.size:
                return False
            self.header[H_FINAL_DONE] = self.arrivals[i] = 0
            return True
        if self._locked(block_done):         # the step is whole: publish it
            loss = 0.0
            for q in range(self.size):
                loss += float(self.loss_w[q])
            now = time.perf_counter()
            f = self.floats
            f[F_LOSS], f[F_STOP] = loss, float(self.header[H_STOP] == step)
            f[F_STEP_S], f[F_LAST_DONE] = now - f[F_LAST_DONE], now
            self.times[:] = self.compute_s
            self.header[H_COMPLETED] = step  # written last

    def slot(self, rank: int, lo: int, hi: int) -> np.ndarray:
        """Where `rank`'s weighted gradient of [lo, hi) goes: write it there, push None."""
        return self.slots[rank, lo:hi]

    def wait_sent(self) -> None:
        pass  # pushes are complete when they return

    def fetch(self, step: int):
        """The fresh weights (in a buffer of this worker's, overwritten by the next fetch), the
        step's loss and stop flag, the next step's chunking and every worker's compute time."""
        self._wait(lambda: self.header[H_COMPLETED] >= step)
        f = self.floats
        np.copyto(self.fetched, self.x)
        x, loss, stop, times = self.fetched, float(f[F_LOSS]), bool(f[F_STOP]), [float(t) for t in self.times]
        used = self.tuner.current
        self.chunk_history.append(used)
        if self.tuner.observe(float(f[F_STEP_S])) != used:
            self._chunking()
        return x, loss, stop, self.tuner.current, times

    def history(self) -> list[int]:
        return list(self.chunk_history)

    def close(self) -> None:
        from ..comm.shm import _OWNED
        self.lockfile.close()
        del self.header, self.arrivals, self.floats, self.x, self.slots, self.times, self.loss_w, self.compute_s
        self.opt.velocity = None
        if self.shm.name not in _OWNED:
            self.shm.close()


class CGDP(Algorithm):
    sync = True

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        xp, model = ctx.xp, ctx.model
        self.master = ctx.server
        self.params = xp.asarray(model.init(ctx.config.seed))
        self.grad = xp.empty_like(self.params)
        self.groups = model.layer_groups()
        setting = ctx.config.chunk_layers
        self.chunks = chunk_bounds(self.groups, 1 if setting == "auto" else min(int(setting), len(self.groups)))
        self.balancer = SpeedBalancer(ctx)
        self.clock = ctx.clock

    def step(self, step: int) -> StepOut:
        ctx = self.ctx
        lr = ctx.plan.schedule(step)
        lo_b, hi_b = self.balancer.slices()[ctx.rank]
        w = (hi_b - lo_b) / ctx.plan.batch_size
        X, y = ctx.batch(step, lo_b, hi_b)
        stop = ctx.rank == 0 and ctx.stop_requested()
        starts = {lo: hi for lo, hi in self.chunks}
        first = [True]
        held: list[tuple[int, int]] = []

        def ready(start: int, _stop: int) -> None:
            # Layers finish last-first; a chunk goes out as soon as its lowest layer is in.
            if start not in starts:
                return
            if start == 0:          # the final chunk carries the loss, known on return
                held.append((0, starts[0]))
                return
            self.master.push(step, ctx.rank, start, starts[start], self._weighted(start, starts[start], w),
                             lr, 0.0, stop and first[0])
            first[0] = False

        t0 = self.clock()
        loss, _ = ctx.model.loss_and_grad(self.params, X, y, grad_out=self.grad, on_grad_ready=ready)
        t1 = self.clock()
        for lo, hi in held:  # the last chunk also reports this worker's compute time
            self.master.push(step, ctx.rank, lo, hi, self._weighted(lo, hi, w), lr, loss * w,
                             stop and first[0], t1 - t0)
        self.master.wait_sent()
        params, gloss, gstop, chunking, times = self.master.fetch(step)
        t2 = self.ctx.timer()
        self.balancer.observe(times)
        self.params = ctx.xp.asarray(params)
        self.chunks = chunk_bounds(self.groups, chunking)
        # the part of the fetch spent waiting for the slowest worker's compute (as sync_sgd)
        wait_s = min(max(0.0, max(times) - (t1 - t0)), t2 - t1)
        out = StepOut(loss=gloss, lr=lr, samples=hi_b - lo_b, compute_s=t1 - t0, comm_s=t2 - t1 - wait_s,
                      wait_s=wait_s)
        if gstop:
            out.stop = "stopped"
        elif not math.isfinite(gloss):
            out.stop = "diverged"
        return out

    def _weighted(self, lo: int, hi: int, w: float) -> np.ndarray | None:
        """My weighted gradient of [lo, hi) on the host: written straight into a
        shared-memory master's row (then None is pushed), else a new array."""
        slot = getattr(self.master, "slot", None)
        if slot is None:
            return to_numpy(self.grad[lo:hi]) * w
        np.multiply(to_numpy(self.grad[lo:hi]), w, out=slot(self.ctx.rank, lo, hi))
        return None

    def eval_params(self) -> Any:
        return self.params

    def finish(self) -> Any:
        if self.ctx.rank == 0:
            hist = self.master.history()
            self.summary = {"chunk_layers_used": hist[-1] if hist else None,
                            "chunk_layers_tried": sorted(set(hist)), **self.balancer.summary()}
        return super().finish()


def host_spec(config: Any, size: int, model: Any, params0: np.ndarray) -> dict[str, Any]:
    """What the engine starts for cgdp: the chunk master, in shared memory when every
    worker is on one host, else an actor on a CPU worker if there is one."""
    opt = {"momentum": config.momentum, "nesterov": config.nesterov, "weight_decay": config.weight_decay}
    groups = model.layer_groups()
    return {"actor": ChunkMasterActor, "thread": ThreadChunkMaster, "proxy": ChunkMasterProxy, "prefer": "cpu",
            "args": (params0, size, groups, config.chunk_layers), "kwargs": opt,
            # every worker on one host: the master in shared memory instead of an actor
            "shm": {"create": create_master_segment, "args": (params0, size, len(groups), config.momentum > 0),
                    "cls": ShmChunkMaster,
                    "kwargs": {"groups": groups, "chunk_layers": config.chunk_layers, "n": params0.shape[0], **opt}}}
