"""The simulator's fast paths for identical replicas and for one shared buffer: every
virtual worker's step computed together, in one greenlet, with the family's own maths
on stacks of rows. An algorithm's declaration names its fast path (`AlgorithmSpec.fast_path`):
"replicas" (sync_sgd: `Lockstep`), "shared" (hogwild_sgd: `HogwildLockstep`, whose own
docstring says how it replays the workers' writes), "server" (the parameter server and
elastic-centre algorithms: `server.ServerLockstep`, built on `Lockstep`'s set-up of the
workers' contexts); `SimTransport` picks the driver (`sim.FAST_DRIVERS`), and
`lockstep_refusal` says when a run cannot take it.

A sync_sgd replica's step is the same on every rank but for its slice of the global batch
and its clock: each rank computes `loss_and_grad` on its slice with the parameters every
rank holds, scales its gradient by its share, the allreduce sums the buffers in rank order,
and every rank applies the same update to the same parameters. The per-worker path
(`SimTransport` spawning one greenlet per rank, `ComputePool` batching the maths) runs
that as P loops of Python: at 64 workers the loops, not the maths, were ~70% of a
simulated step, and at 1024 a step took 7x sgd on the same global batch.

Here one loop does, per step, for all P ranks at once:

* the maths: one `loss_and_grad_stacked` over the global batch cut into the P slices
  (one per slice size where the cut is uneven, as the pool groups them), with the shared
  parameters (bitwise what the pool computes for the same step: the stacked pass is
  bitwise the plain calls, `tests/test_models.py`), the slices' gradients weighed by their
  shares (`sync.weigh`) and summed in rank order (`roles.sum_in_rank_order`, as the
  collective sums the buffers);
* the tail every worker packs after its gradient (`SyncTail`): the weighted losses summed
  in float32 in rank order, the stop flag, each rank's busy time rounded to the buffer's
  float32 as packing does, and from them each rank's comm and wait (`base.comm_and_wait`);
* each rank's clock as the virtual clock moves it (compute charged by `SimCosts.compute`
  per rank, jitter draws included; the allreduce done `allreduce_s` after the last
  arrival);
* the outcome every rank settles the same way (`base.settle`), then one update of the
  shared parameters by rank 0's replica's rule (every replica's would be the same);
* each rank's step through the loop's contract (`base.close_step`: its row into its own
  `WorkerContext`, whose live batches leave as from its loop; the stop and divergence
  events), rank 0 evaluating for all (every rank's share of the sets, summed in rank
  order, as `Algorithm.evaluate` does with `evaluates="all"`).

So the run is bitwise the per-worker one: steps, evaluations, parameters, events
(`tests/test_sim_lockstep.py` checks it against `SimTransport(lockstep=False)` on
configurations with jitter, mixed devices, momentum, adamw, evaluations, divergence and a
stop, slices of unequal size). Configurations it does not cover run per worker
(`lockstep_refusal` says why): algorithms without a fast path, compression, speed-based
shares, models without a stacked pass (the CNN), fault injection, emulated latency; for
hogwild_sgd also jitter, slices of unequal size and workers of different speeds.
"""
from __future__ import annotations

import traceback
from dataclasses import replace
from typing import Any

import numpy as np

from ..algorithms.base import StepOut, close_step, comm_and_wait, float_errors, settle
from ..algorithms.hogwild import HogwildSGD, hogwild_write
from ..algorithms.sync import SyncSGD, weigh
from ..comm.base import WorkerLost
from ..comm.roles import sum_in_rank_order
from ..config.registry import tail_length
from ..data import _epoch_order, steps_per_epoch
from ..execution.transports.base import LocalArray
from ..maths.backend import to_numpy
from ..maths.optim import RULES
from ..results.records import StepLog
from ..util.machine import LoopUsage


def lockstep_refusal(setup: Any, costs: Any = None) -> str | None:
    """Why `setup`'s run cannot take its algorithm's fast path (None: it can). The
    "shared" path (hogwild_sgd) replays its workers' order of writes, which holds while
    every worker's step takes the same virtual time: `costs` (the run's `SimCosts`) tells."""
    c, spec = setup.config, setup.spec
    if spec.fast_path is None:
        return f"{c.algorithm}: its declaration names no fast path"
    if c.compression != "none":
        return "compression keeps per-worker state"
    if c.split != "equal" or setup.extra.get("shares"):
        return "speed-based shares"
    if c.failures:
        return "fault injection"
    if setup.extra.get("elastic") is not None:
        return "elastic membership (each worker keeps its state at every boundary, in its own loop)"
    if setup.resume is not None or (setup.extra.get("checkpoint") or {}).get("every"):
        return "checkpoints (each worker's state is taken and restored by its own loop)"
    if c.latency_ms or c.bandwidth_gbps:
        return "emulated latency"
    size = setup.size
    if setup.groups != [list(range(size))]:
        return "more than one rank group"
    if not hasattr(setup.model, "loss_and_grad_stacked"):
        return "the model has no stacked pass"
    if spec.fast_path == "shared":
        if c.jitter:
            return "jitter: the workers' steps drift apart"
        if c.batch_size % size:
            return "slices of unequal size"
        if costs is None or len({costs.compute(r, c.batch_size // size) for r in range(size)}) > 1:
            return "workers of different speeds"
    normed = [name for name, rule in RULES.items() if rule.norms]
    if spec.fast_path == "server" and spec.needs.server == "elastic_centre" and c.optimizer in normed:
        # the centre's workers step their own x_i with the configured rule, in `sim.server` on rows
        # of one array: a rule that takes layer norms is not promised the same bits on a row of a
        # stacked array as on a separate one (a parameter server's rule runs on its own arrays)
        return f"{' / '.join(normed)}: layer norms computed per worker"
    if spec.fast_path == "server" and c.early_stop is not None:
        # the replay runs the maths behind the timing: a stop decided from a test loss would come late
        return "early_stop: the replay computes the test loss behind the timing it decides"
    if spec.fast_path == "server" and spec.needs.server == "elastic_centre" and c.grad_clip:
        return "grad_clip: each worker's gradient norm computed on its own"
    return None


class Lockstep:
    """One greenlet running every rank of a sync_sgd run (see the module docstring)."""

    def __init__(self, transport: Any, setup: Any, sink: Any, costs: Any):
        self.tr, self.setup, self.sink, self.costs = transport, setup, sink, costs
        self.size = setup.size
        self.t = np.zeros(self.size)          # each rank's virtual clock

    def body(self, proc: Any) -> None:
        from ..execution.context import build_context
        tr, setup, P = self.tr, self.setup, self.size
        config = setup.config
        ctxs, raw = [], None
        usage = LoopUsage()
        numerics: dict[str, int] = {}
        try:
            extra = dict(setup.extra, group=0, group_ranks=setup.groups[0])
            ctx0 = build_context(config, 0, P, "cpu", control=tr.control, emit=self.sink, t0_wall=setup.t0_wall,
                                 extra=extra, start_barrier=lambda: [], timer=lambda: float(self.t[0]))
            raw = ctx0.model
            # rank r's context for its records (its log, live batches, clock); the others share rank 0's
            # model and data and evaluate nothing themselves (the lockstep scores their shares)
            ctxs = [ctx0] + [replace(ctx0, rank=r, evaluator=None, extra=dict(ctx0.extra),
                                     timer=lambda r=r: float(self.t[r]),
                                     steps=StepLog(capacity=ctx0.steps.data.shape[0]), _pending=[], _batches={})
                             for r in range(1, P)]
            for r, ctx in enumerate(ctxs):
                tr._adapt(ctx, proc, self.costs, r, None)   # the paced live batches (its model is not used)
            self.ctxs = ctxs
            with float_errors(numerics, ctx0.steps):   # every worker's maths, at rank 0's step
                results = self._run(proc, ctxs, raw)
        except WorkerLost as exc:               # the run was cancelled
            results = []
            for ctx in ctxs:
                ctx.event("aborted", str(exc))
                ctx.flush(done=True)
                results.append({"status": "failed", "params": None, "error": str(exc),
                                "steps": ctx.step_columns(), "started": ctx.started_wall})
        except Exception as exc:
            results = []
            for ctx in ctxs:
                ctx.event("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
                ctx.flush(done=True)
                results.append({"status": "failed", "params": None, "error": f"{type(exc).__name__}: {exc}",
                                "steps": ctx.step_columns(), **ctx.kept_on_failure(exc)})   # (rank 0's model)
            for _ in range(len(ctxs), P):
                results.append({"status": "failed", "params": None, "error": f"{type(exc).__name__}: {exc}"})
        tr.makespan = max(tr.makespan, float(self.t.max()), proc.t)
        for r, (ctx, res) in enumerate(zip(ctxs + [None] * (P - len(ctxs)), results)):
            if ctx is not None:
                booked = res.get("steps") or {}
                compute = ctx.steps.compute_total + (float(np.sum(booked["compute_s"])) if "compute_s" in booked
                                                     else 0.0)
                res["usage"] = usage.stop(compute, ctx.kind, r)
            if r == 0 and numerics:
                res["numerics"] = dict(numerics)
            tr.reports.returned(r, res)

    def _run(self, proc: Any, ctxs: list, model: Any) -> list[dict]:
        costs, P = self.costs, self.size
        ctx0 = ctxs[0]
        algo = SyncSGD(ctx0)                   # rank 0's replica: its parameters and update are everyone's
        params, n, plan = algo.params, algo.n, ctx0.plan
        B = plan.batch_size
        slices = algo.balancer.slices()        # split_batch: contiguous, in rank order
        sizes = [hi - lo for lo, hi in slices]
        ws = [m / B for m in sizes]            # each rank's share of the batch
        runs = []                              # (first rank, past the last, rows): ranks of one slice size
        for r, m in enumerate(sizes):
            if runs and runs[-1][2] == m:
                runs[-1][1] = r + 1
            else:
                runs.append([r, r + 1, m])
        X_all, y_all = ctx0.X, ctx0.y
        N, F = X_all.shape[0], X_all.shape[1]
        spe = steps_per_epoch(N, B)
        seed = ctx0.config.seed
        grads = np.empty((P, n), params.dtype)
        total = np.empty(n, params.dtype)
        shares = np.array(ws, dtype=params.dtype)[:, None] if P > 1 else 1.0   # as `grad *= w` casts w
        f32 = algo.buf.dtype
        reduce_s = costs.allreduce_s(P, n + tail_length(P))
        fixed = None if costs.jitter else np.array([costs.compute(r, m) for r, m in enumerate(sizes)])
        evaluator, eval_reduce_s = ctx0.evaluator, [None]
        t = self.t
        t_free: np.ndarray | None = None       # when each rank's last exchange ended (None: step 0, since t_start)
        for ctx in ctxs:
            ctx.start()
        t_start = 0.0                          # every rank's ctx.t_start (its clock read at 0)

        def evaluate(step: int) -> None:
            """`Algorithm.evaluate` with evaluates="all": every rank's share of the sets, summed
            in rank order as the collective sums them (one rank: the whole sets)."""
            if P > 1:
                parts = np.stack([evaluator.partial(params, r, P).astype(np.float32) for r in range(P)])
                if eval_reduce_s[0] is None:
                    eval_reduce_s[0] = costs.allreduce_s(P, parts.shape[1])
                scores = evaluator.from_partials(np.add.accumulate(parts, axis=0)[-1].astype(np.float64))
                t[:] = t.max() + eval_reduce_s[0]
            else:
                scores = evaluator(params)
            ctx0.evaluated(algo.eval_name, step, plan.epoch(step + 1), ctx0.now(), scores, params)

        status, step = "completed", -1
        for step in range(plan.total_steps):
            lr = plan.schedule(step)
            t0 = t.copy()
            charge = fixed if fixed is not None else np.array([costs.compute(r, m) for r, m in enumerate(sizes)])
            t[:] = t0 + charge                                  # proc.charge + proc.now, per rank
            compute_s = t - t0
            epoch, k = divmod(step, spe)
            idx = _epoch_order(N, seed, epoch)[k * B:k * B + B]
            losses = []
            for r0, r1, m in runs:                              # the pool's groups: one slice shape each
                rows = idx[slices[r0][0]:slices[r1 - 1][1]]
                X = X_all.take(rows, axis=0).reshape(r1 - r0, m, F)   # as ctx.batch gathers
                if X.dtype != params.dtype:
                    X = X.astype(params.dtype)
                losses += model.loss_and_grad_stacked(params, X, y_all[rows].reshape(r1 - r0, m, *y_all.shape[1:]),
                                                      grads[r0:r1]).tolist()
            weigh(grads, shares)                                # g_i *= n_i / B
            sum_in_rank_order(grads, total)                     # the allreduce's sum
            # the tail, as packed (float32) and summed in rank order
            loss_w = np.array([v * w for v, w in zip(losses, ws)]).astype(f32)
            loss = float(np.add.accumulate(loss_w)[-1])
            stop = ctx0.stop_requested()
            busy = t - (t_free if t_free is not None else t_start)
            slowest = float(busy.astype(f32).max())
            done = float(t.max()) + reduce_s
            comm_total = (done - t).tolist()
            busy_s = busy.tolist()
            t[:] = done
            out = StepOut(lr=lr, bytes_sent=algo.bytes_sent)
            if not settle(out, loss, stop):                    # every rank decides the same
                for ctx in ctxs:
                    status = close_step(ctx, step, out, True, None) or status
                break
            algo.opt.step(params, total, lr)                    # x -= lr g, once for every replica
            t_free = t.copy()
            compute_s = compute_s + (t_free - t)                # the update is compute too (0 s here)
            ended = None
            for r, (ctx, m, c_s) in enumerate(zip(ctxs, sizes, compute_s.tolist())):
                out.samples, out.compute_s = m, c_s
                out.comm_s, out.wait_s = comm_and_wait(comm_total[r], slowest, busy_s[r])
                ended = close_step(ctx, step, out, True, evaluate if r == 0 and evaluator is not None else None,
                                   now=done) or ended
            if ended is not None:                               # a stop completes its step, then ends the run
                status = ended
                break
            proc.sleep_until(float(t.max()))                    # the driver's turn (a cancel lands here)
        results = []
        for r, ctx in enumerate(ctxs):
            params_out = to_numpy(algo.eval_params()) if r == 0 else None
            ctx.flush(done=True)
            results.append(ctx.loop_result(status, params_out, step, algo.ended_summary() if r == 0 else {}))
        return results


class HogwildLockstep(Lockstep):
    """hogwild_sgd's workers in one loop: their order of reads and writes, replayed.

    Per worker, a Hogwild step reads the shared buffer when its compute starts (the pool
    copies it then), and writes `x -= lr g` when its clock reaches the compute's end.
    With every step taking the same virtual time C (no jitter, one speed, equal slices:
    `lockstep_refusal`), every worker's clock is the same float at every step's end, so the
    order in which the driver resumes them there is its heap's order: the order in which
    they went to sleep. A worker writes, records its step, reads the buffer and starts its
    next compute, then sleeps; except the last one of an instant, which finds nothing due
    before its compute's end, so the pool computes at once and it goes straight on to
    write first at the next instant. Step s's writers therefore go in the order of step
    s-1's, its last one moved to the front: ranks P-1, 0, ..., P-2 at step 0, and so on
    (with stops and divergence, only the workers still running, by the same rule).

    So one loop does, per instant: the stacked pass over every running worker's read of
    the buffer (its own parameters, stacked) and its slice; then, worker by worker in that
    order, the write, the record, rank 0's evaluation of the buffer, the check for a stop
    and the next read. Bitwise the per-worker run (`tests/test_sim_lockstep.py`)."""

    def _run(self, proc: Any, ctxs: list, model: Any) -> list[dict]:
        costs, P, setup = self.costs, self.size, self.setup
        ctx0 = ctxs[0]
        config, plan = ctx0.config, ctx0.plan
        B = plan.batch_size
        m = B // P
        shared = np.array(setup.params0, copy=True)   # the shared array (SimTransport's LocalArray)
        ctx0.shared["params"] = LocalArray(shared)
        algo0 = HogwildSGD(ctx0)                       # rank 0's worker: it evaluates and returns the buffer
        n = shared.shape[0]
        C = costs.compute(0, m)                        # every worker's step (lockstep_refusal checked)
        reads = np.empty((P, n), shared.dtype)         # each worker's read of the buffer
        grads = np.empty((P, n), shared.dtype)
        losses = [0.0] * P
        X_all, y_all = ctx0.X, ctx0.y
        N, F = X_all.shape[0], X_all.shape[1]
        spe = steps_per_epoch(N, B)
        t = self.t
        t0 = np.zeros(P)                               # each worker's clock when its step began
        lrs = [0.0] * P
        results: list[dict | None] = [None] * P
        out = StepOut(samples=m, bytes_sent=0.0)      # shared memory on one host: nothing crosses a network

        def end(r: int, status: str, last: int) -> None:
            ctx = ctxs[r]
            params_out = algo0.finish() if r == 0 else None      # the buffer as rank 0 ends
            ctx.flush(done=True)
            results[r] = ctx.loop_result(status, params_out, last, {})

        def begin(r: int, step: int) -> bool:
            """run_loop's top of `step` and HogwildSGD.step up to its compute: True when it computes."""
            if step >= plan.total_steps:
                end(r, "completed", step - 1)
                return False
            if ctxs[r].stop_requested():
                end(r, "stopped", step)
                return False
            lrs[r] = plan.schedule(step)
            t0[r] = t[r]
            reads[r] = shared                          # the read, as the pool's copy of it
            t[r] = t[r] + C                            # proc.charge(C); proc.now()
            return True

        for ctx in ctxs:
            ctx.start()
        running = [r for r in range(P) if begin(r, 0)]
        step, straight_on = 0, bool(running) and running[-1] == P - 1
        while running:
            epoch, k = divmod(step, spe)
            idx = _epoch_order(N, config.seed, epoch)[k * B:k * B + B]
            X = X_all.take(idx, axis=0).reshape(P, m, F)          # as ctx.batch gathers each slice
            if X.dtype != shared.dtype:
                X = X.astype(shared.dtype)
            y = y_all[idx].reshape(P, m, *y_all.shape[1:])     # a language model's y: (N, T)
            if len(running) == P:
                got = model.loss_and_grad_stacked(reads, X, y, grads)
                for r in range(P):
                    losses[r] = float(got[r])
            else:                                                  # the last steps of a stopping run
                sel = sorted(running)
                part = np.empty((len(sel), n), shared.dtype)
                got = model.loss_and_grad_stacked(reads[sel], X[sel], y[sel], part)
                for i, r in enumerate(sel):
                    grads[r] = part[i]
                    losses[r] = float(got[i])
            order = [running[-1], *running[:-1]] if straight_on else running
            proc.sleep_until(float(t[order[0]]))                  # the driver's turn (a cancel lands here)
            nxt: list[int] = []
            for r in order:
                hogwild_write(shared, grads[r], lrs[r])
                t1 = float(t[r])
                out.loss, out.lr, out.compute_s = losses[r], lrs[r], t1 - float(t0[r])
                ended = close_step(ctxs[r], step, out, False, algo0.evaluate if r == 0 else None, now=t1)
                if ended is not None:
                    end(r, ended, step)
                elif begin(r, step + 1):
                    nxt.append(r)
            # the last to run at this instant found nothing due before its compute's end: it went
            # straight on, and writes first at the next one
            straight_on = bool(nxt) and nxt[-1] == order[-1]
            running, step = nxt, step + 1
        missing = [r for r, res in enumerate(results) if res is None]
        if missing:                                    # every worker ends once above: a bug if not
            raise RuntimeError(f"hogwild lockstep: worker(s) {missing} never ended")
        return [res for res in results if res is not None]
