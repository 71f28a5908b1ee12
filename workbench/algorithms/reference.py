"""`sgd`: plain minibatch SGD on one worker, the reference every parallel algorithm is checked against.

Plain minibatch SGD (optionally momentum / Nesterov / weight decay, or the configured
`optimizer`: the shared rule, `maths.optim.make_optimizer`) over the same global minibatch
sequence, schedule and metrics as every parallel algorithm, on the same loop (`base.run_loop`) and records. Its declaration says it
runs on exactly one worker, in this process (the thread transport): no cluster starts for
it, whatever `cpus`, `gpus` or `cluster` say. `tests/test_reference.py` checks it against a
deliberately naive loop written apart from the package.
"""
from __future__ import annotations

from typing import Any

from ..maths.optim import make_optimizer
from .base import Algorithm, StepOut, WorkerContext, load_optimizer_state, optimizer_state, settle, state_copy


class PlainSGD(Algorithm):
    """One worker, the whole global batch: gradient, then the shared update rule."""

    clip_counted = "every update"

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        c, xp = ctx.config, ctx.xp
        self.params = ctx.initial_params()
        self.opt = make_optimizer(c, ctx.model.layout(), xp, self.params.dtype)   # the config's rule
        self.grad = xp.empty_like(self.params)
        self.clock = ctx.clock

    def step(self, step: int) -> StepOut:
        ctx = self.ctx
        t0 = self.clock()
        lr = ctx.plan.schedule(step)
        X, y = ctx.batch(step, 0, ctx.plan.batch_size)
        loss, _ = ctx.model.loss_and_grad(self.params, X, y, grad_out=self.grad)
        out = StepOut(lr=lr, samples=int(y.shape[0]), bytes_sent=0.0)
        if settle(out, loss, ctx.stop_requested()):     # a sync algorithm of one: it asks for stops itself
            self.opt.step(self.params, self.grad, lr)   # x -= lr g (momentum, ...)
        out.compute_s = self.clock() - t0
        return out

    def state(self) -> dict[str, Any]:
        return {**state_copy(self.ctx.xp, params=self.params), **optimizer_state(self.ctx.xp, self.opt)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.params[...] = self.ctx.xp.asarray(state["params"])
        load_optimizer_state(self.ctx.xp, self.opt, state)

    def eval_params(self) -> Any:
        return self.params
