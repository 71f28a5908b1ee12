"""`async_sgd` and `async_msgd`: a parameter server (Downpour SGD, push and fetch every step).

A worker holds a copy of the parameters, computes the gradient of its slice of the
current global batch at that copy, pushes it, and receives the server's parameters
after the update. The server applies updates in arrival order (first come, first
served): `x -= lr * g` for async_sgd; for async_msgd the momentum lives on the server
(`v = mu v + g; x -= lr v`, PyTorch's form of `v = mu v - lr g; x += v`; equal for a
constant lr). Staleness, the number of other workers' updates that landed between a
worker's fetch and its push, is recorded for every step.

With one worker both reduce exactly to the reference trainer (plain or momentum SGD).
The run's result is the server's parameters after every worker's last push
(`base.EndsOnServer`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..maths.backend import to_numpy
from ..maths.optim import OptimizerSettings, clip_gradient
from .base import Algorithm, EndsOnServer, StepOut, WorkerContext, load_server_state, server_state, state_copy


class AsyncSGD(EndsOnServer, Algorithm):
    clip_counted = "rank 0's pushes (each worker clips the gradient it pushes)"

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        self.version, params = ctx.server.pull()
        self.params = ctx.xp.asarray(params)
        self.grad = ctx.xp.empty_like(self.params)
        self.lo, self.hi = ctx.my_slice()
        self.clock = ctx.clock
        # grad_clip: the worker clips what it pushes (the same maths as the server clipping each push,
        # and the server's rule stays the plain one its front-end may take a short cut for)
        self.max_norm = ctx.config.grad_clip
        self.clip_state = np.zeros(2, np.int64) if self.max_norm else None      # [pushes, clipped]
        self.clip_norm = np.zeros(2) if self.max_norm else None                 # [sum of the norms, largest]
        self._clipped = ctx.xp.empty_like(self.params) if self.max_norm else None

    def step(self, step: int) -> StepOut:
        ctx = self.ctx
        lr = ctx.plan.schedule(step)
        t0 = self.clock()
        X, y = ctx.batch(step, self.lo, self.hi)
        loss, _ = ctx.model.loss_and_grad(self.params, X, y, grad_out=self.grad)
        grad = self.grad if not self.max_norm else \
            clip_gradient(ctx.xp, self.grad, self.max_norm, self.clip_state, self.clip_norm, self._clipped)
        t1 = self.clock()
        self.version, params, staleness = ctx.server.push(to_numpy(grad), lr, self.version)
        self.params = ctx.xp.asarray(params)
        t2 = self.ctx.timer()
        return StepOut(loss=loss, lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0,
                       comm_s=t2 - t1, staleness=staleness, bytes_sent=self.grad.nbytes)   # the push

    def state(self) -> dict[str, Any]:
        """My copy of the parameters and the version it was pulled at; rank 0 also the server's."""
        return {**state_copy(self.ctx.xp, params=self.params), "version": int(self.version),
                **({"clip": self.clip_state.copy(), "clip_norm": self.clip_norm.copy()} if self.max_norm else {}),
                **server_state(self.ctx)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.params = self.ctx.xp.asarray(state["params"]).copy()
        self.version = int(state["version"])
        if self.max_norm:
            self.clip_state[...] = np.asarray(state["clip"])
            self.clip_norm[...] = np.asarray(state["clip_norm"])
        load_server_state(self.ctx, state)

    def eval_params(self) -> Any:
        return self.server_params(lambda: self.ctx.server.pull()[1])

    def clip_counts(self) -> tuple[Any, Any]:
        return self.clip_state, self.clip_norm

    eval_name = "server"


class AsyncMSGD(AsyncSGD):
    """Same worker; the server was built with momentum (`momentum_options`)."""


def plain_options(config: Any) -> dict[str, Any]:
    """The parameter server's update for async_sgd: the config's rule without momentum
    (plain SGD, or adamw / lars / lamb; weight decay applies)."""
    return {"optimizer": OptimizerSettings.of(config, momentum=0.0, nesterov=False, grad_clip=0.0)}


def momentum_options(config: Any) -> dict[str, Any]:
    """async_msgd: the server keeps the momentum (and Nesterov, weight decay; or the
    moments of adamw / lamb, lars's velocity)."""
    return {"optimizer": OptimizerSettings.of(config, grad_clip=0.0)}   # the workers clip what they push
