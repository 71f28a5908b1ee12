"""Local SGD, post-local SGD and DiLoCo: workers step on their own, then average.

Every worker i keeps its own parameters x_i and runs local optimiser steps on its slice
of each global batch (local step t uses global batch t, as the EASGD family does: the
data order depends on the seed only). Every H = `tau` local steps the workers meet in
one allreduce. H reuses the EASGD family's knob: it is the same axis (local steps
between exchanges), and one name lets a sweep put the families side by side.

    local_sgd (Lin, Stich, Patel, Jaggi, ICLR 2020: "Don't use large mini-batches, use local SGD"):
        H local steps of the shared update rule (maths.optim.make_optimizer: `config.optimizer`,
        momentum, Nesterov, weight decay as configured; each worker keeps its own optimiser state,
        its momentum buffer as in the paper), then
            x_i <- sum_j w_j x_j                      w_j = n_j / B, the share of the batch
    post_local_sgd (same paper, section 3): average after every step (= sync_sgd) until epoch
        `post_local_epoch`, then every H steps (the paper switches at the first lr decay)
    diloco (Douillard et al., arXiv 2311.08105, Algorithm 1): from the outer parameters x,
        H inner steps give x_i; the outer gradient is the averaged parameter change
            Delta = sum_j w_j (x - x_j)
            v = mu v + Delta;  x -= lr_out (Delta + mu v)   (Nesterov, PyTorch's form; mu = outer_momentum)
        and every worker restarts from the new x (its inner optimiser state kept).
        Inner optimiser: the shared rule (`config.optimizer`, maths.optim.make_optimizer: sgd
        with momentum / Nesterov as configured, or adamw / lars / lamb, each worker keeping its
        own state); the paper uses AdamW (lr 4e-4): `optimizer: adamw`.

With sgd, the weights w_j make H = 1 exactly the maths of sync_sgd: averaging parameters that each
moved by -lr v_j, with v_j = mu v_j + g_j, moves the average by -lr sum_j w_j v_j, and the
weighted velocities follow sync_sgd's recurrence (everything is linear in g). In float32
the sums are taken in another order, so the two agree to rounding, not bitwise (tests
check 1e-5). With one worker, diloco with lr_out = 1 and mu = 0 is its inner optimiser
(x - (x - x_1) = x_1, again to rounding).

The last step of a run always ends in an average (the returned model is an average),
whatever H. Between averages the workers' parameters differ: what is evaluated is the
last average (eval name "average"), the same on every rank, so the ranks share each
evaluation. Stopping and divergence are decided together at averaging steps, as in
sync_easgd: a stop takes effect within H steps, and a NaN/inf local loss between
averages ends the run at the next one.

    buffer = [ w_i x_i  or  w_i (x - x_i)  (n) | weighted loss | stop | compute_s[0..P) | busy_s[0..P) ]
"""
from __future__ import annotations

import math
from typing import Any

from ..comm.base import ring_allreduce_bytes
from ..config.registry import switch_step
from ..maths.optim import OptimizerSettings, make_optimizer
from .base import (
    LocalWorker,
    StepOut,
    SyncTail,
    WorkerContext,
    clock_reading,
    load_optimizer_state,
    optimizer_state,
    state_copy,
    tail_length,
)


class LocalSGD(LocalWorker):
    """local_sgd: H local steps, then the weighted average of the parameters."""

    eval_name = "average"

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)                        # x_i, its rule, my slice, the clock (`LocalWorker`)
        n = self.n = ctx.model.n_params
        self.average = self.params.copy()                       # the last average (what is evaluated)
        self.tau = ctx.config.tau
        self.buf = ctx.comm_buffer(n + tail_length(ctx.size), self.params.dtype)   # (the comm's slot: no copy in)
        self.allreduce = ctx.allreduce_fn()
        self.tail = SyncTail(ctx, n)
        self.bytes_per_average = ring_allreduce_bytes(ctx.size, self.buf.nbytes)
        self.compute_since = 0.0
        self.finite = True
        self.averages = 0
        self.summary = {"tau": self.tau} if ctx.rank == 0 else {}

    # ---------------------------------------------------------------- when to average
    def averages_after(self, step: int) -> bool:
        """Average after this (0-based) step? Every tau steps, and after the last one."""
        return (step + 1) % self.tau == 0 or step + 1 == self.ctx.plan.total_steps

    # ---------------------------------------------------------------- the exchange
    def contribution(self, out: Any) -> None:
        """Write what this worker adds to the allreduce into out[:n]: w_i x_i."""
        self.ctx.xp.multiply(self.params, self.weight, out=out)

    def apply(self, total: Any) -> None:
        """The allreduced sum arrived: x_i <- sum_j w_j x_j on every worker."""
        self.params[...] = total
        self.average[...] = total

    def step(self, step: int) -> StepOut:
        n = self.n
        lr, loss, t0, t1 = self.timed_local_step(step)
        self.compute_since += t1 - t0
        self.finite = self.finite and math.isfinite(loss)
        out = StepOut(loss=loss, lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0, bytes_sent=0.0)
        if not self.averages_after(step):
            return out
        buf = self.buf
        self.contribution(buf[:n])
        out.bytes_sent = self.bytes_per_average
        applies = self.tail.exchange(out, buf, loss * self.weight if self.finite else float("nan"), self.compute_since,
                                     self.allreduce)   # the global batch's loss, the same everywhere
        self.compute_since, self.finite = 0.0, True
        if applies:
            self.apply(self.tail.total[:n])
            self.averages += 1
            out.compute_s += self.tail.freed() - self.tail.t_end   # taking up the average is compute too
        else:
            self.tail.freed()
        return out

    def state(self) -> dict[str, Any]:
        """x_i, its rule's state, the last average, and what the next average will count."""
        return {**self.local_state(), **state_copy(self.ctx.xp, average=self.average), "averages": self.averages,
                "compute_since": self.compute_since, "finite": self.finite, "tail.t_free": self.tail.t_free}

    def boundary(self, step: int) -> bool:
        """An average: every worker holds the same parameters after it."""
        return self.averages_after(step)

    @classmethod
    def joiner_state(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in state.items() if not k.endswith("t_free")}

    def load_state(self, state: dict[str, Any]) -> None:
        self.load_local_state(state)
        self.average[...] = self.ctx.xp.asarray(state["average"])
        self.averages, self.compute_since = int(state["averages"]), float(state["compute_since"])
        self.finite = bool(state["finite"])
        self.tail.t_free = clock_reading(self.ctx, state.get("tail.t_free"))

    def eval_params(self) -> Any:
        return self.average

    def finish(self) -> Any:
        if self.ctx.rank == 0:
            self.summary = {**self.summary, "averages": self.averages}
        return super().finish()


class PostLocalSGD(LocalSGD):
    """post_local_sgd: every step (sync_sgd's maths) before `post_local_epoch`, then every tau."""

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        self.switch = switch_step(ctx.config.post_local_epoch, ctx.plan.steps_per_epoch)
        if ctx.rank == 0:
            self.summary = {**self.summary, "switch_step": self.switch}

    def averages_after(self, step: int) -> bool:
        if step < self.switch:
            return True
        return (step + 1 - self.switch) % self.tau == 0 or step + 1 == self.ctx.plan.total_steps


class DiLoCo(LocalSGD):
    """diloco: H inner steps, then an outer Nesterov step on the averaged parameter change."""

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        c = ctx.config
        outer = OptimizerSettings("sgd", momentum=c.outer_momentum, nesterov=True)   # the paper's outer rule
        self.outer = make_optimizer(outer, self.n, ctx.xp, self.params.dtype)
        self.outer_lr = c.outer_lr
        self.delta = ctx.xp.empty_like(self.params)
        if ctx.rank == 0:
            self.summary = {**self.summary, "outer_lr": c.outer_lr, "outer_momentum": c.outer_momentum,
                            "inner_optimizer": c.optimizer}

    def state(self) -> dict[str, Any]:
        """local_sgd's, and the outer Nesterov step's momentum."""
        return {**super().state(), **optimizer_state(self.ctx.xp, self.outer, prefix="outer")}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        load_optimizer_state(self.ctx.xp, self.outer, state, prefix="outer")

    def contribution(self, out: Any) -> None:
        xp = self.ctx.xp
        xp.subtract(self.average, self.params, out=out)      # x - x_i: this worker's outer gradient
        out *= self.weight

    def apply(self, total: Any) -> None:
        self.delta[...] = total                               # Delta = sum_j w_j (x - x_j)
        self.outer.step(self.average, self.delta, self.outer_lr)   # x -= lr_out (Delta + mu v): Nesterov
        self.params[...] = self.average                       # every worker restarts from the new x
