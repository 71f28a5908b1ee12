"""The simulator's fast path for the server algorithms (declared `fast_path="server"`):
easgd (the centre takes the elastic exchanges in round-robin turns), async_easgd and
async_measgd (first come, first served; async_measgd's workers take EAMSGD's look-ahead
step), async_sgd and async_msgd (a parameter server takes every worker's gradient and
replies with its parameters). Every virtual worker runs in one loop: its timing replayed
without greenlets, its maths computed in stacked passes over the workers with the
family's own functions. Bitwise the per-worker run.

Two facts make it possible. First, nothing in these workers' timing depends on their
numbers: the virtual clock moves by the compute charges (`SimCosts.compute`, jitter draws
included, per rank in the same order) and by the server's queue, which sees only message
sizes, versions and the round-robin turn. The one exception is a non-finite loss, which
ends its worker and asks every other to stop. Second, a worker's maths depends on the
others' only through the order in which the server applies their requests.

So the replay (`_Replay`) runs each worker's loop as a generator task (`sim.clock.Task`)
on the virtual clock's scheduler, against the server's own queue (`roles.SimServerState`:
the same `serve`, turns and `final` waits as the per-worker front-end) and the role's own
core (`comm.roles.ParameterServer`). Each request's count (`count_push`, `count_exchange`,
the turn, retirements) happens on that core in virtual-time order, as in the per-worker
run; its maths (`apply_push`, `apply_exchange`) is logged, with each worker's computes and
each read of the server's parameters. What the replay keeps of its own is timing: a
worker's loop reduced to its clock and its requests (`_worker`: run_loop with the
algorithm's step), and the order in which the logged maths runs.

The maths (`_ElasticMaths`, `_PushMaths`) runs the log in an order of its own that keeps
every dependency: a worker's ops in its order, the server's in the server's order, each
read after exactly the server ops before it; every compute whose operands are ready,
across the workers, in one stacked `loss_and_grad_stacked`, then the family's update on
the stack (`maths.optim.sgd_descent`, `easgd.look_ahead` and `eamsgd_descent`; another
rule row by row, each worker's own). At 64 workers x 32 rows (the bench) that is 58-64
workers a pass, where the per-worker path's compute pool batched only the computes whose
virtual times overlap: ~7 for easgd, ~2 for async_sgd, whose server serialises the pushes
(a worker's gradient is needed when the server applies it, not at its compute's end, and
the log knows which parameters it was taken at). The losses then complete the step
records, each through the loop's contract (`base.close_step`).

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
`lockstep.lockstep_refusal` says why): a rule that takes layer norms (lars, lamb) on
the centre's workers (norms over a row of a stacked array are not promised to be bitwise
those over a separate array), fault injection, emulated latency, models without a stacked
pass.
"""
from __future__ import annotations

import math
from collections import deque
from functools import partial
from heapq import heappush
from typing import Any

import numpy as np

from ..algorithms.base import StepOut, close_step
from ..algorithms.easgd import AsyncMEASGD, ElasticWorker, eamsgd_descent, look_ahead
from ..comm.base import WorkerLost
from ..comm.roles import make_core
from ..data import _epoch_order, steps_per_epoch
from ..maths.metrics import EvaluationError
from ..maths.optim import SGD, clip_gradient, clip_summary, sgd_descent
from .clock import Scheduler, Task
from .lockstep import Lockstep
from .roles import SimServerState

CHUNK_ROWS = 512           # step records per chunk of the log at least (4 per worker: a few steps of each)


class _Log:
    """What the replay logged and the maths has not yet run: per worker its ops in order
    (("c", compute id, step, lr) a local step or a gradient; ("s",) its next server op;
    ("r", read id) its parameters from a read of the server), the server ops in the
    server's order, and the reads of the server's parameters, each after how many server
    ops. `run` does them in an order of its own that keeps every dependency."""

    def __init__(self, core: Any, model: Any, ctx0: Any, slices: list[tuple[int, int]]):
        self.core, self.model, self.slices = core, model, slices
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
        """The server's parameters (the centre, or a parameter server's x), as its maths left them."""
        return self.core.x

    def apply(self, r: int, *args: Any) -> None:
        raise NotImplementedError

    def local(self, rs: list[int], items: list[tuple], m: int) -> None:
        raise NotImplementedError

    def into(self, r: int, params: np.ndarray) -> None:
        raise NotImplementedError


class _ElasticMaths(_Log):
    """easgd / async_easgd / async_measgd: every worker's x_i (rows of one array; async_measgd's
    velocities likewise) and the centre (the core's x). The workers are the algorithm's own
    (`ElasticWorker`: its x_i, rule, slice, alpha; EAMSGD's velocity and delta)."""

    def __init__(self, core: Any, algos: list[ElasticWorker], model: Any, ctx0: Any):
        super().__init__(core, model, ctx0, [(a.lo, a.hi) for a in algos])
        self.algos = algos
        self.xs = np.stack([a.params for a in algos])          # x_i, i = 0..P-1
        for r, a in enumerate(algos):
            a.params = self.xs[r]
        self.grads = np.empty_like(self.xs)
        opt = algos[0].opt
        self.weight_decay = opt.weight_decay
        self.plain = type(opt) is SGD and opt.velocity is None       # x -= lr (g + wd x): stackable
        self.work = np.empty_like(self.xs) if self.plain else None
        self.decay = np.empty_like(self.xs) if self.plain and opt.weight_decay else None
        self.alpha = algos[0].alpha
        self.d = np.empty_like(core.x)
        self.vs = None                           # async_measgd: each worker's velocity (EAMSGD's look-ahead)
        if isinstance(algos[0], AsyncMEASGD):
            self.delta = algos[0].delta
            self.vs = np.stack([a.velocity for a in algos])
            for r, a in enumerate(algos):
                a.velocity = self.vs[r]

    def apply(self, r: int) -> None:
        """The exchange: the centre's side on the server's core, x_i -= d on the worker's row."""
        x = self.xs[r]
        x -= self.core.apply_exchange(x, self.alpha, out=self.d)

    def local(self, rs: list[int], items: list[tuple], m: int) -> None:
        """One local step of each worker in `rs`, stacked: the family's update over the rows
        at once (elementwise: each row's bits are its own update's), another rule row by row."""
        K, xs, vs = len(rs), self.xs, self.vs
        X, y = self.batch(rs, items, m, xs.dtype)
        a = rs[0]
        run = rs[-1] - a + 1 == K                 # consecutive ranks: views, nothing copied
        params = xs[a:a + K] if run else xs[rs]
        grads = self.grads[a:a + K] if run else self.grads[:K]
        lrs = [it[3] for it in items]
        lr = lrs[0] if lrs.count(lrs[0]) == K else np.array(lrs, dtype=xs.dtype)[:, None]   # as `g *= lr` casts
        v = None
        if vs is not None:                        # EAMSGD: the gradient at the look-ahead point
            v = vs[a:a + K] if run else vs[rs]
            look_ahead(params, v, self.delta)
        got = self.model.loss_and_grad_stacked(params, X, y, grads)
        if v is not None:
            eamsgd_descent(params, v, grads, lr, self.weight_decay, decay=self.work[:K])
            if not run:
                vs[rs] = v
        elif self.plain:
            sgd_descent(params, grads, lr, self.weight_decay, work=self.work[:K],
                        decay=self.decay[:K] if self.decay is not None else None)
        else:                                     # each worker's own rule (and its state), on its row
            for k, r in enumerate(rs):
                self.algos[r].opt.step(xs[r], grads[k], lrs[k])
        if not run and (v is not None or self.plain):
            xs[rs] = params
        losses = self.losses
        for it, loss in zip(items, got.tolist()):
            losses[it[1]] = loss


class _PushMaths(_Log):
    """async_sgd / async_msgd: the parameter server's core (its update rule and state),
    each worker's parameters (its last reply) and gradient."""

    def __init__(self, core: Any, slices: list[tuple[int, int]], model: Any, ctx0: Any):
        super().__init__(core, model, ctx0, slices)
        n = core.x.shape[0]
        self.params = np.empty((self.P, n), core.x.dtype)   # each worker's: its last reply
        self.grads = np.empty((self.P, n), core.x.dtype)
        # a layer-wise rule reads norms of the gradient: hand it a separate array, as a worker's own
        self.copy_grad = core.opt.layerwise_chunks
        # grad_clip: each worker clips what it pushes (`AsyncSGD`), on an array of its own, counted
        self.max_norm = ctx0.config.grad_clip
        self.clip_state = np.zeros((self.P, 2), np.int64) if self.max_norm else None
        self.clip_norm = np.zeros((self.P, 2)) if self.max_norm else None
        self.clipped = np.empty(n, core.x.dtype) if self.max_norm else None

    def into(self, r: int, params: np.ndarray) -> None:
        self.params[r] = params

    def apply(self, r: int, lr: float) -> None:
        """The push: the server's update from worker r's gradient, its reply into r's row."""
        g = self.grads[r]
        if self.max_norm:
            g = clip_gradient(np, g.copy(), self.max_norm, self.clip_state[r], self.clip_norm[r], self.clipped)
        self.core.apply_push(g.copy() if self.copy_grad else g, lr, self.params[r])

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
        spec = setup.spec
        needs = spec.needs
        self.sched = Scheduler()                  # the virtual clock's, driving the workers' tasks
        # the role's own core: its counts (versions, turns, retirements) as the replay goes, its
        # maths (x, the rule's state) as the log runs behind it
        self.core = core = make_core(needs.server, needs.options(setup.config, setup.model), setup.params0, P)
        self.server = SimServerState(core, costs, self.sched)   # its queue, turns and waits
        self.push = needs.server == "parameter_server"   # a gradient pushed every step; else an exchange
        cls = spec.cls
        self.eval_name = cls.eval_name
        if self.push:                             # AsyncSGD's own set-up pulls from the server: not built
            self.slices = [ctx.my_slice() for ctx in ctxs]
            self.maths: Any = _PushMaths(core, self.slices, model, ctx0)
            self.summary: dict = {}
            self.tau, self.turns = 1, False
            self.sent = core.x.nbytes             # the gradient pushed
            op, args = core.OPS["push"], (core.x, 0.0, 0)
        else:
            algos = [cls(ctx) for ctx in ctxs]
            self.slices = [(a.lo, a.hi) for a in algos]
            self.maths = _ElasticMaths(core, algos, model, ctx0)
            self.summary, self.tau, self.turns = algos[0].summary, algos[0].tau, cls.turns
            self.sent = algos[0].params.nbytes   # x_i to the centre's server
            op, args = core.OPS["elastic"], (core.x, algos[0].alpha)
        # what each request costs, from the role's table (as the per-worker front-end charges it)
        self.x_in, out, self.x_service = self.server.charges(op, *args)
        self.x_out = out()
        self.read_in, out, self.read_service = self.server.charges(core.OPS["final"])
        self.read_out = out()
        self.costs = costs
        self.plan, self.evaluator = ctx0.plan, ctx0.evaluator
        self.tasks: list[Task] = []
        self.rows: list[tuple] = []            # logged step records, waiting for their losses
        self.evals: list[tuple] = []           # rank 0's logged evaluations (step, epoch, now, read id)
        self.row_count = [0] * P               # records made (sent or not) per worker
        self.eval_count = 0
        self.results: list[dict | None] = [None] * P
        self.final_read: int | None = None
        self.left = [False] * P
        self.lrs: dict[int, float] = {}
        self.out = StepOut()                   # each record's outcome, as the contract reads it
        # each worker's answers to "stop?" at the top of its steps, so far: a replay of a divergence
        # gives the same answers where this pass asked (a stop pressed meanwhile stays where it was
        # seen), and asks the control beyond; its own divergence's stop counts at once
        self.prior = asked
        self.asked: list[list[bool]] = [[] for _ in range(P)]
        self.diverged = False

    # ---------------------------------------------------------------- the driver
    def run(self, proc: Any) -> None:
        sched = self.sched
        self.tasks = [sched.spawn_task(partial(self._worker, r), f"worker {r}") for r in range(self.P)]
        chunk = max(CHUNK_ROWS, 4 * self.P)       # a few steps of every worker: passes of all of them

        def between() -> None:
            if len(self.rows) >= chunk:
                self._chunk()
                proc.sleep_until(max(proc.t, max(w.t for w in self.tasks)))   # the driver's turn: a cancel lands here
        sched.between = between
        sched.run()
        for exc in sched.errors.values():
            if not isinstance(exc, WorkerLost):   # WorkerLost: thrown into a worker nobody would wake
                raise exc
        stuck = [r for r, res in enumerate(self.results) if res is None]
        if stuck:
            raise RuntimeError(f"server lockstep: worker(s) {stuck} never ended (a bug)")
        self._chunk()
        self.lock.t[:] = [w.t for w in self.tasks]

    # ---------------------------------------------------------------- the server's counts
    def _exchange(self, r: int) -> None:
        """ParameterServer.exchange's count now, its maths logged."""
        self.maths.server(r)
        self.core.count_exchange(r if self.turns else None)

    def _push(self, r: int, lr: float, version: int) -> tuple[int, int]:
        """ParameterServer.push's count now (new version, staleness), its maths logged."""
        self.maths.server(r, lr)
        return self.core.count_push(version)

    def _leave(self, w: Task, r: int) -> None:
        """EndsOnServer.leave: the retire notice, at once."""
        if not self.left[r]:
            self.left[r] = True
            self.core.retire(r)
            self.server.changed(w.t)

    def _read(self, w: Task, final: bool):
        """A read of the server's parameters (the centre, a pull, the final ones): its read id."""
        return (yield from self.server.serve(w, self.read_in, self.read_out, self.read_service, self.maths.read,
                                             self.core.all_retired if final else None))

    # ---------------------------------------------------------------- a worker's loop (run_loop)
    def _worker(self, r: int, w: Task):
        """run_loop with EASGD's step (ElasticWorker.step) or async_sgd's (AsyncSGD.step):
        its clock and its requests, the maths logged."""
        ctx, plan, maths, core = self.ctxs[r], self.plan, self.maths, self.core
        lo, hi = self.slices[r]
        m = hi - lo
        serve, costs, push, lrs = self.server.serve, self.costs, self.push, self.lrs
        heap, seq = self.sched.heap, self.sched.seq          # the scheduler's own queue
        tau, total = self.tau, plan.total_steps
        fixed = None if costs.jitter else costs.compute(r, m)   # without jitter a rank's compute is one number
        exchange = partial(self._exchange, r)
        ready, turn = (partial(core.my_turn, r), r) if self.turns else (None, None)
        version = 0
        if push:                                  # AsyncSGD.__init__: the first pull (version, parameters)
            rid, version = yield from serve(w, self.read_in, self.read_out, self.read_service,
                                            lambda: (maths.read(), core.version))
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
            if heap and heap[0][0] < w.t:        # VProc.now: yield while an event is due earlier
                heappush(heap, (w.t, next(seq), w))
                yield
            t1 = w.t
            comm_s, sent, staleness = 0.0, 0.0, 0.0
            if push:
                version, stale = yield from serve(w, self.x_in, self.x_out, self.x_service,
                                                  partial(self._push, r, lr, version))
                staleness = float(stale)
                comm_s, sent = w.t - t1, self.sent
            elif (step + 1) % tau == 0:
                yield from serve(w, self.x_in, self.x_out, self.x_service, exchange, ready, turn)
                comm_s, sent = w.t - t1, self.sent
            if self.eager:
                maths.now()
            if step + 1 == total:
                self._leave(w, r)
            ended = self._row(r, (step, w.t, cid, lr, m, t1 - t0, comm_s, staleness, sent))
            if ended is not None:                 # eager: its loss was NaN/inf (the contract told everyone)
                status = ended
                self.diverged = True
                break
            if r == 0 and self.evaluator is not None and plan.is_eval_step(step):
                rid = yield from self._read(w, self.left[r])
                self._eval((step, plan.epoch(step + 1), w.t - t_start, rid))
        self._leave(w, r)                         # finish: EndsOnServer.leave, then rank 0's result
        if r == 0:
            self.final_read = yield from self._read(w, True)
        self.results[r] = {"status": status, "last_step": step}

    def _row(self, r: int, row: tuple) -> str | None:
        """Log worker r's step record; eager, the record's end of the loop, if any."""
        self.row_count[r] += 1
        if self.row_count[r] > self.sent_rows[r]:
            self.rows.append((r, row))
        if not self.eager:
            return None
        self.lock.t[r] = row[1]                   # the worker's clock, as its events read it
        return self._chunk()

    def _eval(self, ev: tuple) -> None:
        self.eval_count += 1
        if self.eval_count > self.sent_evals:
            self.evals.append(ev)
        if self.eager:
            self._chunk()

    # ---------------------------------------------------------------- the maths, and the records
    def _chunk(self) -> str | None:
        """Run the logged maths; then each logged record, with its loss, through the loop's
        contract, and the logged evaluations. Speculative: a non-finite loss throws the
        chunk away (`_Diverged`); eager, it ends its worker (the status returned)."""
        maths = self.maths
        maths.run()
        rows, self.rows = self.rows, []
        losses = maths.losses
        if not self.eager and not all(math.isfinite(losses[row[2]]) for _, row in rows):
            raise _Diverged
        ctxs, out, ended = self.ctxs, self.out, None
        for r, (step, t, cid, lr, m, comp, comm, staleness, sent) in rows:
            out.loss, out.lr, out.samples, out.compute_s, out.comm_s = losses[cid], lr, m, comp, comm
            out.staleness, out.bytes_sent = staleness, sent
            ended = close_step(ctxs[r], step, out, False, None, now=t)
            self.sent_rows[r] += 1
        evals, self.evals = self.evals, []
        ctx0 = ctxs[0]
        for step, epoch, now, rid in evals:
            params = maths.snap.pop(rid)
            try:
                scores = self.evaluator(params)
            except EvaluationError as exc:   # the snapshot had run step + 1 steps: kept (`kept_on_failure`)
                exc.steps = step + 1
                raise
            ctx0.evaluated(self.eval_name, step, epoch, now, scores, params)
            self.sent_evals += 1
        return ended


class ServerLockstep(Lockstep):
    """The server algorithms' workers in one loop (see the module docstring)."""

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
        summary = dict(replay.summary)
        if replay.push and maths.max_norm:   # rank 0's pushes, as its worker counts them (an elastic run
            #                                  that clips is not replayed here: `lockstep_refusal`)
            summary.update(clip_summary(maths.max_norm, maths.clip_state[0], maths.clip_norm[0],
                                        self.setup.spec.cls.clip_counted))
        results = []
        for r, ctx in enumerate(ctxs):
            res = replay.results[r] or {}
            params_out = maths.snap.pop(replay.final_read) if r == 0 and replay.final_read is not None else None
            ctx.flush(done=True)
            results.append(ctx.loop_result(res.get("status", "failed"), params_out, res.get("last_step", -1),
                                           summary if r == 0 else {}))
        return results
