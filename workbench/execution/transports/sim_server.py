"""The simulator's lockstep path for the server algorithms: easgd (the centre takes the
elastic exchanges in round-robin turns), async_easgd and async_measgd (first come, first
served; async_measgd's workers take EAMSGD's look-ahead step), async_sgd and async_msgd (a parameter server takes every worker's gradient and replies with its
parameters). Every virtual worker runs in one loop: its timing replayed without greenlets,
its maths computed in stacked passes over the workers. Bitwise the per-worker run.

Two facts make it possible. First, nothing in these workers' timing depends on their
numbers: the virtual clock moves by the compute charges (`SimCosts.compute`, jitter draws
included, per rank in the same order) and by the server's queue, which sees only message
sizes, versions and the round-robin turn. The one exception is a non-finite loss, which
ends its worker and asks every other to stop. Second, a worker's maths depends on the
others' only through the order in which the server applies their requests.

So the replay (`_Replay`) runs each worker's loop as a generator over one heap of
(virtual time, sequence, event): the same events in the same order as the scheduler's
greenlets (`sim.clock.Scheduler`, `SimServerState.serve`, `_changed`, the turn and
`final` re-checks), and logs what each worker computes, when the server applies each
request and when each read of the server's parameters happens. The maths (`_ElasticMaths`,
`_PushMaths`) then runs the log in an order of its own that keeps every dependency: a
worker's ops in its order, the server's in the server's order, each read after exactly the
server ops before it; every compute whose operands are ready, across the workers, in one
stacked `loss_and_grad_stacked`. At 64 workers x 32 rows (the bench) that is 58-64 workers
a pass, where the per-worker path's compute pool batched only the computes whose virtual
times overlap: ~7 for easgd, ~2 for async_sgd, whose server serialises the pushes (a
worker's gradient is needed when the server applies it, not at its compute's end, and
the log knows which parameters it was taken at). The losses then fill the step records.

The replay assumes every loss is finite. The log runs in chunks (`CHUNK_ROWS` records); a
chunk whose maths finds a non-finite loss is thrown away and the run replayed from the
start with the maths done at each event (the per-worker order, so the divergence, the stop
it asks for and the steps it ends are the per-worker run's), leaving out the records
already sent. The replay draws the jitter again from where the first pass began, and
where the first pass asked whether to stop it takes that pass's answers (a stop pressed
during the first pass stays where it was seen; the divergence's own stop counts at once).

`tests/test_sim_lockstep.py` checks steps, evaluations, parameters, events and the virtual
makespan against `SimTransport(lockstep=False)`: jitter, mixed devices, uneven slices,
warmup, weight decay, adamw and lamb, momentum on the server, evaluations, divergence
(before and after records were sent) and stop requests. Not covered (run per worker,
`lockstep_refusal` says why): hogwild_easgd and sync_easgd, lars and lamb on EASGD's workers (layer norms over a row of a stacked array are not promised to be
bitwise those over a separate array), fault injection, emulated latency, models without a
stacked pass.
"""
from __future__ import annotations

import math
import time
from collections import deque
from functools import partial
from heapq import heappop, heappush
from itertools import count
from typing import Any

import numpy as np

from ...data import _epoch_order, steps_per_epoch
from ...maths.optim import SGD
from ...results import eval_record
from .sim_lockstep import HogwildLockstep, Lockstep

ELASTIC_ALGORITHMS = ("easgd", "async_easgd", "async_measgd")
PUSH_ALGORITHMS = ("async_sgd", "async_msgd")
SERVER_ALGORITHMS = ELASTIC_ALGORITHMS + PUSH_ALGORITHMS
CHUNK_ROWS = 512           # step records per chunk of the log at least (4 per worker: a few steps of each)


def lockstep_for(setup: Any) -> type[Lockstep]:
    """The lockstep loop of `setup`'s algorithm (one `sim_lockstep.lockstep_refusal` let through)."""
    algorithm = setup.config.algorithm
    if algorithm in SERVER_ALGORITHMS:
        return ServerLockstep
    return HogwildLockstep if algorithm == "hogwild_sgd" else Lockstep


class _W:
    """One worker of the replay: its clock, its loop (a generator), and whether it waits."""

    __slots__ = ("r", "t", "gen", "blocked", "done")

    def __init__(self, r: int):
        self.r, self.t, self.gen, self.blocked, self.done = r, 0.0, None, False, False


class _Log:
    """What the replay logged and the maths has not yet run: per worker its ops in order
    (("c", compute id, step, lr) a local step or a gradient; ("s",) its next server op;
    ("r", read id) its parameters from a read of the server), the server ops in the
    server's order, and the reads of the server's parameters, each after how many server
    ops. `run` does them in an order of its own that keeps every dependency."""

    def __init__(self, lock: Any, model: Any, ctx0: Any, slices: list[tuple[int, int]]):
        self.model, self.slices = model, slices
        self.P = len(slices)
        self.X_all, self.y_all = ctx0.X, ctx0.y
        self.N, self.B, self.seed = ctx0.X.shape[0], ctx0.plan.batch_size, ctx0.config.seed
        self.spe = steps_per_epoch(self.N, self.B)
        self.ops: list[deque] = [deque() for _ in range(self.P)]
        self.sq: deque[tuple] = deque()        # the server ops (rank, args), in the server's order
        self.reads: deque[tuple[int, int]] = deque()   # (server ops before it, read id)
        self.snap: dict[int, np.ndarray] = {}
        self.applied = self.logged = 0         # server ops applied; logged
        self.passes = self.computed = 0        # stacked passes, and the computes they did
        self.losses: list[float] = []          # by compute id
        self.readers = 0                       # ("r", ...) ops not yet run
        self.n_reads = 0                       # reads logged (their ids)

    # -------------------------------------------------------------- logging (the replay)
    def compute(self, r: int, step: int, lr: float) -> int:
        cid = len(self.losses)
        self.losses.append(math.nan)
        self.ops[r].append(("c", cid, step, lr))
        return cid

    def server(self, r: int, *args: Any) -> None:
        self.ops[r].append(("s",))
        self.sq.append((r, args))
        self.logged += 1

    def read(self) -> int:
        """A read of the server's parameters now (after every server op logged so far)."""
        rid = self.n_reads
        self.n_reads += 1
        self.reads.append((self.logged, rid))
        return rid

    def read_into(self, r: int, rid: int) -> None:
        """Worker r's parameters become what read `rid` saw (async_sgd's first pull)."""
        self.ops[r].append(("r", rid))
        self.readers += 1

    # -------------------------------------------------------------- running the log
    def batch(self, rs: list[int], items: list[tuple], m: int, dtype: Any) -> tuple[Any, Any]:
        """The stacked rows (K, m, F) and labels of workers `rs` at their items' steps (as
        `ctx.batch` gathers each, cast as `loss_and_grad` casts)."""
        K, B, F = len(rs), self.B, self.X_all.shape[1]
        step = items[0][2]
        if K == self.P and all(it[2] == step for it in items):     # the slices tile the global batch
            epoch, k = divmod(step, self.spe)
            idx = _epoch_order(self.N, self.seed, epoch)[k * B:k * B + B]
        else:
            parts = []
            for r, it in zip(rs, items):
                lo, hi = self.slices[r]
                epoch, k = divmod(it[2], self.spe)
                parts.append(_epoch_order(self.N, self.seed, epoch)[k * B + lo:k * B + hi])
            idx = np.concatenate(parts)
        X = self.X_all.take(idx, axis=0).reshape(K, m, F)
        if X.dtype != dtype:
            X = X.astype(dtype)
        return X, self.y_all[idx].reshape(K, m, *self.y_all.shape[1:])   # a language model's y: (N, T)

    def _snapshots(self) -> None:
        reads = self.reads
        while reads and reads[0][0] <= self.applied:
            self.snap[reads.popleft()[1]] = self.server_x().copy()

    def run(self) -> None:
        """Everything logged so far: server ops as soon as their worker is ready for them,
        and the computes of every worker whose next op is one, together."""
        ops, sq, P = self.ops, self.sq, self.P
        self._snapshots()
        while True:
            while True:
                if self.readers:
                    for r in range(P):
                        head = ops[r][0] if ops[r] else None
                        if head is not None and head[0] == "r" and head[1] in self.snap:
                            ops[r].popleft()
                            self.into(r, self.snap.pop(head[1]))
                            self.readers -= 1
                if sq and ops[sq[0][0]] and ops[sq[0][0]][0][0] == "s":
                    r, args = sq.popleft()
                    ops[r].popleft()
                    self.apply(r, *args)
                    self.applied += 1
                    self._snapshots()
                    continue
                break
            heads = [r for r in range(P) if ops[r] and ops[r][0][0] == "c"]
            if not heads:
                break
            groups: dict[int, list[int]] = {}
            for r in heads:
                lo, hi = self.slices[r]
                groups.setdefault(hi - lo, []).append(r)
            for m, rs in groups.items():
                items = [ops[r].popleft() for r in rs]
                self.local(rs, items, m)
                self.passes += 1
                self.computed += len(rs)
        if sq or any(ops):
            raise RuntimeError("server lockstep: the log has ops no order can run (a bug)")

    now = run          # eager: run what was just logged (the per-worker order, one op at a time)

    def server_x(self) -> np.ndarray:
        raise NotImplementedError

    def apply(self, r: int, *args: Any) -> None:
        raise NotImplementedError

    def local(self, rs: list[int], items: list[tuple], m: int) -> None:
        raise NotImplementedError

    def into(self, r: int, params: np.ndarray) -> None:
        raise NotImplementedError


class _ElasticMaths(_Log):
    """easgd / async_easgd / async_measgd: every worker's x_i (rows of one array; async_measgd's
    velocities likewise) and the centre."""

    def __init__(self, lock: Any, algos: list, model: Any, ctx0: Any):
        super().__init__(lock, model, ctx0, [(a.lo, a.hi) for a in algos])
        self.algos = algos
        self.xs = np.stack([a.params for a in algos])          # x_i, i = 0..P-1
        for r, a in enumerate(algos):
            a.params = self.xs[r]
        self.centre = np.array(lock.setup.params0, copy=True)   # the server's x (server_state copies it)
        self.grads = np.empty_like(self.xs)
        opt = algos[0].opt
        self.plain = type(opt) is SGD and opt.velocity is None       # x -= lr (g + wd x): stackable
        self.scratch = np.empty_like(self.xs) if self.plain else None
        self.scratch2 = np.empty_like(self.xs) if self.plain and opt.weight_decay else None
        self.alpha = algos[0].alpha
        self.d = np.empty_like(self.centre)
        self.vs = None                           # async_measgd: each worker's velocity (EAMSGD's look-ahead)
        if hasattr(algos[0], "velocity"):
            self.delta = algos[0].delta
            self.vs = np.stack([a.velocity for a in algos])
            for r, a in enumerate(algos):
                a.velocity = self.vs[r]

    def server_x(self) -> np.ndarray:
        return self.centre

    def apply(self, r: int) -> None:
        """The server's `elastic` and the worker's `x_i -= d`, as they compute them."""
        x, d = self.xs[r], self.d
        np.subtract(x, self.centre, out=d)      # d = alpha (x_i - xc), as `alpha * (x - xc)` rounds it
        np.multiply(d, self.alpha, out=d)
        self.centre += d
        x -= d

    def local(self, rs: list[int], items: list[tuple], m: int) -> None:
        """One local step of each worker in `rs`, stacked."""
        K, xs = len(rs), self.xs
        X, y = self.batch(rs, items, m, xs.dtype)
        a = rs[0]
        run = rs[-1] - a + 1 == K                 # consecutive ranks: views, nothing copied
        params = xs[a:a + K] if run else xs[rs]
        grads = self.grads[a:a + K] if run else self.grads[:K]
        lrs = [it[3] for it in items]
        if self.vs is not None:
            self._look_ahead(rs, run, params, grads, X, y, lrs, items)
            return
        got = self.model.loss_and_grad_stacked(params, X, y, grads)
        if self.plain and lrs.count(lrs[0]) == K:
            # SGD.step_chunk's `x -= lr g` (momentum is 0 on EASGD's workers), the rows at once:
            # elementwise, so each row's bits are its own update's
            opt0 = self.algos[rs[0]].opt
            g = self.scratch[:K]
            if opt0.weight_decay:
                h = self.scratch2[:K]
                np.multiply(params, opt0.weight_decay, out=h)
                np.add(grads, h, out=g)
                np.multiply(g, lrs[0], out=g)
            else:
                np.multiply(grads, lrs[0], out=g)
            params -= g
            if not run:
                xs[rs] = params
        else:
            for k, r in enumerate(rs):
                self.algos[r].opt.step(xs[r], grads[k], lrs[k])
        losses = self.losses
        for it, loss in zip(items, got.tolist()):
            losses[it[1]] = loss

    def _look_ahead(self, rs: list[int], run: bool, params: np.ndarray, grads: np.ndarray, X: Any, y: Any,
                    lrs: list[float], items: list[tuple]) -> None:
        """AsyncMEASGD.local_step for the rows at once (elementwise: each row's bits its own):
        v *= delta; x += v; g = grad(x) (+ wd x); g *= lr; x -= g; v -= g."""
        K, a = len(rs), rs[0]
        v = self.vs[a:a + K] if run else self.vs[rs]
        v *= self.delta
        params += v                                   # x is now the look-ahead point
        got = self.model.loss_and_grad_stacked(params, X, y, grads)
        wd = self.algos[a].opt.weight_decay
        if wd:
            grads += np.multiply(params, wd, out=self.scratch[:K])
        if lrs.count(lrs[0]) == K:
            grads *= lrs[0]
        else:
            for k in range(K):
                grads[k] *= lrs[k]
        params -= grads
        v -= grads
        if not run:
            self.xs[rs] = params
            self.vs[rs] = v
        losses = self.losses
        for it, loss in zip(items, got.tolist()):
            losses[it[1]] = loss


class _PushMaths(_Log):
    """async_sgd / async_msgd: the server's core (its update rule and state, as the
    simulator builds it), each worker's parameters (its last reply) and gradient."""

    def __init__(self, lock: Any, slices: list[tuple[int, int]], model: Any, ctx0: Any):
        from ...comm.roles import make_core
        super().__init__(lock, model, ctx0, slices)
        setup = lock.setup
        needs = setup.spec.needs
        self.core = make_core(needs.server, needs.options(setup.config, setup.model), setup.params0, self.P)
        n = self.core.x.shape[0]
        self.params = np.empty((self.P, n), self.core.x.dtype)   # each worker's: its last reply
        self.grads = np.empty((self.P, n), self.core.x.dtype)
        # a layer-wise rule reads norms of the gradient: hand it a separate array, as a worker's own
        self.copy_grad = self.core.opt.layerwise_chunks

    def server_x(self) -> np.ndarray:
        return self.core.x

    def into(self, r: int, params: np.ndarray) -> None:
        self.params[r] = params

    def apply(self, r: int, lr: float, version: int) -> None:
        g = self.grads[r]
        self.core.push_into(g.copy() if self.copy_grad else g, lr, version, self.params[r])

    def local(self, rs: list[int], items: list[tuple], m: int) -> None:
        """Each worker's gradient at its parameters, stacked."""
        K = len(rs)
        X, y = self.batch(rs, items, m, self.params.dtype)
        a = rs[0]
        run = rs[-1] - a + 1 == K                 # consecutive ranks: views, nothing copied
        params = self.params[a:a + K] if run else self.params[rs]
        grads = self.grads[a:a + K] if run else np.empty((K, self.grads.shape[1]), self.grads.dtype)
        got = self.model.loss_and_grad_stacked(params, X, y, grads)
        if not run:
            self.grads[rs] = grads
        losses = self.losses
        for it, loss in zip(items, got.tolist()):
            losses[it[1]] = loss


class _Diverged(Exception):
    """A chunk's maths found a non-finite loss the replay assumed finite."""


class _Replay:
    """One pass of the run's timing (see the module docstring): `eager` computes each
    op as it happens; otherwise the maths runs chunk by chunk behind the replay."""

    def __init__(self, lock: ServerLockstep, ctxs: list, model: Any, eager: bool, sent_rows: list[int],
                 sent_evals: int, asked: list[list[bool]] | None = None):
        self.lock, self.ctxs, self.eager = lock, ctxs, eager
        self.sent_rows, self.sent_evals = sent_rows, sent_evals
        setup, costs = lock.setup, lock.costs
        self.P = P = setup.size
        ctx0 = ctxs[0]
        algorithm = setup.config.algorithm
        self.push = algorithm in PUSH_ALGORITHMS
        self.rr = algorithm == "easgd"            # round-robin turns (the others: first come, first served)
        n = model.n_params
        if self.push:                             # AsyncSGD's own set-up pulls from the server: not built
            self.slices = [ctx.my_slice() for ctx in ctxs]
            self.maths: Any = _PushMaths(lock, self.slices, model, ctx0)
            self.summary: dict = {}
            self.eval_name = "server"
            self.sent = n * self.maths.grads.dtype.itemsize          # the gradient pushed
            self.x_service = costs.host_update(n, self.maths.core.opt.passes)
        else:
            algos = [lock.algorithm_class()(ctx) for ctx in ctxs]
            self.slices = [(a.lo, a.hi) for a in algos]
            self.maths = _ElasticMaths(lock, algos, model, ctx0)
            self.summary, self.eval_name, self.tau = algos[0].summary, algos[0].eval_name, algos[0].tau
            self.sent = algos[0].params.nbytes                       # x_i to the centre's server
            self.x_service = costs.host_update(n, 3.0)
        self.plan, self.evaluator = ctx0.plan, ctx0.evaluator
        net = costs.network
        self.alpha, self.beta = net.alpha, net.beta
        # SimServer.bind's sizes and work: a vector in (the exchange's x_i, the push's gradient)
        # and out (the centre's d, the new parameters, a read), a read's pass over the vector
        self.x_in = 0 + costs.nbytes(n)
        self.x_out = 0 + costs.nbytes(n)
        self.read_out = 0 + costs.nbytes(n)
        self.read_service = costs.host_update(None, 1.0)
        self.costs = costs
        self.heap: list = []
        self.seq = count()
        # the server's queue (SimServerState) and core (ParameterServer's version, turn, retirements)
        self.free = 0.0
        self.turns: dict[int, tuple[_W, int]] = {}
        self.waiting: list[_W] = []
        self.changes = 0
        self.last_change = 0.0
        self.version = 0
        self.turn = 0
        self.retired = [False] * P
        self.left = [False] * P
        self.ws = [_W(r) for r in range(P)]
        self.rows: list[tuple] = []            # logged step records, waiting for their losses
        self.evals: list[tuple] = []           # rank 0's logged evaluations (step, epoch, now, read id)
        self.row_count = [0] * P               # records made (sent or not) per worker
        self.eval_count = 0
        self.results: list[dict | None] = [None] * P
        self.final_read: int | None = None
        self.lrs: dict[int, float] = {}
        # each worker's answers to "stop?" at the top of its steps, so far: a replay of a divergence
        # gives the same answers where this pass asked (a stop pressed meanwhile stays where it was
        # seen), and asks the control beyond; its own divergence's stop counts at once
        self.prior = asked
        self.asked: list[list[bool]] = [[] for _ in range(P)]
        self.diverged = False

    # ---------------------------------------------------------------- the driver
    def run(self, proc: Any) -> None:
        heap = self.heap
        for w in self.ws:                      # spawned in rank order at virtual time 0
            w.gen = self._worker(w)
            heappush(heap, (0.0, next(self.seq), w))
        lock = self.lock
        chunk = max(CHUNK_ROWS, 4 * self.P)       # a few steps of every worker: passes of all of them
        while heap:
            t, _, what = heappop(heap)
            if what.__class__ is _W:
                if what.done or what.blocked:
                    continue
                if what.t < t:
                    what.t = t
                try:
                    next(what.gen)
                except StopIteration:
                    what.done = True
            else:
                what()
            if len(self.rows) >= chunk:
                self._chunk()
                proc.sleep_until(max(proc.t, max(w.t for w in self.ws)))   # the driver's turn: a cancel lands here
        stuck = [w.r for w in self.ws if not w.done]
        if stuck:
            raise RuntimeError(f"server lockstep: worker(s) {stuck} never ended (a bug)")
        self._chunk()
        lock.t[:] = [w.t for w in self.ws]

    def _resume(self, w: _W) -> None:
        try:
            next(w.gen)
        except StopIteration:
            w.done = True

    # ---------------------------------------------------------------- the server (SimServerState)
    def _changed(self, t: float) -> None:
        self.last_change = t
        if self.turns:
            heappush(self.heap, (t, next(self.seq), partial(self._recheck_turn, self.changes)))
        self.changes += 1
        waiting, self.waiting = self.waiting, []
        batch = []
        for p in waiting:
            if p.done:
                continue
            p.blocked = False
            if p.t < t:
                p.t = t
            if p.t > t:
                heappush(self.heap, (p.t, next(self.seq), p))
            else:
                batch.append(p)
        if batch:
            heappush(self.heap, (t, next(self.seq), partial(self._recheck, t, batch)))

    def _recheck_turn(self, change: int) -> None:
        entry = self.turns.get(self.turn)
        if entry is None or entry[1] > change:
            return
        p = entry[0]
        del self.turns[self.turn]
        if p.done:
            return
        p.blocked = False
        if p.t < self.last_change:
            p.t = self.last_change
        self._resume(p)

    def _recheck(self, t: float, batch: list[_W]) -> None:
        for p in batch:
            if p.done or p.blocked:
                continue
            if p.t < t:
                p.t = t
            if all(self.retired):
                self._resume(p)
            else:
                p.blocked = True
                self.waiting.append(p)

    def _advance(self, retire: int | None = None) -> None:
        """ParameterServer.advance_turn."""
        P, retired = self.P, self.retired
        if retire is not None:
            retired[retire] = True
            turn = self.turn
        else:
            turn = (self.turn + 1) % P
        if not all(retired):
            while retired[turn]:
                turn = (turn + 1) % P
        self.turn = turn

    def _leave(self, w: _W) -> None:
        """EndsOnServer.leave: the retire notice, at once."""
        if not self.left[w.r]:
            self.left[w.r] = True
            self._advance(retire=w.r)
            self._changed(w.t)

    def _asleep(self, w: _W, t: float) -> bool:
        """`sleep_until(t)`'s scheduling; True: w yields to the driver. Where nothing else is
        due by t (an event due at t itself came first) the driver would pop w next at once,
        so instead w's clock moves to t and it goes on (False)."""
        if t < w.t:
            t = w.t
        heap = self.heap
        if heap and heap[0][0] <= t:
            heappush(heap, (t, next(self.seq), w))
            return True
        w.t = t
        return False

    def _serve(self, w: _W, in_bytes: float, out_bytes: float, service_s: float, op: Any, wait: str = ""):
        """SimServerState.serve (a generator: it yields where the greenlet would switch);
        `wait` "turn": for w's round-robin turn, "final": until every worker retired;
        `op()` at the moment the server applies the request, its value returned."""
        if self._asleep(w, w.t + self.alpha):
            yield
        if wait == "turn":
            while self.turn != w.r:
                self.turns[w.r] = (w, self.changes)
                w.blocked = True
                yield
        elif wait == "final":
            while not all(self.retired):
                self.waiting.append(w)
                w.blocked = True
                yield
        start = w.t if w.t >= self.free else self.free
        applied = start + in_bytes * self.beta
        self.free = done = applied + service_s + out_bytes * self.beta
        if self._asleep(w, applied):
            yield
        got = op()
        self._changed(w.t)
        if self._asleep(w, done + self.alpha):
            yield
        return got

    def _read(self, w: _W, final: bool):
        """A read of the server's parameters (the centre, a pull, the final ones): its read id."""
        return (yield from self._serve(w, 0, self.read_out, self.read_service, self.maths.read,
                                       "final" if final else ""))

    def _exchange(self, r: int) -> None:
        self.maths.server(r)
        if self.rr:
            self._advance()

    def _push(self, r: int, lr: float, version: int) -> tuple[int, int]:
        """ParameterServer.push's bookkeeping (new version, staleness); the maths is logged."""
        staleness = self.version - version
        self.maths.server(r, lr, version)
        self.version += 1
        return self.version, staleness

    # ---------------------------------------------------------------- a worker's loop (run_loop)
    def _worker(self, w: _W):
        """run_loop with EASGD's step (ElasticWorker.step) or async_sgd's (AsyncSGD.step)."""
        r, ctx, plan, maths = w.r, self.ctxs[w.r], self.plan, self.maths
        lo, hi = self.slices[r]
        m = hi - lo
        heap, seq, costs, push, lrs = self.heap, self.seq, self.costs, self.push, self.lrs
        tau = 1 if push else self.tau
        total = plan.total_steps
        fixed = None if costs.jitter else costs.compute(r, m)   # without jitter a rank's compute is one number
        version = 0
        if push:                                  # AsyncSGD.__init__: the first pull (version, parameters)
            rid, version = yield from self._serve(w, 0, self.read_out, self.read_service,
                                                  lambda: (maths.read(), self.version))
            maths.read_into(r, rid)
        self.lock.t[r] = w.t
        if ctx.t_start is None:                   # run_loop's ctx.start(): time 0 (a replay again: already)
            ctx.start()
        t_start = ctx.t_start
        status, step = "completed", -1
        for step in range(total):
            prior = self.prior[r] if self.prior is not None else ()
            stop = self.diverged or (prior[step] if step < len(prior) else ctx.stop_requested())
            self.asked[r].append(stop)
            if stop:
                status = "stopped"
                break
            lr = lrs.get(step)
            if lr is None:
                lr = lrs[step] = plan.schedule(step)    # a function of the step alone: once per step
            t0 = w.t
            cid = maths.compute(r, step, lr)
            if self.eager:
                maths.now()
            w.t = t0 + (fixed if fixed is not None else costs.compute(r, m))      # charge; now()
            if heap and heap[0][0] < w.t:
                heappush(heap, (w.t, next(seq), w))
                yield
            t1 = w.t
            comm_s, sent, staleness = 0.0, 0.0, 0.0
            if push:
                version, stale = yield from self._serve(w, self.x_in, self.x_out, self.x_service,
                                                        partial(self._push, r, lr, version))
                staleness = float(stale)
                comm_s, sent = w.t - t1, self.sent
            elif (step + 1) % tau == 0:
                yield from self._serve(w, self.x_in, self.x_out, self.x_service, partial(self._exchange, r),
                                       "turn" if self.rr else "")
                comm_s, sent = w.t - t1, self.sent
            if self.eager:
                maths.now()
            if step + 1 == total:
                self._leave(w)
            self._row(r, (step, w.t - t_start, cid, lr, m, t1 - t0, comm_s, staleness, sent))
            if self.eager and not math.isfinite(maths.losses[cid]):
                status = "diverged"
                self.lock.t[r] = w.t
                loss = maths.losses[cid]
                ctx.event("diverged", f"loss became {loss} at step {step} with lr {lr:.6g}")
                if ctx.control is not None:
                    ctx.control.request_stop("diverged")
                self.diverged = True
                break
            if r == 0 and self.evaluator is not None and plan.is_eval_step(step):
                rid = yield from self._read(w, self.left[r])
                self._eval((step, plan.epoch(step + 1), w.t - t_start, rid))
        self._leave(w)                            # finish: EndsOnServer.leave, then rank 0's result
        if r == 0:
            self.final_read = yield from self._read(w, True)
        self.results[r] = {"status": status, "last_step": step}

    def _row(self, r: int, row: tuple) -> None:
        self.row_count[r] += 1
        if self.row_count[r] > self.sent_rows[r]:
            self.rows.append((r, row))
        if self.eager:
            self._chunk()

    def _eval(self, ev: tuple) -> None:
        self.eval_count += 1
        if self.eval_count > self.sent_evals:
            self.evals.append(ev)
        if self.eager:
            self._chunk()

    # ---------------------------------------------------------------- the maths, and the records
    def _chunk(self) -> None:
        """Run the logged maths; send the logged records with their losses (speculative: a
        non-finite loss throws the chunk away, `_Diverged`)."""
        maths = self.maths
        maths.run()
        rows, self.rows = self.rows, []
        if not self.eager:
            losses = maths.losses
            if not all(math.isfinite(losses[row[2]]) for _, row in rows):
                raise _Diverged
        ctxs = self.ctxs
        for r, (step, t, cid, lr, m, comp, comm, staleness, sent) in rows:
            ctxs[r].steps.add(step, t, maths.losses[cid], lr, m, comp, comm, 0.0, staleness, sent)
            self.sent_rows[r] += 1
        evals, self.evals = self.evals, []
        ctx0 = ctxs[0]
        for step, epoch, now, rid in evals:
            scores = self.evaluator(maths.snap.pop(rid))
            ctx0.record(eval_record(self.eval_name, step, epoch, now, **scores))
            self.sent_evals += 1
        wall = time.perf_counter()
        for ctx in ctxs:
            if wall >= ctx._next_flush:           # live batches a few times a second
                ctx.flush()


class ServerLockstep(Lockstep):
    """easgd, async_easgd, async_measgd, async_sgd, async_msgd in one loop (see the module docstring)."""

    def algorithm_class(self) -> type:
        from ...algorithms.registry import specs
        return specs()[self.setup.config.algorithm].cls

    def _run(self, proc: Any, ctxs: list, model: Any) -> list[dict]:
        sent_rows, sent_evals = [0] * self.size, [0]
        eager, asked = False, None
        # the jitter draws: a replay from the start draws them again, from where the first began
        rng_states = [g.bit_generator.state for g in self.costs.rngs]
        while True:
            for g, state in zip(self.costs.rngs, rng_states):
                g.bit_generator.state = state
            self.t[:] = 0.0
            replay = _Replay(self, ctxs, model, eager, sent_rows, sent_evals[0], asked)
            try:
                replay.run(proc)
                break
            except _Diverged:             # replay from the start, the maths at each event
                sent_rows, sent_evals, asked = replay.sent_rows, [replay.sent_evals], replay.asked
                eager = True
        maths = replay.maths
        self.tr.stacked = (maths.passes, maths.computed)   # SimTransport.computes_per_pass
        results = []
        for r, ctx in enumerate(ctxs):
            res = replay.results[r] or {}
            params_out = maths.snap.pop(replay.final_read) if r == 0 and replay.final_read is not None else None
            ctx.flush(done=True)
            results.append({"status": res.get("status", "failed"), "params": params_out,
                            "last_step": res.get("last_step", -1), "summary": replay.summary if r == 0 else {},
                            "steps": ctx.step_columns(), "started": ctx.started_wall})
        return results
