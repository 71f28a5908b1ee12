"""Decentralised gossip: D-PSGD (Lian et al., NeurIPS 2017) over a graph with a mixing matrix.

No allreduce and no server: worker i talks only to its neighbours N(i) in a fixed
undirected graph (`topology`: ring, torus, exponential or complete), through the
communication interface's peer-to-peer exchange (`comm.base.neighbour_exchange`). Each
step, on its slice of global batch t:

    y_i = x_i - lr * (the configured rule's step on g_i(x_i))      local step (`optimizer`, momentum, ...)
    x_i = sum_j W_ij y_j       j in {i} + N(i), every tau steps    gossip (one message to each neighbour)

W is symmetric and doubly stochastic: Metropolis-Hastings weights W_ij = 1 / (1 +
max(d_i, d_j)) on the edges and the rest on the diagonal, which on the regular graphs
here (ring, torus, exponential graph of a power of 2, complete) is 1 / (d + 1) for each
of a worker and its neighbours. This is the "adapt then combine" order (the local step
before the averaging); Lian et al.'s Algorithm 1 averages first and applies the gradient
taken before the averaging ("combine then adapt"). Both converge at the same rate; we
take ATC so that on the complete graph (W = 1/P everywhere) D-PSGD is exactly
synchronous parameter averaging, local_sgd's maths (tests check it).

Graphs (P workers, ranks 0..P-1):

    ring         i +- 1 (mod P)                            degree 2
    torus        a rows x b columns (a the largest divisor of P at most sqrt P), up/down/left/right
    exponential  i +- 2^k (mod P) for 2^k < P               degree ~ 2 log2 P (Assran et al.'s
                 graph made undirected)
    complete     everyone                                   degree P - 1

Agreement: workers stop and decide divergence together, as synchronous runs do, every
CHECK_EVERY steps, at evaluation steps and at the last step, by one small allreduce that
also carries x_i / P and ||x_i||^2 / P: the average x_bar (what is evaluated and
returned) and the consensus distance (1/P) sum_i ||x_i - x_bar||^2, recorded in the
summary at every check (`consensus_distance`: [step, value] pairs). A real decentralised
system has no such allreduce; it is counted in the bytes, and amortised over CHECK_EVERY
steps it adds ~1/32 of an allreduce per step.

adpsgd, AD-PSGD (Lian, Zhang, Zhang, Liu, ICML 2018, Algorithm 1): asynchronous. Every
worker, on its slice of global batch t, at the model it last had (x_hat_i, possibly stale:
a neighbour may have averaged into its row since):

    g = g_i(x_hat_i);  u = lr * (the configured rule's step on g)       local step, its own optimiser state
    x_i, x_j <- (x_i + x_j) / 2;  x_i -= u     j a uniformly random neighbour, atomically
    x_hat_i <- x_i

Nobody waits for anybody: the neighbour may be computing when its model is averaged
into (its next update lands on the averaged row). The models live in the `pairwise`
server role (`comm.roles.ModelTable`, one row per worker) and the atomic average is one
call on it; the paper applies the gradient just after the average, a separate step of the
same worker, which here is the same atomic call (no other worker can average with x_i in
between). The table serialises the averages (one lock, one queue on the virtual clock),
the simplest atomicity; the paper's implementation locks per pair, so that disjoint pairs
average at once. What is evaluated (and returned) is the workers' mean, read by rank 0,
with the consensus distance beside it in the summary. Each average moves the worker's
update in and its new model out (2 n floats: `bytes_sent`, the exchange with the peer in
both directions). With one worker adpsgd is plain SGD with the configured rule.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..comm.base import neighbour_exchange, ring_allreduce_bytes
from ..maths.backend import to_numpy
from .base import (
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

PAIRING_SEED = 0xAD   # the neighbour choices' stream, beside the seed and the rank

TOPOLOGIES = ("ring", "torus", "exponential", "complete")
CHECK_EVERY = 32      # steps between the agreement allreduces (stop, divergence, consensus)


def torus_shape(size: int) -> tuple[int, int]:
    """(rows, columns) of the torus on P workers: rows the largest divisor <= sqrt P.

    >>> torus_shape(16), torus_shape(12), torus_shape(7)
    ((4, 4), (3, 4), (1, 7))
    """
    a = int(math.isqrt(size))
    while size % a:
        a -= 1
    return a, size // a


def neighbours(topology: str, size: int, rank: int) -> list[int]:
    """The ranks rank `rank` exchanges with, sorted, never itself.

    >>> neighbours("ring", 8, 0), neighbours("torus", 16, 5), neighbours("exponential", 8, 0)
    ([1, 7], [1, 4, 6, 9], [1, 2, 4, 6, 7])
    >>> neighbours("ring", 2, 0), neighbours("complete", 4, 2), neighbours("ring", 1, 0)
    ([1], [0, 1, 3], [])
    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology: one of {list(TOPOLOGIES)}, got {topology!r}")
    p, i = size, rank
    if topology == "complete":
        out = set(range(p))
    elif topology == "ring":
        out = {(i - 1) % p, (i + 1) % p}
    elif topology == "torus":
        a, b = torus_shape(p)
        r, c = divmod(i, b)
        out = {((r - 1) % a) * b + c, ((r + 1) % a) * b + c, r * b + (c - 1) % b, r * b + (c + 1) % b}
    else:
        out, k = set(), 1
        while k < p:
            out |= {(i + k) % p, (i - k) % p}
            k *= 2
    out.discard(i)
    return sorted(out)


def mixing_row(topology: str, size: int, rank: int) -> dict[int, float]:
    """Row `rank` of the Metropolis-Hastings mixing matrix: {rank: W_ii, j: W_ij for j in N(i)}.

    >>> mixing_row("ring", 8, 0)
    {1: 0.3333333333333333, 7: 0.3333333333333333, 0: 0.33333333333333337}
    >>> sum(mixing_row("exponential", 6, 1).values())
    1.0
    """
    mine = neighbours(topology, size, rank)
    row = {j: 1.0 / (1 + max(len(mine), len(neighbours(topology, size, j)))) for j in mine}
    row[rank] = 1.0 - sum(row.values())
    return row


def mixing_matrix(topology: str, size: int) -> np.ndarray:
    """The whole P x P mixing matrix (symmetric, doubly stochastic), for tests and lessons."""
    W = np.zeros((size, size))
    for i in range(size):
        for j, w in mixing_row(topology, size, i).items():
            W[i, j] = w
    return W


class DPSGD(LocalWorker):
    """dpsgd: a local SGD step, then averaging with the neighbours every tau steps."""

    eval_name = "average"

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)                        # x_i, the configured rule, my slice, the clock
        c, xp, n = ctx.config, ctx.xp, ctx.model.n_params
        self.n = n
        self.average = self.params.copy()
        self.tau = c.tau
        self.row = mixing_row(c.topology, ctx.size, ctx.rank)
        self.peers = [j for j in sorted(self.row) if j != ctx.rank]
        self.buf = xp.zeros(n + 1 + tail_length(ctx.size), dtype=self.params.dtype)
        self.tail = SyncTail(ctx, n + 1)
        self.gossip_bytes = len(self.peers) * self.params.nbytes       # one message to each neighbour
        self.check_bytes = ring_allreduce_bytes(ctx.size, self.buf.nbytes)
        self.compute_since, self.finite = 0.0, True
        self.consensus: list[list[float]] = []
        self.summary = {"topology": c.topology, "degree": len(self.peers), "tau": self.tau} if ctx.rank == 0 else {}

    def checks_after(self, step: int) -> bool:
        plan = self.ctx.plan
        return (step + 1) % CHECK_EVERY == 0 or plan.is_eval_step(step) or step + 1 == plan.total_steps

    def gossip(self) -> None:
        """x_i = sum_j W_ij x_j over myself and my neighbours (their post-step parameters)."""
        comm = self.ctx.comm       # NCCL exchanges device arrays; the others host ones (staged, as allreduce)
        vec = self.params if getattr(comm, "device", False) else to_numpy(self.params)
        got = neighbour_exchange(comm, vec, self.peers)
        xp = self.ctx.xp
        mixed = self.row[self.ctx.rank] * self.params
        for j in self.peers:                                 # in rank order: deterministic
            mixed += self.row[j] * xp.asarray(got[j])
        self.params[...] = mixed

    def step(self, step: int) -> StepOut:
        ctx, n = self.ctx, self.n
        lr, loss, t0, t1 = self.timed_local_step(step)
        self.compute_since += t1 - t0
        self.finite = self.finite and math.isfinite(loss)
        out = StepOut(loss=loss, lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0, bytes_sent=0.0)
        if (step + 1) % self.tau == 0 and ctx.size > 1:
            self.gossip()
            out.bytes_sent += self.gossip_bytes
            out.comm_s = self.clock() - t1
        if not self.checks_after(step):
            return out
        buf, xp = self.buf, ctx.xp
        p = ctx.size
        xp.multiply(self.params, 1.0 / p, out=buf[:n])
        buf[n] = float(xp.dot(self.params, self.params)) / p
        exchanged = out.comm_s                                   # the peers' exchange, before this one
        applies = self.tail.exchange(out, buf, loss * self.weight if self.finite else float("nan"), self.compute_since,
                                     ctx.allreduce)
        total = self.tail.total
        out.comm_s += exchanged
        out.bytes_sent += self.check_bytes
        self.compute_since, self.finite = 0.0, True
        if applies:
            self.average[...] = total[:n]
            if ctx.rank == 0:
                mean_sq = float(total[n])
                xbar_sq = float(xp.dot(self.average, self.average))
                self.consensus.append([step, max(0.0, mean_sq - xbar_sq)])
        self.tail.freed()
        return out

    def state(self) -> dict[str, Any]:
        """x_i, its rule's state, the last average, what the next check counts, the consensus so far."""
        return {**self.local_state(), **state_copy(self.ctx.xp, average=self.average),
                "compute_since": self.compute_since, "finite": self.finite, "tail.t_free": self.tail.t_free,
                "consensus": [list(c) for c in self.consensus]}

    def load_state(self, state: dict[str, Any]) -> None:
        self.load_local_state(state)
        self.average[...] = self.ctx.xp.asarray(state["average"])
        self.compute_since, self.finite = float(state["compute_since"]), bool(state["finite"])
        self.tail.t_free = clock_reading(self.ctx, state.get("tail.t_free"))
        self.consensus = [list(c) for c in state["consensus"]]

    def eval_params(self) -> Any:
        return self.average

    def finish(self) -> Any:
        if self.ctx.rank == 0:
            self.summary = {**self.summary, "consensus_distance": self.consensus}
        return super().finish()


def pairing_rng(seed: int, rank: int) -> np.random.Generator:
    """Rank `rank`'s stream of random neighbours (a reference loop replays it)."""
    return np.random.default_rng([int(seed), int(rank), PAIRING_SEED])


class ADPSGD(LocalWorker):
    """adpsgd: a local step at the model I last had, then an atomic average with one random neighbour.

    The result (and the last evaluation) is the rows' mean when rank 0 ends its steps:
    other workers' last averages may come after it (`base.EndsOnServer` is how the server
    algorithms wait for every worker; the model table does not count who has ended yet)."""

    eval_name = "average"

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)           # x_hat_i (every row starts there), my own rule's state, my slice
        c = ctx.config
        self.work = ctx.xp.empty_like(self.params)
        self.peers = neighbours(c.topology, ctx.size, ctx.rank)
        self.rng = pairing_rng(c.seed, ctx.rank)
        self.exchange_bytes = 2 * self.params.nbytes        # my update in, my averaged row back
        self.consensus: list[list[float]] = []
        self.last_step = -1
        self.summary = {"topology": c.topology, "degree": len(self.peers)} if ctx.rank == 0 else {}

    def local_step(self, step: int, lr: float) -> float:
        """The rule's step taken on a copy of x_hat: `work` = x_hat after it (x_hat is kept)."""
        X, y = self.ctx.batch(step, self.lo, self.hi)
        loss, _ = self.ctx.model.loss_and_grad(self.params, X, y, grad_out=self.grad)
        self.work[...] = self.params
        self.opt.step(self.work, self.grad, lr)
        return loss

    def step(self, step: int) -> StepOut:
        ctx, xp = self.ctx, self.ctx.xp
        lr, loss, t0, _ = self.timed_local_step(step)
        update = to_numpy(self.params - self.work)          # u = x_hat - (x_hat after the local step)
        peer = self.peers[int(self.rng.integers(len(self.peers)))] if self.peers else ctx.rank
        t1 = self.clock()
        self.params = xp.asarray(ctx.server.average(ctx.rank, peer, update, step))
        self.last_step = step
        return StepOut(loss=loss, lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0,
                       comm_s=self.ctx.timer() - t1, bytes_sent=self.exchange_bytes if self.peers else 0.0)

    def state(self) -> dict[str, Any]:
        """x_hat_i, its rule's state, its stream of neighbours; rank 0 also every row of the table."""
        return {**self.local_state(), "pairing_rng": self.rng.bit_generator.state, "last_step": self.last_step,
                "consensus": [list(c) for c in self.consensus], **server_state(self.ctx)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.load_local_state(state)
        self.rng.bit_generator.state = state["pairing_rng"]
        self.last_step = int(state["last_step"])
        self.consensus = [list(c) for c in state["consensus"]]
        load_server_state(self.ctx, state)

    def eval_params(self) -> Any:
        xbar, distance = self.ctx.server.mean()
        if not self.consensus or self.consensus[-1][0] != self.last_step:   # (finish reads it again)
            self.consensus.append([self.last_step, distance])
        return self.ctx.xp.asarray(xbar)

    def finish(self) -> Any:
        out = super().finish()
        if self.ctx.rank == 0:
            self.summary = {**self.summary, "consensus_distance": self.consensus}
        return out
