"""`ltfb`: Livermore Tournament Fast Batch (Jacobs, Dryden, Pearce, Van Essen, MLHPC'17).

K = `config.trainers` trainers over P workers (P divisible by K); trainer g is the ranks
[g P/K, (g+1) P/K), and trains as a small `sync_sgd` of its own over its group's
collective (`ctx.comm`): trainer batch b = batch_size // K, split evenly over its workers,
gradients allreduced within the group, the config's optimiser (momentum, Nesterov).

Data: `partition(n_train, K, seed)` gives trainer k its disjoint share D_k; a per-trainer
RNG from (seed, k) takes `tournament_size` examples out of D_k as its tournament set T_k
and the rest (cut to a length common to all trainers, so all plans agree: at most one
example per trainer is dropped) as its training set. Each trainer walks its training set
in its own seeded epoch order (`ctx.batch(..., index=train set)`).

A step is one step of every trainer: one batch of b examples per trainer, and the step
count, schedule and eval steps come from a plan over the trainer's training set and
batch b (`problem.run_plan`, from the declaration's `plan_shape`). So `steps` / `epochs` mean the
same for every trainer: an epoch is one pass of each trainer over its own training set
(the population sees the data about once), and the run's samples are K b per step.

Every `round_size` steps (round r = (step + 1) // round_size, from 1):
  1. pairing: an RNG seeded by (seed, r) shuffles the trainer ids and neighbours become
     partners (`round_pairs`); every trainer computes the same pairs, so nobody talks
     about it; with K odd the last one sits the round out;
  2. the trainers' leaders (group rank 0) deposit their model on the server and collect
     their partner's (a pairwise rendezvous; `deposit` / `collect`);
  3. each leader scores both models by accuracy on its OWN T_k and adopts the partner's
     only if it scores strictly higher; partners may decide differently;
  4. the leader broadcasts what it holds to its trainer's other workers (a group allreduce).
A model is its weights and its base lr: an adopted model brings its lr along (so with
`trainer_lrs` or `lr_spread` the tournament searches over learning rates, and the
population's lrs collapse onto the ones that win); the optimiser state (momentum, or the
moments of adamw / lamb) travels only with `exchange_state`, otherwise the adopter keeps its own.

Initial weights: trainer k starts from `model.init(seed + k)` (a diverse population;
trainer 0 from the same weights as every other algorithm).

Records: a tournament row per trainer per round (TOURNAMENT_COLUMNS; `partner` and
`partner_score` are None when it sat out or its partner had ended; `lr` is the base lr of
the model it holds after the round; `lineage` the model's history, "t0@r0>t2@r3": born
in trainer 0, adopted by trainer 2 in round 3, so the survivor's lineage can be drawn);
eval rows per trainer ("trainer-<k>") at eval steps. Summary (from rank 0, which gathers
every trainer's final scores through the server): `trainer_final_accuracy`,
`best_trainer_accuracy`, `median_trainer_accuracy`, `winner` (the trainer whose model has
the best final test accuracy, a report of the population, not a selection rule),
`winner_lineage`, `winner_lr`; `final_*` are the winner's, and so are the run's params.

Stop and divergence: a trainer decides inside its group, every step (its leader's stop
flag and the loss travel in the gradient allreduce, as in sync_sgd). A trainer that ends
(stop, divergence, the last step or an error) leaves the tournament (`depart`), so a
partner waiting for it gets nothing and goes on. A trainer whose loss turns NaN/inf ends
as diverged and asks the whole run to stop: the run ends as diverged, with every other
trainer stopped at its next step.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from ..comm.base import ring_allreduce_bytes
from ..config import ConfigError, RunConfig
from ..config.registry import trainer_lrs  # facts on LTFB's declaration
from ..data import partition, split_batch
from ..maths.backend import to_numpy
from ..maths.optim import make_optimizer
from ..problem import run_plan
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

_PAIR_SALT = 0x7F1B    # keeps the pairing stream apart from the other seeded streams
_TOUR_SALT = 0x70C5


# ------------------------------------------------------------------------------ pure helpers
def trainer_groups(config: RunConfig, size: int) -> list[list[int]]:
    """The ranks of each trainer: K contiguous groups of P / K.

    >>> trainer_groups(RunConfig(algorithm="ltfb", cpus=4, trainers=2), 4)
    [[0, 1], [2, 3]]
    """
    per = size // config.trainers
    return [list(range(g * per, (g + 1) * per)) for g in range(config.trainers)]


def round_pairs(seed: int, rnd: int, trainers: int) -> list[tuple[int, int]]:
    """The partners of round `rnd`: a shuffle of the trainer ids from (seed, rnd), paired
    neighbour by neighbour; with an odd count the last id sits out.

    >>> round_pairs(0, 1, 5)         # trainer 1 sits round 1 out
    [(2, 0), (4, 3)]
    >>> round_pairs(0, 2, 5)
    [(2, 3), (0, 1)]
    """
    order = np.random.default_rng([seed, rnd, _PAIR_SALT]).permutation(trainers)
    return [(int(order[i]), int(order[i + 1])) for i in range(0, trainers - 1, 2)]


def partner_of(seed: int, rnd: int, trainers: int, k: int) -> int | None:
    """Trainer k's partner in round `rnd`, None when it sits out."""
    for a, b in round_pairs(seed, rnd, trainers):
        if k in (a, b):
            return b if k == a else a
    return None


def trainer_data(n_train: int, trainers: int, tournament_size: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(training indices, tournament indices) of each trainer; all 2K sets disjoint.

    >>> sets = trainer_data(10, 2, 2, seed=0)
    >>> [(len(a), len(b)) for a, b in sets]
    [(3, 2), (3, 2)]
    """
    parts = partition(n_train, trainers, seed)
    share = min(len(p) for p in parts)
    m = share - tournament_size                          # one training length for all trainers
    if m < 1:
        raise ConfigError("tournament_size", f"less than each trainer's share of the data ({share})", tournament_size)
    out = []
    for k, part in enumerate(parts):
        perm = np.random.default_rng([seed, k, _TOUR_SALT]).permutation(len(part))
        out.append((np.sort(part[perm[tournament_size:tournament_size + m]]), np.sort(part[perm[:tournament_size]])))
    return out


def ltfb_extra(config: RunConfig, size: int) -> dict[str, Any]:
    """Client-side set-up: each trainer's base lr (the data's share per trainer is checked
    with the config: `registry._ltfb_check`)."""
    return {"trainer_lrs": trainer_lrs(config)}


# ------------------------------------------------------------------------------ the worker
class LTFB(Algorithm):
    clip_counted = "rank 0's trainer's updates"

    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        c, xp = ctx.config, ctx.xp
        self.K, self.k = c.trainers, int(ctx.extra["group"])
        self.gsize = ctx.comm.size if ctx.comm is not None else 1
        self.leader = (ctx.comm.rank if ctx.comm is not None else 0) == 0
        data = ctx.extra["dataset"]
        self.train_idx, tour_idx = trainer_data(data.n_train, self.K, c.tournament_size, c.seed)[self.k]
        self.b = c.batch_size // self.K
        self.lrs = list(ctx.extra.get("trainer_lrs") or trainer_lrs(c))
        self.lr_index = self.k                             # which of self.lrs the held model uses
        ctx.plan = run_plan(c, data.n_train, lr=self.lrs[self.k])
        assert (ctx.plan.n_train, ctx.plan.batch_size) == (len(self.train_idx), self.b)   # one shape, declared
        self._schedules = {self.k: ctx.plan.schedule}
        self.lo, self.hi = split_batch(self.b, [1.0] * self.gsize)[ctx.comm.rank if ctx.comm else 0]
        self.n = n = ctx.model.n_params
        self.params = xp.asarray(ctx.model.init(c.seed + self.k))
        self.opt = make_optimizer(c, ctx.model.layout(), xp, self.params.dtype)
        grank = ctx.comm.rank if ctx.comm is not None else 0
        self.buf = xp.zeros(n + tail_length(self.gsize), dtype=self.params.dtype)   # [ grad | tail ]
        self.tail = SyncTail(ctx, n, rank=grank, size=self.gsize)                   # within the trainer
        if self.leader:
            idx = tour_idx if xp is np else xp.asarray(tour_idx)
            self.X_tour, self.y_tour = ctx.X[idx], ctx.y[idx]
        self.lineage = f"t{self.k}@r0"
        self.clock = ctx.clock
        self.summary: dict[str, Any] = {}
        self.scores: dict[str, float] | None = None      # evaluation of the model held now
        self.departed = False

    # ---------------------------------------------------------------- helpers
    def schedule(self, step: int) -> float:
        """The lr at `step` of the model held now (its base lr through the run's schedule)."""
        j = self.lr_index
        if j not in self._schedules:
            c = self.ctx.config
            self._schedules[j] = run_plan(c, self.ctx.extra["dataset"].n_train, lr=self.lrs[j]).schedule
        return self._schedules[j](step)

    def group_allreduce(self, buf: Any) -> Any:
        return buf if self.gsize == 1 else self.ctx.allreduce(buf)

    def depart(self) -> None:
        """Leave the tournament (once): partners waiting for this trainer go on without it."""
        if self.leader and not self.departed:
            self.departed = True
            with contextlib.suppress(Exception):
                self.ctx.server.depart(self.k)

    # ---------------------------------------------------------------- the loop's hooks
    def step(self, step: int) -> StepOut:
        try:
            return self._step(step)
        except BaseException:
            self.depart()
            raise

    def _step(self, step: int) -> StepOut:
        ctx, n, buf = self.ctx, self.n, self.buf
        lr = self.schedule(step)
        self.scores = None                                 # the model is about to change
        t0 = self.clock()
        X, y = ctx.batch(step, self.lo, self.hi, batch_size=self.b, index=self.train_idx)
        loss, _ = ctx.model.loss_and_grad(self.params, X, y, grad_out=buf[:n])
        w = (self.hi - self.lo) / self.b
        if w != 1.0:
            buf[:n] *= w
        t1 = self.clock()
        out = StepOut(lr=lr, samples=self.hi - self.lo, compute_s=t1 - t0,
                      bytes_sent=ring_allreduce_bytes(self.gsize, buf.nbytes))
        if not self.tail.exchange(out, buf, loss * w, t1 - t0, self.group_allreduce):   # the trainer's leader asks to stop
            if out.stop == "diverged" and self.leader:
                if ctx.rank != 0:  # the loop reports rank 0's; other trainers say so here
                    ctx.event("diverged", f"trainer {self.k}: loss became {out.loss} at step {step} with lr {lr:.6g}")
                if ctx.control is not None:
                    ctx.control.request_stop("diverged")
            return out
        self.opt.step(self.params, self.tail.total[:n], lr)
        self.tail.freed()
        if (step + 1) % ctx.config.round_size == 0:
            score_s, comm_s = self.tournament(step, (step + 1) // ctx.config.round_size)
            out.compute_s += score_s
            out.comm_s += comm_s
            out.bytes_sent += self.tournament_bytes
        return out

    def tournament(self, step: int, rnd: int) -> tuple[float, float]:
        """One round: swap with the partner, keep the better on my T_k; returns (score_s, comm_s)."""
        ctx, xp, n = self.ctx, self.ctx.xp, self.n
        t0 = self.ctx.timer()
        score_s = 0.0
        adopted, own, theirs = False, None, None
        partner = partner_of(ctx.config.seed, rnd, self.K, self.k)
        got = None
        self.tournament_bytes = 0.0
        if self.leader:
            if partner is not None:
                kept = self.opt.export_state() if ctx.config.exchange_state else None   # velocity, moments
                state = to_numpy(kept).copy() if kept is not None else None
                self.tournament_bytes += self.params.nbytes + (state.nbytes if state is not None else 0)
                ctx.server.deposit(rnd, self.k, to_numpy(self.params).copy(), state,
                                   {"lr_index": self.lr_index, "lineage": self.lineage})
            ts = self.ctx.timer()
            own = ctx.evaluator.accuracy(self.params, self.X_tour, self.y_tour)   # while the partner deposits
            score_s += self.ctx.timer() - ts
            if partner is not None:
                got = ctx.server.collect(rnd, partner)                              # None: the partner has ended
            if got is not None:
                their_params, their_state, meta = got
                ts = self.ctx.timer()
                theirs = ctx.evaluator.accuracy(xp.asarray(their_params), self.X_tour, self.y_tour)
                score_s += self.ctx.timer() - ts
                adopted = theirs > own
            if adopted:
                self.params[...] = xp.asarray(their_params)
                self.lr_index = int(meta["lr_index"])
                self.lineage = f"{meta['lineage']}>t{self.k}@r{rnd}"
        if self.gsize > 1:  # the leader's decision (and weights) reach the trainer's other workers
            bcast = xp.zeros(n + 2, dtype=self.params.dtype)
            if self.leader:
                bcast[:n] = self.params
                bcast[n], bcast[n + 1] = float(adopted), float(self.lr_index)
            total = ctx.allreduce(bcast)
            self.tournament_bytes += ring_allreduce_bytes(self.gsize, bcast.nbytes)
            adopted = float(total[n]) > 0
            if adopted and not self.leader:
                self.params[...] = total[:n]
                self.lr_index = int(round(float(total[n + 1])))
        state_travels = adopted and ctx.config.exchange_state and bool(self.opt.state)
        if state_travels:
            if self.leader:
                self.opt.import_state(xp.asarray(their_state))
            if self.gsize > 1:   # one array at a time: no message is longer than the parameters
                for arr in self.opt.state.values():
                    part = arr.astype(self.params.dtype) if self.leader else xp.zeros(arr.shape, self.params.dtype)
                    arr[...] = ctx.allreduce(part).astype(arr.dtype)
                    self.tournament_bytes += ring_allreduce_bytes(self.gsize, part.nbytes)
        if self.leader:
            ctx.record({"kind": "tournament", "round": rnd, "step": step, "time": ctx.now(), "trainer": self.k,
                        "partner": partner if got is not None else None, "own_score": own,
                        "partner_score": theirs, "adopted": bool(adopted), "lr": self.lrs[self.lr_index],
                        "lineage": self.lineage})
        return score_s, self.ctx.timer() - t0 - score_s

    def state(self) -> dict[str, Any]:
        """The trainer's model, its rule's state, whose lr it uses and its lineage. Between
        tournaments the mailbox holds nothing a later round reads: it starts empty again."""
        return {**state_copy(self.ctx.xp, params=self.params), **optimizer_state(self.ctx.xp, self.opt),
                "lr_index": self.lr_index, "lineage": self.lineage, "tail.t_free": self.tail.t_free}

    def load_state(self, state: dict[str, Any]) -> None:
        xp = self.ctx.xp
        self.params[...] = xp.asarray(state["params"])
        load_optimizer_state(xp, self.opt, state)
        self.lr_index, self.lineage = int(state["lr_index"]), str(state["lineage"])
        self.tail.t_free = clock_reading(self.ctx, state.get("tail.t_free"))

    def eval_params(self) -> Any:
        return self.params

    def evaluate(self, step: int) -> None:
        """Every trainer's leader scores its model ("trainer-<k>")."""
        ctx = self.ctx
        if self.leader and ctx.evaluator is not None:
            self.scores = ctx.evaluator(self.params)
            ctx.evaluated(f"trainer-{self.k}", step, ctx.plan.epoch(step + 1), ctx.now(), self.scores, self.params)

    def finish(self) -> np.ndarray | None:
        """Leaders leave their final scores and weights; rank 0 gathers them into the summary
        and returns the winner's weights."""
        ctx = self.ctx
        if not self.leader:
            return None
        scores = self.scores or ctx.evaluator(self.params)  # the last step's evaluation, if any
        params = to_numpy(self.params).copy()
        final = {"trainer": self.k, "lr": self.lrs[self.lr_index], "lineage": self.lineage, **scores}
        try:
            ctx.server.deposit("final", self.k, params, None, final)
        finally:
            self.depart()  # before gathering: a partner may still wait for this trainer
        if ctx.rank != 0:
            return None
        finals = [(params, None, final)] + [ctx.server.collect("final", j) for j in range(self.K) if j != self.k]
        finals = [f for f in finals if f is not None]
        self.summary = {**summarise([meta for _, _, meta in finals]), "trainer_lrs": self.lrs}
        return next(p for p, _, meta in finals if meta["trainer"] == self.summary["winner"])


def _accuracy(final: dict) -> float:
    acc = final["test_accuracy"]
    return acc if math.isfinite(acc) else -1.0


def summarise(finals: list[dict]) -> dict[str, Any]:
    """The population's final scores: best, median, the winner and its lineage."""
    finals = sorted(finals, key=lambda f: f["trainer"])
    best = max(finals, key=_accuracy)
    accs = [float(f["test_accuracy"]) for f in finals]
    return {
        "trainer_final_accuracy": {str(f["trainer"]): float(f["test_accuracy"]) for f in finals},
        "best_trainer_accuracy": max(accs),
        "median_trainer_accuracy": float(np.median(accs)),
        "winner": int(best["trainer"]),
        "winner_lineage": best["lineage"].split(">"),
        "winner_lr": float(best["lr"]),
        "final_test_accuracy": float(best["test_accuracy"]),
        "final_test_loss": float(best["test_loss"]),
        "final_train_loss": float(best["train_loss"]),
    }
