"""The EASGD family: elastic averaging SGD (Zhang, Choromanska, LeCun 2015; You et al. SC'17).

Every worker i keeps its own parameters x_i and runs plain local SGD steps on its slice of
each global batch (local step t uses global batch t, as async_sgd does). Every `tau`
local steps it makes the elastic exchange with the centre variable xc:

    d = alpha (x_i - xc);   x_i -= d;   xc += d          alpha = config.alpha or 0.9 / P

The five members differ only in who holds xc and how the exchange is serialised:

    easgd          a server serves the exchanges strictly in rank order (round-robin): 0, 1, ..., P-1, 0, ...
    async_easgd    a server serves whichever worker arrives first (FCFS), under its lock
    async_measgd   async_easgd with Nesterov momentum on the workers (EAMSGD, below)
    hogwild_easgd  xc in shared memory, updated by every worker without a lock
    sync_easgd     every worker keeps an identical copy of xc; all exchange at once through
                   one allreduce of the differences d_i: xc += sum_i d_i (deterministic)

Order within a step: the local SGD step first, then, if (step + 1) % tau == 0, the
exchange with the post-step x_i. This is the papers' "exchange when t_i mod tau == 0,
then step" shifted by one step: their exchange at t = 0 is a no-op (x_i == xc), and this
way the last local steps of a run end in an exchange when the run length is a multiple
of tau. The centre is what gets evaluated (eval name "centre") and returned.

Local optimiser: `config.optimizer` without momentum (plain SGD by default; adamw, lars
and lamb keep their own state on each worker; `config.momentum` and `nesterov` are
ignored, `weight_decay` applies). The centre's move is the elastic one, not an optimiser
step. The exception is async_measgd (optimizer sgd only), whose worker update is the
EAMSGD one. The paper gives it as `v = delta v - lr g(x + delta v); x = x + v`; written
with x holding the real iterate:

    v *= delta;  x += v          # move to the look-ahead point
    g = grad(x)                  # (+ weight_decay * x)
    x -= lr g;   v -= lr g

delta is `config.momentum` (default 0.9; the EASGD authors' code uses 0.99). The
elastic exchange acts on x only, v is not touched by it.

With one worker (alpha defaults to 0.9) every member computes the same sequence, which
tests check against a plain NumPy loop of the equations above.

Stopping and divergence: the asynchronous members stop on their own, like async_sgd.
sync_easgd decides together, at exchange steps only: rank 0's stop flag and the loss
travel in the allreduced buffer, so a stop takes effect within tau local steps (64 steps
of the digits MLP take well under a second); a NaN/inf local loss between exchanges is
recorded, and the next exchange ends the run as diverged on every worker. Its step
records hold the worker's own loss, except at exchange steps: the loss of the whole
global batch, the same on every worker (as in sync_sgd).

    sync_easgd buffer = [ d_i (n) | weighted loss | stop | compute_s[0..P) | busy_s[0..P) ]   (base.SyncTail)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..comm.base import ring_allreduce_bytes
from ..comm.roles import elastic_difference
from ..maths.backend import to_numpy
from .base import (
    EndsOnServer,
    LocalWorker,
    StepOut,
    SyncTail,
    WorkerContext,
    clock_reading,
    load_server_state,
    server_state,
    state_copy,
    tail_length,
)


# ------------------------------------------------------------------------------ the family's maths
# Written once, over one worker's row (n,) or a stack of rows (K, n) (the simulator's replay
# steps many workers at once): elementwise, so each row's bits are those of its own update.
# The exchange's difference is `comm.roles.elastic_difference`, beside the centre that adds it;
# the local rule is the configured optimiser's (`maths.optim`: plain SGD is `sgd_descent`).
def look_ahead(x: Any, v: Any, delta: float) -> None:
    """EAMSGD's move to the look-ahead point, in place: v *= delta; x += v.

    >>> x, v = np.ones(2, np.float32), np.full(2, 0.5, np.float32)
    >>> look_ahead(x, v, 0.5); x.tolist(), v.tolist()
    ([1.25, 1.25], [0.25, 0.25])
    """
    v *= delta
    x += v


def eamsgd_descent(x: Any, v: Any, g: Any, lr: Any, weight_decay: float = 0.0, decay: Any = None) -> None:
    """EAMSGD's update from the gradient `g` taken at the look-ahead point `x`, in place:
    g (+ wd x) times lr leaves both x and v (g is overwritten). `lr` a number or a (K, 1)
    column of x's dtype; `decay` scratch of x's shape for wd x (else a new array).

    >>> x, v, g = np.ones(2, np.float32), np.zeros(2, np.float32), np.full(2, 2.0, np.float32)
    >>> eamsgd_descent(x, v, g, 0.25); x.tolist(), v.tolist()
    ([0.5, 0.5], [-0.5, -0.5])
    """
    if weight_decay:
        g += weight_decay * x if decay is None else np.multiply(x, weight_decay, out=decay)
    g *= lr
    x -= g
    v -= g


class ElasticWorker(LocalWorker):
    """Local SGD plus an elastic exchange every tau steps; subclasses say how they exchange.

    A worker's state: x_i (`params`), its local rule (`opt`, with the rule's own state) and,
    for async_measgd, the velocity (`velocity`); `alpha` and `tau` from the config."""

    eval_name = "centre"
    over_network = True     # the exchange is a message (hogwild_easgd: a write to shared memory)
    turns = False           # the server takes the exchanges in strict rank order (easgd)

    def __init__(self, ctx: WorkerContext):
        # x_i starts at the centre; local steps ignore momentum (the elastic force plays its
        # part): sgd is plain (`LocalWorker`: x_i, its rule, my slice, the clock)
        super().__init__(ctx, momentum=0.0, nesterov=False)
        c = ctx.config
        self.alpha = c.resolved_alpha(ctx.size)
        self.tau = c.tau
        self.summary = {"alpha": self.alpha, "tau": self.tau} if ctx.rank == 0 else {}

    def exchange(self) -> None:
        """The elastic step with the centre: x_i -= d, xc += d."""
        raise NotImplementedError

    def step(self, step: int) -> StepOut:
        lr, loss, t0, t1 = self.timed_local_step(step)
        comm_s, sent = 0.0, 0.0
        if (step + 1) % self.tau == 0:
            self.exchange()
            comm_s = self.clock() - t1
            sent = self.params.nbytes if self.over_network else 0.0   # x_i to the centre's server
        return StepOut(loss=loss, lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0, comm_s=comm_s,
                       bytes_sent=sent)

    def eval_params(self) -> Any:
        return self.ctx.xp.asarray(self.ctx.server.centre())


class CentreOnServer(EndsOnServer, ElasticWorker):
    """The members whose centre lives on a server (`ParameterServer`): each exchange is a
    request, the server computes d and adds it to xc, the worker subtracts it."""

    def exchange(self) -> None:
        server = self.ctx.server
        x = to_numpy(self.params)
        d = server.elastic(x, self.alpha, self.ctx.rank) if self.turns else server.elastic(x, self.alpha)
        self.params -= self.ctx.xp.asarray(d)

    def state(self) -> dict[str, Any]:
        """x_i and its rule's state; rank 0 also the centre's server (its version, turn)."""
        return {**self.local_state(), **server_state(self.ctx)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.load_local_state(state)
        load_server_state(self.ctx, state)

    def eval_params(self) -> Any:
        return self.server_params(self.ctx.server.centre)


class EASGD(CentreOnServer):
    """easgd, the original: the server takes exchanges in strict rank order (round-robin).

    A finished (or failed) worker retires, so the others never wait for its turn
    (`EndsOnServer`, which also makes the returned centre the one after every worker's
    last exchange)."""

    turns = True


class AsyncEASGD(CentreOnServer):
    """async_easgd: the server applies each worker's exchange as it arrives (FCFS)."""


class AsyncMEASGD(AsyncEASGD):
    """async_measgd (EAMSGD): async_easgd with Nesterov momentum delta on the workers."""

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        self.delta = ctx.config.momentum
        self.velocity = ctx.xp.zeros_like(self.params)
        self.summary = {**self.summary, "delta": self.delta} if ctx.rank == 0 else {}

    def state(self) -> dict[str, Any]:
        return {**super().state(), **state_copy(self.ctx.xp, velocity=self.velocity)}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.velocity[...] = self.ctx.xp.asarray(state["velocity"])

    def local_step(self, step: int, lr: float) -> float:
        x, v, g = self.params, self.velocity, self.grad
        look_ahead(x, v, self.delta)
        X, y = self.ctx.batch(step, self.lo, self.hi)
        loss, _ = self.ctx.model.loss_and_grad(x, X, y, grad_out=g)
        eamsgd_descent(x, v, g, lr, self.opt.weight_decay)
        return loss


class HogwildEASGD(ElasticWorker):
    """hogwild_easgd: the centre is a shared-memory array every worker updates without a lock."""

    over_network = False

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        self.centre = ctx.shared["centre"].array      # (n,) float32 on the host, shared

    def exchange(self) -> None:
        x = to_numpy(self.params)
        d = elastic_difference(x, self.centre, self.alpha)   # reads xc as it is now (others may be writing)
        np.add(self.centre, d, out=self.centre)       # unlocked read-modify-write, racing the others
        self.params -= self.ctx.xp.asarray(d)

    def state(self) -> dict[str, Any]:
        """x_i and its rule's state; rank 0 also the shared centre (as it is then)."""
        out = self.local_state()
        if self.ctx.rank == 0:
            out["shared.centre"] = self.centre.copy()
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        self.load_local_state(state)
        if self.ctx.rank == 0:            # before the start barrier: nobody reads it yet
            self.centre[...] = state["shared.centre"]

    def eval_params(self) -> Any:
        return self.ctx.xp.asarray(self.centre.copy())


class SyncEASGD(ElasticWorker):
    """sync_easgd: every tau steps all workers allreduce their d_i; identical centre copies.

    `config.elastic_sync` picks SC'17's chain (You et al., Table 3), one step at a time;
    the numbers computed are the same in all four, bit for bit (the same sums in rank
    order), only where the centre lives and when the vector travels differ:

        ring                 one allreduce of [d_i | tail]; the centre on the device (the default)
        tree_host            the same buffer through a binary-tree reduction; the centre
                             lives on the host (NumPy), so every exchange copies d_i to the
                             host, the host adds the sum to the centre and it comes back
        tree_device          the tree; the centre kept on the devices (no host copies)
        tree_device_overlap  the tree; the tail (loss, stop, times) is allreduced at once
                             and decides the step as always, the vector's sum is started and
                             waited for only before the next exchange, so it travels
                             while the next local steps compute (at an evaluation step and
                             the last step it is waited for at once: the centre is read
                             then, and the wait is that step's comm_s). That keeps
                             the maths: x_i -= d_i needs only my own d_i, and the centre is
                             next read at the next exchange.

    What the simulator charges for each on a cluster network is `SimChainComm.elastic_sum` /
    `elastic_start` (`sim.costs.SimCosts.elastic_s`); comms without them (threads, shared
    memory, Dask, NCCL, and the simulator's own on this host's shared memory, `SimComm`)
    run their own allreduce, blocking, so there the four differ in nothing but the centre's
    home."""

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        n, xp = ctx.model.n_params, ctx.xp
        self.n = n
        self.path = ctx.config.elastic_sync
        self.on_host = self.path == "tree_host"
        self.tree = self.path != "ring"
        # a comm without a non-blocking elastic sum (threads, shared memory, Dask, NCCL) runs
        # the one blocking allreduce of [d_i | tail], so every second of it is booked as comm
        self.overlap = self.path == "tree_device_overlap" and hasattr(ctx.comm, "elastic_start")
        # xc: the same on every worker, always (on the host for tree_host)
        self.centre = to_numpy(self.params).copy() if self.on_host else self.params.copy()
        self.buf = xp.zeros(n + tail_length(ctx.size), dtype=self.params.dtype)
        self.tail = SyncTail(ctx, n)
        self.bytes_sent = ring_allreduce_bytes(ctx.size, self.buf.nbytes)   # per exchange
        self.compute_since = 0.0                      # local compute since the last exchange
        self.finite = True                            # every local loss since then was finite
        self.pending: Any = None                      # the overlapped vector sum in flight
        if ctx.rank == 0:
            self.summary = {**self.summary, "elastic_sync": self.path}

    def _sum(self, buf: Any) -> Any:
        """The blocking exchange: the comm's charged elastic sum where it has one."""
        fn = getattr(self.ctx.comm, "elastic_sum", None)
        if fn is not None and self.tree:
            return fn(buf, host=self.on_host)
        return self.ctx.allreduce(buf)

    def _tail_sum(self, buf: Any) -> _Shifted:
        """The overlapped exchange's first part: the tail alone, summed now (it decides the
        step), read as if it sat after the vector."""
        return _Shifted(self._sum(buf[self.n:]), self.n)

    def _land(self) -> float:
        """Wait for the overlapped vector sum, if one is in flight, and add it to the
        centre; returns the seconds spent waiting (what the overlap did not hide)."""
        if self.pending is None:
            return 0.0
        t = self.ctx.timer()
        got = self.pending.wait()
        self.pending = None
        self.centre += got
        return self.ctx.timer() - t

    def step(self, step: int) -> StepOut:
        ctx, n = self.ctx, self.n
        lr, loss, t0, t1 = self.timed_local_step(step)
        self.compute_since += t1 - t0
        self.finite = self.finite and math.isfinite(loss)
        out = StepOut(loss=loss, lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0, bytes_sent=0.0)
        if (step + 1) % self.tau:
            return out
        out.bytes_sent = self.bytes_sent
        exposed = self._land()                         # the previous exchange's sum (overlap only)
        buf = self.buf
        centre = ctx.xp.asarray(self.centre) if self.on_host else self.centre   # host -> device copy
        elastic_difference(self.params, centre, self.alpha, out=buf[:n], xp=ctx.xp)   # d_i = alpha (x_i - xc)
        # overlapped, the tail alone is summed now (it decides this step); else sum_i d_i and the tail
        applies = self.tail.exchange(out, buf, loss * self.weight if self.finite else float("nan"), self.compute_since,
                                     self._tail_sum if self.overlap else self._sum)   # the global batch's loss
        total = self.tail.total
        self.tail.freed()
        out.comm_s += exposed
        self.compute_since, self.finite = 0.0, True
        if applies:
            self.params -= buf[:n]                      # x_i -= d_i
            if self.overlap:                            # xc += sum_i d_i, landed before the next exchange
                self.pending = ctx.comm.elastic_start(buf[:n].copy())
                if ctx.plan.is_eval_step(step) or step + 1 >= ctx.plan.total_steps:
                    out.comm_s += self._land()          # the centre is read now: book the wait in this step
            elif self.on_host:
                self.centre += to_numpy(total[:n])      # the host updates the centre
            else:
                self.centre += total[:n]                # xc += sum_i d_i, with the same pre-update xc
        return out

    def state(self) -> dict[str, Any]:
        """x_i, its rule's state, the centre (the same on every worker; an overlapped sum
        in flight lands first), and what the next exchange will count."""
        self._land()
        return {**self.local_state(), **state_copy(self.ctx.xp, centre=self.centre),
                "compute_since": self.compute_since, "finite": self.finite, "tail.t_free": self.tail.t_free}

    def load_state(self, state: dict[str, Any]) -> None:
        self.load_local_state(state)
        self.centre[...] = state["centre"] if self.on_host else self.ctx.xp.asarray(state["centre"])
        self.compute_since, self.finite = float(state["compute_since"]), bool(state["finite"])
        self.tail.t_free = clock_reading(self.ctx, state.get("tail.t_free"))

    def eval_params(self) -> Any:
        self._land()
        return self.ctx.xp.asarray(self.centre) if self.on_host else self.centre


class _Shifted:
    """The reduced tail alone, indexed as if it sat after an n-vector (what SyncTail reads)."""

    __slots__ = ("tail", "n")

    def __init__(self, tail: Any, n: int):
        self.tail, self.n = tail, n

    def __getitem__(self, key: slice) -> Any:
        return self.tail[key.start - self.n:key.stop - self.n]
