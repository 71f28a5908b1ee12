"""The simulator's lockstep path for the EASGD server algorithms (easgd's round-robin
centre, async_easgd's first-come-first-served one): every virtual worker in one loop,
its timing replayed without greenlets and its maths computed in stacked passes over
the workers, bitwise the per-worker run.

Two facts make it possible. First, nothing in an EASGD worker's timing depends on its
numbers: the virtual clock moves by the compute charges (`SimCosts.compute`, jitter
draws included, per rank in the same order) and by the server's queue, which sees only
message sizes and the round-robin turn. The one exception is a non-finite loss, which
ends the worker and asks every other to stop. Second, the maths of each worker depends
on the others' only through the order in which the server applies the exchanges.

So the replay (`_Replay`) runs each worker's loop as a generator over one heap of
(virtual time, sequence, event), the same events in the same order as the scheduler's
greenlets (`sim.clock.Scheduler`, `SimServerState.serve`, `_changed`, the turn
re-checks), and logs what each worker computes and when the server applies each
exchange and each read of the centre. The maths (`_Maths`) then runs the log in an order
of its own that keeps every dependency: a worker's local steps in its order, the
exchanges in the server's order, each between its worker's steps before and after it;
every local step whose turn has come, across the workers, in one stacked
`loss_and_grad_stacked` (at 64 workers, where the per-worker path's compute pool batches
the ~7 computes whose virtual times overlap, this batches all 64). The losses then fill
the step records. The replay assumes every loss is finite: the log is run in chunks, and
a chunk whose maths finds a non-finite loss is thrown away, and the run replayed from the
start with the maths done at each event (the per-worker order, so the divergence, the
stop it asks for and the steps it ends are the per-worker run's), leaving out the
records already sent.

Bitwise the per-worker run (`tests/test_sim_lockstep.py` checks steps, evaluations,
parameters, events and the makespan against `SimTransport(lockstep=False)`, with jitter,
mixed devices, uneven slices, evaluations, divergence and a stop). Not covered (they run
per worker, `lockstep_refusal` says why): async_measgd (its look-ahead step), lars and
lamb (layer norms over a row of a stacked array are not promised to be bitwise those of
a separate array), fault injection, emulated latency, models without a stacked pass.
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
from .sim_lockstep import Lockstep

ELASTIC_ALGORITHMS = ("easgd", "async_easgd")
CHUNK_ROWS = 512           # step records per chunk of the log (and per live batch at most)


def elastic_refusal(setup: Any) -> str | None:
    """Why an EASGD run cannot take the elastic lockstep (None: it can); the checks common
    to every lockstep path are `sim_lockstep.lockstep_refusal`'s."""
    if setup.config.optimizer in ("lars", "lamb"):
        return "lars / lamb: layer norms computed per worker"
    return None


class _W:
    """One worker of the replay: its clock, its loop (a generator), and whether it waits."""

    __slots__ = ("r", "t", "gen", "blocked", "done")

    def __init__(self, r: int):
        self.r, self.t, self.gen, self.blocked, self.done = r, 0.0, None, False, False


class _Maths:
    """Every worker's x_i (rows of one array), the centre, and the log of what to compute:
    per worker its ops in order, the exchanges in the server's order, the reads of the
    centre by how many exchanges precede them."""

    def __init__(self, lock: ElasticLockstep, algos: list, model: Any, ctx0: Any):
        self.algos, self.model = algos, model
        self.P = len(algos)
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
        self.X_all, self.y_all = ctx0.X, ctx0.y
        self.N, self.B, self.seed = ctx0.X.shape[0], ctx0.plan.batch_size, ctx0.config.seed
        self.spe = steps_per_epoch(self.N, self.B)
        self.ops: list[deque] = [deque() for _ in range(self.P)]
        self.xq: deque[int] = deque()          # the exchanges' ranks, in the server's order
        self.reads: deque[tuple[int, int]] = deque()   # (exchanges before it, read id)
        self.snap: dict[int, np.ndarray] = {}
        self.applied = 0                       # exchanges applied to the centre
        self.passes = self.computed = 0        # stacked passes, and the local steps they computed
        self.losses: list[float] = []          # by compute id

    # -------------------------------------------------------------- logging (the replay)
    def compute(self, r: int, step: int, lr: float) -> int:
        cid = len(self.losses)
        self.losses.append(math.nan)
        self.ops[r].append((cid, step, lr))
        return cid

    def exchange(self, r: int) -> None:
        self.ops[r].append(None)
        self.xq.append(r)

    def read(self, exchanges: int) -> int:
        rid = len(self.snap) + len(self.reads)
        self.reads.append((exchanges, rid))
        return rid

    # -------------------------------------------------------------- running the log
    def _rows(self, r: int, step: int) -> np.ndarray:
        a = self.algos[r]
        epoch, k = divmod(step, self.spe)
        return _epoch_order(self.N, self.seed, epoch)[k * self.B + a.lo:k * self.B + a.hi]

    def _snapshots(self) -> None:
        reads = self.reads
        while reads and reads[0][0] <= self.applied:
            self.snap[reads.popleft()[1]] = self.centre.copy()

    def _apply(self, r: int) -> None:
        """The server's `elastic` and the worker's `x_i -= d`, as they compute them."""
        x = self.xs[r]
        d = self.alpha * (x - self.centre)
        self.centre += d
        x -= d
        self.applied += 1

    def _local(self, heads: list[int]) -> None:
        """One local step of each worker in `heads` (its next op): stacked per slice size."""
        groups: dict[int, list[int]] = {}
        for r in heads:
            a = self.algos[r]
            groups.setdefault(a.hi - a.lo, []).append(r)
        xs, F = self.xs, self.X_all.shape[1]
        for m, rs in groups.items():
            K = len(rs)
            items = [self.ops[r].popleft() for r in rs]
            step = items[0][1]
            whole = K == self.P          # every worker, in rank order: their rows as they lie
            if whole and all(it[1] == step for it in items):     # the slices tile the global batch
                epoch, k = divmod(step, self.spe)
                idx = _epoch_order(self.N, self.seed, epoch)[k * self.B:k * self.B + self.B]
            else:
                idx = np.concatenate([self._rows(r, it[1]) for r, it in zip(rs, items)])
            X = self.X_all.take(idx, axis=0).reshape(K, m, F)
            if X.dtype != xs.dtype:
                X = X.astype(xs.dtype)
            y = self.y_all[idx].reshape(K, m)
            params = xs if whole else xs[rs]
            grads = self.grads if whole else self.grads[:K]
            got = self.model.loss_and_grad_stacked(params, X, y, grads)
            self.passes += 1
            self.computed += K
            lrs = [it[2] for it in items]
            if self.plain and lrs.count(lrs[0]) == K:
                # SGD.step_chunk's `x -= lr g` (momentum is 0 on EASGD's workers), the rows at once:
                # elementwise, so each row's bits are its own update's
                opt0 = self.algos[rs[0]].opt
                g = self.scratch if whole else self.scratch[:K]
                if opt0.weight_decay:
                    h = self.scratch2 if whole else self.scratch2[:K]
                    np.multiply(params, opt0.weight_decay, out=h)
                    np.add(grads, h, out=g)
                    np.multiply(g, lrs[0], out=g)
                else:
                    np.multiply(grads, lrs[0], out=g)
                params -= g
                if not whole:
                    xs[rs] = params
            else:
                for k, r in enumerate(rs):
                    self.algos[r].opt.step(xs[r], grads[k], lrs[k])
            for k, it in enumerate(items):
                self.losses[it[0]] = float(got[k])

    def run(self) -> None:
        """Everything logged so far, exchanges as soon as their turn has come, and the
        local steps of every worker whose next op is one, together."""
        ops, xq = self.ops, self.xq
        self._snapshots()
        while True:
            while xq and ops[xq[0]] and ops[xq[0]][0] is None:
                r = xq.popleft()
                ops[r].popleft()
                self._apply(r)
                self._snapshots()
            heads = [r for r in range(self.P) if ops[r] and ops[r][0] is not None]
            if not heads:
                break
            self._local(heads)
        if xq or any(ops):
            raise RuntimeError("elastic lockstep: the log has ops no order can run (a bug)")

    def now(self) -> None:
        """Eager: run what was just logged (the per-worker order, one op at a time)."""
        self.run()


class _Diverged(Exception):
    """A chunk's maths found a non-finite loss the replay assumed finite."""


class _Replay:
    """One pass of the run's timing (see the module docstring): `eager` computes each
    op as it happens; otherwise the maths runs chunk by chunk behind the replay."""

    def __init__(self, lock: ElasticLockstep, ctxs: list, model: Any, eager: bool, sent_rows: list[int],
                 sent_evals: int):
        self.lock, self.ctxs, self.eager = lock, ctxs, eager
        self.sent_rows, self.sent_evals = sent_rows, sent_evals
        setup, costs = lock.setup, lock.costs
        self.P = P = setup.size
        ctx0 = ctxs[0]
        cls = lock.algorithm_class()
        self.algos = [cls(ctx) for ctx in ctxs]
        self.summary = self.algos[0].summary
        self.rr = lock.setup.config.algorithm == "easgd"       # round-robin turns (async_easgd: first come)
        self.maths = _Maths(lock, self.algos, model, ctx0)
        self.plan, self.tau = ctx0.plan, self.algos[0].tau
        self.evaluator, self.eval_name = ctx0.evaluator, self.algos[0].eval_name
        n = model.n_params
        net = costs.network
        self.alpha, self.beta = net.alpha, net.beta
        # SimServer.bind's sizes and work for the ops the EASGD workers call
        self.x_in = 0 + costs.nbytes(n)
        self.x_out = 0 + costs.nbytes(n)
        self.x_service = costs.host_update(n, 3.0)
        self.read_out = 0 + costs.nbytes(n)
        self.read_service = costs.host_update(None, 1.0)
        self.sent = self.algos[0].params.nbytes
        self.costs = costs
        self.heap: list = []
        self.seq = count()
        # the server's queue (SimServerState) and core (ParameterServer's turn and retirements)
        self.free = 0.0
        self.turns: dict[int, tuple[_W, int]] = {}
        self.waiting: list[_W] = []
        self.changes = 0
        self.last_change = 0.0
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

    # ---------------------------------------------------------------- the driver
    def run(self, proc: Any) -> None:
        heap = self.heap
        for w in self.ws:                      # spawned in rank order at virtual time 0
            w.gen = self._worker(w)
            heappush(heap, (0.0, next(self.seq), w))
        lock = self.lock
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
            if len(self.rows) >= CHUNK_ROWS:
                self._chunk()
                proc.sleep_until(max(proc.t, max(w.t for w in self.ws)))   # the driver's turn: a cancel lands here
        stuck = [w.r for w in self.ws if not w.done]
        if stuck:
            raise RuntimeError(f"elastic lockstep: worker(s) {stuck} never ended (a bug)")
        self._chunk()
        lock.t[:] = [w.t for w in self.ws]

    def _resume(self, w: _W) -> None:
        try:
            next(w.gen)
        except StopIteration:
            w.done = True

    def _sleep(self, w: _W, t: float) -> None:
        heappush(self.heap, (t if t > w.t else w.t, next(self.seq), w))

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

    def _serve(self, w: _W, in_bytes: float, out_bytes: float, service_s: float, kind: str):
        """SimServerState.serve for `kind` "exchange", "centre" or "final" (generator:
        yields where the greenlet would switch)."""
        self._sleep(w, w.t + self.alpha)
        yield
        if kind == "exchange" and self.rr:
            while self.turn != w.r:
                self.turns[w.r] = (w, self.changes)
                w.blocked = True
                yield
        elif kind == "final":
            while not all(self.retired):
                self.waiting.append(w)
                w.blocked = True
                yield
        start = w.t if w.t >= self.free else self.free
        applied = start + in_bytes * self.beta
        self.free = done = applied + service_s + out_bytes * self.beta
        self._sleep(w, applied)
        yield
        if kind == "exchange":
            self.maths.exchange(w.r)
            if self.rr:
                self._advance()
            got = None
        else:
            got = self.maths.read(len(self.maths.xq) + self.maths.applied)
        self._changed(w.t)
        self._sleep(w, done + self.alpha)
        yield
        return got

    # ---------------------------------------------------------------- a worker's loop (run_loop)
    def _worker(self, w: _W):
        r, ctx, plan, maths = w.r, self.ctxs[w.r], self.plan, self.maths
        algo = self.algos[r]
        m = algo.hi - algo.lo
        heap, seq, costs, tau = self.heap, self.seq, self.costs, self.tau
        total = plan.total_steps
        fixed = None if costs.jitter else costs.compute(r, m)   # without jitter a rank's compute is one number
        status, step = "completed", -1
        t_start = 0.0
        for step in range(total):
            if ctx.stop_requested():
                status = "stopped"
                break
            lr = plan.schedule(step)
            t0 = w.t
            cid = maths.compute(r, step, lr)
            if self.eager:
                maths.now()
            w.t = t0 + (fixed if fixed is not None else costs.compute(r, m))      # charge; now()
            if heap and heap[0][0] < w.t:
                heappush(heap, (w.t, next(seq), w))
                yield
            t1 = w.t
            comm_s, sent = 0.0, 0.0
            if (step + 1) % tau == 0:
                yield from self._serve(w, self.x_in, self.x_out, self.x_service, "exchange")
                if self.eager:
                    maths.now()
                comm_s = w.t - t1
                sent = self.sent
            if step + 1 == total:
                self._leave(w)
            self._row(r, (step, w.t - t_start, cid, lr, m, t1 - t0, comm_s, sent))
            if self.eager and not math.isfinite(maths.losses[cid]):
                status = "diverged"
                self.lock.t[r] = w.t
                loss = maths.losses[cid]
                ctx.event("diverged", f"loss became {loss} at step {step} with lr {lr:.6g}")
                if ctx.control is not None:
                    ctx.control.request_stop("diverged")
                break
            if r == 0 and self.evaluator is not None and plan.is_eval_step(step):
                rid = yield from self._serve(w, 0, self.read_out, self.read_service,
                                             "final" if self.left[r] else "centre")
                self._eval((step, plan.epoch(step + 1), w.t - t_start, rid))
        self._leave(w)                            # finish: EndsOnServer.leave, then rank 0's result
        if r == 0:
            self.final_read = yield from self._serve(w, 0, self.read_out, self.read_service, "final")
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
        for r, (step, t, cid, lr, m, comp, comm, sent) in rows:
            ctxs[r].steps.add(step, t, maths.losses[cid], lr, m, comp, comm, 0.0, 0.0, sent)
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


class ElasticLockstep(Lockstep):
    """easgd / async_easgd in one loop (see the module docstring)."""

    def algorithm_class(self) -> type:
        from ...algorithms.registry import specs
        return specs()[self.setup.config.algorithm].cls

    def _run(self, proc: Any, ctxs: list, model: Any) -> list[dict]:
        sent_rows, sent_evals = [0] * self.size, [0]
        eager = False
        for ctx in ctxs:
            ctx.start()
        while True:
            self.t[:] = 0.0
            replay = _Replay(self, ctxs, model, eager, sent_rows, sent_evals[0])
            try:
                replay.run(proc)
                break
            except _Diverged:             # replay from the start, the maths at each event
                sent_rows, sent_evals = replay.sent_rows, [replay.sent_evals]
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
