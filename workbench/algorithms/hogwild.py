"""`hogwild_sgd`: lock-free SGD on one shared parameter buffer (Recht et al. 2011).

All workers on one host map the same shared-memory array. Each computes the gradient of
its slice of the current global batch at whatever the buffer holds right now (other
workers may be halfway through writing it: that is the point) and subtracts `lr * g`
in place, without a lock. There is no staleness counter: reads and writes interleave
at the level of individual elements.

With one worker this is exactly plain SGD.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Algorithm, StepOut, WorkerContext


def hogwild_write(shared: np.ndarray, grad: np.ndarray, lr: float) -> None:
    """The lock-free update: `shared -= lr g`, a read-modify-write per element that races
    the other workers' (`grad` is scaled in place). One worker's write; the simulator's
    replay makes them one after the other, in the order the workers would.

    >>> x, g = np.ones(2, np.float32), np.full(2, 2.0, np.float32)
    >>> hogwild_write(x, g, 0.25); x.tolist()
    [0.5, 0.5]
    """
    grad *= lr
    np.subtract(shared, grad, out=shared)


class HogwildSGD(Algorithm):
    """hogwild_sgd's worker. The result (and the last evaluation) is the shared buffer as it
    is when rank 0 ends its steps: other workers' last writes may land after it. The
    server algorithms wait for every worker (`base.EndsOnServer`); a lock-free buffer has
    no server to count who has ended, so this one does not yet."""

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        self.shared = ctx.shared["params"].array           # (n,) float32, shared by the host
        self.grad = ctx.xp.empty(self.shared.shape, dtype=self.shared.dtype)  # reused every step
        self.lo, self.hi = ctx.my_slice()
        self.clock = ctx.clock

    def step(self, step: int) -> StepOut:
        ctx = self.ctx
        lr = ctx.plan.schedule(step)
        t0 = self.clock()
        X, y = ctx.batch(step, self.lo, self.hi)
        params = self.shared if ctx.xp is np else ctx.xp.asarray(self.shared)
        loss, _ = ctx.model.loss_and_grad(params, X, y, grad_out=self.grad)
        t1 = self.clock()
        hogwild_write(self.shared, self.grad if ctx.xp is np else self.grad.get(), lr)
        t2 = self.ctx.timer()
        return StepOut(loss=loss, lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0, comm_s=t2 - t1,
                       bytes_sent=0.0)   # shared memory on one host: nothing crosses a network

    def state(self) -> dict[str, Any]:
        """Rank 0: the shared buffer as it is when it reaches the step (the others write on)."""
        return {"shared.params": self.shared.copy()} if self.ctx.rank == 0 else {}

    def load_state(self, state: dict[str, Any]) -> None:
        if self.ctx.rank == 0:            # before the start barrier: nobody writes it yet
            self.shared[...] = state["shared.params"]

    def eval_params(self) -> Any:
        return self.ctx.xp.asarray(self.shared.copy())

    eval_name = "shared"
