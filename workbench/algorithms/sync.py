"""`sync_sgd`: data-parallel minibatch SGD with one allreduce per step.

Each global batch of B examples is split into contiguous slices, one per worker (equal,
or sized by each worker's measured speed when `split="speed"`). Worker i computes the
mean gradient g_i of its n_i examples and contributes (n_i / B) g_i, so the allreduced
sum is exactly the mean gradient over the whole batch: the same update single-process
SGD makes on batch B (up to float rounding of the split sums).

The allreduced buffer carries a few scalars after the gradient (one message per step,
not several; `base.SyncTail`): the weighted loss, rank 0's stop flag, every worker's
compute time, from which each worker derives the same new shares (deterministically, so
every rank agrees without another message), and every worker's busy time since the
previous exchange ended. A worker's `wait_s` is the slowest worker's busy time less its
own: idle, not communicating.

    buffer = [ grad (n) | loss | stop | compute_s[0..P) | busy_s[0..P) ]

With `compression` other than none, the exchange is `algorithms/compressed.py`'s
(compressed gradients, error feedback, DGC's momentum correction, PowerSGD).
"""
from __future__ import annotations

from typing import Any

from ..comm.base import ring_allreduce_bytes
from ..data import split_batch
from ..maths.optim import make_optimizer
from .base import (
    Algorithm,
    StepOut,
    SyncTail,
    WorkerContext,
    clock_reading,
    load_optimizer_state,
    optimizer_state,
    state_copy,
    tail_length,
)
from .compressed import CompressedExchange

REBALANCE_EVERY = 10  # steps between re-measurements of worker speed (split="speed")
SMOOTHING = 0.5       # weight of the newest speed estimate


def rebalance(shares: list[float], speeds: list[float], smoothing: float = SMOOTHING) -> list[float]:
    """New batch shares moved towards each worker's measured speed (samples/s), so that
    every worker needs the same time for its slice.

    >>> [round(s, 3) for s in rebalance([0.5, 0.5], [300.0, 100.0], smoothing=1.0)]
    [0.75, 0.25]
    >>> [round(s, 3) for s in rebalance([0.5, 0.5], [300.0, 100.0], smoothing=0.5)]
    [0.625, 0.375]
    """
    total_speed, total_share = sum(speeds), sum(shares)
    return [smoothing * v / total_speed + (1 - smoothing) * s / total_share for v, s in zip(speeds, shares)]


_CUTS: dict[tuple, list[tuple[int, int]]] = {}


def _cut(batch_size: int, shares: list[float]) -> list[tuple[int, int]]:
    """`split_batch`, shared by the ranks of this process that cut the same batch the same
    way (every rank holds every rank's slice: P ranks of a simulated cluster would hold P^2
    tuples, ~120 MB at 1024). Read-only for callers; a few cuts are kept."""
    key = (batch_size, tuple(shares))
    cut = _CUTS.get(key)
    if cut is None:
        if len(_CUTS) >= 8:
            _CUTS.pop(next(iter(_CUTS)))
        cut = _CUTS[key] = split_batch(batch_size, shares)
    return cut


def weigh(grads: Any, shares: Any) -> None:
    """Each slice's mean gradient times its share of the global batch, n_i / B, in place,
    so that the workers' sum is the batch's mean gradient. One worker's row (`shares` a
    number: 1, one worker's whole batch, leaves it as it is) or a stack of rows (a (K, 1)
    column of the gradients' dtype: each row's bits are those of its own scaling).

    >>> import numpy as np
    >>> g = np.ones((2, 2), np.float32); weigh(g, np.array([[0.75], [0.25]], np.float32)); g[:, 0].tolist()
    [0.75, 0.25]
    """
    if not (isinstance(shares, float) and shares == 1.0):
        grads *= shares


class SpeedBalancer:
    """Batch shares for `split="speed"`: every worker feeds in everyone's compute times
    (the same numbers on every rank, after a collective), and every REBALANCE_EVERY
    steps all ranks move the shares the same way, so they agree without a message."""

    def __init__(self, ctx: WorkerContext):
        self.ctx = ctx
        self.shares = list(ctx.extra.get("shares") or [1.0] * ctx.size)
        self.speed_sum = [0.0] * ctx.size   # samples / compute_s, summed since the last change
        self.speed_n = 0
        self.by_speed = ctx.config.split == "speed"
        self._cut()

    def _cut(self) -> None:
        """Cut the batch by the shares (again only when they move): every rank's slice, and
        `mine`, this rank's (lo, hi, (hi - lo) / B), read at every step."""
        b = self.ctx.plan.batch_size
        self._slices = _cut(b, self.shares)
        lo, hi = self._slices[self.ctx.rank]
        self.mine = (lo, hi, (hi - lo) / b)

    def slices(self) -> list[tuple[int, int]]:
        return self._slices

    def observe(self, times: list[float]) -> None:
        if not self.by_speed:
            return
        for r, (lo, hi) in enumerate(self._slices):
            self.speed_sum[r] += (hi - lo) / max(times[r], 1e-9)
        self.speed_n += 1
        if self.speed_n == REBALANCE_EVERY:
            self.shares = rebalance(self.shares, [s / self.speed_n for s in self.speed_sum])
            self._cut()
            self.speed_sum, self.speed_n = [0.0] * self.ctx.size, 0
            if self.ctx.rank == 0:
                self.ctx.event("rebalanced", "shares " + ", ".join(f"{s:.3f}" for s in self.shares))

    def summary(self) -> dict[str, Any]:
        total = sum(self.shares)
        return {"final_shares": [round(s / total, 4) for s in self.shares]}

    def state(self) -> dict[str, Any]:
        """The shares and the speeds measured since they last moved (plain numbers)."""
        return {"shares": list(self.shares), "speed_sum": list(self.speed_sum), "speed_n": self.speed_n}

    def load_state(self, state: dict[str, Any]) -> None:
        """Take up the shares, where they are this run's workers' (a regrouped run's start equal)."""
        if len(state.get("shares", ())) != self.ctx.size:
            return
        self.shares = [float(v) for v in state["shares"]]
        self.speed_sum, self.speed_n = [float(v) for v in state["speed_sum"]], int(state["speed_n"])
        self._cut()


class SyncSGD(Algorithm):
    clip_counted = "every update: every worker applies the same one"

    def __init__(self, ctx: WorkerContext, params: Any = None):
        super().__init__(ctx)
        xp, n = ctx.xp, ctx.model.n_params
        c = ctx.config
        self.params = ctx.initial_params() if params is None else xp.asarray(params)
        self.opt = make_optimizer(c, ctx.model.layout(), xp, self.params.dtype)
        self.n = n
        self.buf = ctx.comm_buffer(n + tail_length(ctx.size), self.params.dtype)
        self.grad = self.buf[:n]          # views cut once: the step runs thousands of times a second
        self.tail = SyncTail(ctx, n)
        self.balancer = SpeedBalancer(ctx)
        self.clock = ctx.clock_fn()
        self.allreduce = ctx.allreduce_fn()
        self._sum: tuple[Any, Any] = (None, None)   # (the last sum, its first n)
        self.bytes_sent = ring_allreduce_bytes(ctx.size, self.buf.nbytes)   # per step: the whole buffer
        self.compressed = CompressedExchange(self) if c.compression != "none" else None
        # what each step reads, bound once: at the teaching size a step is ~0.1 ms and the
        # Python between its NumPy calls is most of what the loop adds (docs/benchmarks.md)
        self.schedule, self.by_speed = ctx.plan.schedule, self.balancer.by_speed
        self.rows = ctx.batches()
        self.out = StepOut(staleness=0.0, bytes_sent=self.bytes_sent)   # this worker's outcome, rewritten every step

    def local_gradient(self, step: int) -> tuple[float, int, float]:
        """Weighted gradient of my slice into self.buf[:n]; returns (loss, samples, compute_s)."""
        clock = self.clock
        t0 = clock()
        lo, hi, w = self.balancer.mine
        X, y = self.rows(step, lo, hi)
        loss, _ = self.ctx.model.loss_and_grad(self.params, X, y, grad_out=self.grad)
        weigh(self.grad, w)
        return loss * w, hi - lo, clock() - t0

    @property
    def summary(self) -> dict[str, Any]:
        # every rank holds the same shares: rank 0 reports them (P lists of P would grow as P^2)
        return self.balancer.summary() if self.ctx.rank == 0 else {}

    def step(self, step: int) -> StepOut:
        if self.compressed is not None:           # compression: algorithms/compressed.py
            return self.compressed.step(step)
        lr = self.schedule(step)
        loss_w, samples, compute_s = self.local_gradient(step)               # buf[:n] = (n_i / B) g_i
        out = self.out                                # (staleness 0 and bytes_sent set once)
        out.lr = lr
        out.samples = samples
        out.compute_s = compute_s
        out.stop = None
        tail = self.tail
        applies = tail.exchange(out, self.buf, loss_w, compute_s, self.allreduce)   # sum_i (n_i / B) g_i = g
        if self.by_speed:
            self.balancer.observe(tail.times)
        if applies:
            t2 = tail.t_end
            total = tail.total
            if total is not self._sum[0]:   # a host comm hands back the same sum array: cut once
                self._sum = (total, total[:self.n])
            self.opt.step(self.params, self._sum[1], lr)                    # x -= lr g (momentum, ...)
            out.compute_s += tail.freed() - t2            # the update is compute too
        return out

    def state(self) -> dict[str, Any]:
        """The parameters, the rule's state, the batch shares; compression's memories."""
        xp = self.ctx.xp
        out = {**state_copy(xp, params=self.params), **optimizer_state(xp, self.opt), **self.balancer.state(),
               "tail.t_free": self.tail.t_free}
        if self.compressed is not None:
            out.update(self.compressed.state())
        return out

    @classmethod
    def joiner_state(cls, state: dict[str, Any]) -> dict[str, Any]:
        """The parameters and the rule's state (every worker's alike); not a worker's own
        memories, generator or shares."""
        own = ("memory", "velocity", "qsgd_rng", "shares", "speed_sum", "speed_n")
        return {k: v for k, v in state.items() if k not in own and not k.endswith("t_free")}

    def load_state(self, state: dict[str, Any]) -> None:
        xp = self.ctx.xp
        self.params[...] = xp.asarray(state["params"])
        load_optimizer_state(xp, self.opt, state)
        self.balancer.load_state(state)
        self.tail.t_free = clock_reading(self.ctx, state.get("tail.t_free"))
        if self.compressed is not None:
            self.compressed.load_state(state)

    def eval_params(self) -> Any:
        return self.params
