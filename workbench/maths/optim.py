"""The SGD update every algorithm shares, and the plan of a run (steps, schedule, evals).

One update rule for the reference trainer, sync workers, parameter servers and local
steps of elastic averaging, so "reduces to plain SGD" can be tested exactly.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import RunConfig
from . import schedules


class SGD:
    """Minibatch SGD with optional heavy-ball or Nesterov momentum and L2 weight decay.

    PyTorch's convention: `g += wd * x; v = mu * v + g; x -= lr * (g + mu * v if nesterov else v)`.
    With mu = 0 this is `x -= lr * g`. Updates `params` in place (that is its purpose) and
    never touches `grad`.
    """

    def __init__(self, n_params: int, xp: Any, dtype: Any, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0):
        self.momentum, self.nesterov, self.weight_decay = momentum, nesterov, weight_decay
        self.xp = xp
        self.velocity = xp.zeros(n_params, dtype=dtype) if momentum > 0 else None
        # Scratch buffers: on the hot path every update is in place, no temporaries
        # (a 535k-parameter update otherwise allocates 2 MB per arithmetic step).
        self._g = xp.empty(n_params, dtype=dtype)
        self._h = xp.empty(n_params, dtype=dtype) if (weight_decay or nesterov) else None

    def step(self, params: Any, grad: Any, lr: float, lo: int = 0, hi: int | None = None) -> None:
        """Apply one update to `params[lo:hi]` from `grad[lo:hi]` (a chunk, or everything)."""
        hi = params.shape[0] if hi is None else hi
        self.step_chunk(params, grad[lo:hi], lr, lo, hi)

    def step_chunk(self, params: Any, grad_chunk: Any, lr: float, lo: int, hi: int) -> None:
        """Update `params[lo:hi]` from the gradient of just that chunk (CGDP's per-chunk update).

        Each element's update depends only on its own gradient and velocity, so updating
        chunk by chunk is exactly the whole update."""
        mul = self.xp.multiply
        x, g = params[lo:hi], self._g[lo:hi]
        h = self._h[lo:hi] if self._h is not None else None
        if self.weight_decay:
            mul(x, self.weight_decay, out=h)
            self.xp.add(grad_chunk, h, out=g)          # g = grad + wd * x
            grad_chunk = g
        if self.velocity is None:
            mul(grad_chunk, lr, out=g)                 # x -= lr * g
            x -= g
            return
        v = self.velocity[lo:hi]
        v *= self.momentum
        v += grad_chunk                                # v = mu * v + g
        if self.nesterov:
            mul(v, self.momentum, out=h)
            self.xp.add(grad_chunk, h, out=g)          # g + mu * v
            g *= lr
        else:
            mul(v, lr, out=g)
        x -= g


@dataclass(frozen=True)
class Plan:
    """How long a run lasts and how its lr moves, derived once from the config."""

    n_train: int
    batch_size: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    eval_every: int
    schedule: Callable[[int], float]
    schedule_text: str

    def epoch(self, step: int) -> float:
        """Epochs completed after `step` steps."""
        return step / self.steps_per_epoch

    def is_eval_step(self, step: int) -> bool:
        """Evaluate after this (0-based) step? Always after the last one."""
        return (step + 1) % self.eval_every == 0 or step + 1 == self.total_steps


def make_plan(config: RunConfig, n_train: int, batch_size: int | None = None,
              lr: float | None = None) -> Plan:
    """Steps, warmup and the lr schedule for `config` on a training set of `n_train`.

    `batch_size`/`lr` override the config's (LTFB trainers each see their own batch
    and base lr); the schedule is always in global steps of `batch_size` samples.
    """
    from ..data import steps_per_epoch

    b = batch_size or config.batch_size
    spe = steps_per_epoch(n_train, b)
    total = config.steps if config.steps is not None else max(1, math.ceil(config.epochs * spe))
    warmup_steps = 0 if config.warmup == "none" else min(total, max(1, round(config.warmup_epochs * spe)))
    kwargs = dict(lr=lr or config.lr, batch_size=b, base_batch=config.base_batch,
                  lr_scaling=config.lr_scaling, warmup=config.warmup, warmup_steps=warmup_steps,
                  decay=config.decay, total_steps=total)
    schedule = schedules.make_schedule(**kwargs)
    eval_every = config.eval_every or spe
    return Plan(n_train=n_train, batch_size=b, steps_per_epoch=spe, total_steps=total,
                warmup_steps=warmup_steps, eval_every=min(eval_every, total), schedule=schedule,
                schedule_text=schedules.describe(**kwargs))
