"""The one worker loop every algorithm runs, and the context it hands them.

An algorithm is a small class with `step(step) -> StepOut`, `eval_params()` and
`finish()`; it talks to its peers only through `ctx.comm` (a collective) and
`ctx.server` (a parameter server / centre variable) and `ctx.shared` (shared-memory
arrays), never through Dask. The loop around it is the same for all: stop requests,
divergence, timing, records, periodic evaluation.

At teaching sizes a step takes ~0.15 ms, so the loop's own bookkeeping must cost
microseconds: a step's record is one row written into a preallocated NumPy buffer
(`StepLog`, grown by doubling), not a dict; a few times a second the rows since the
last batch leave the worker as one packed block of float64 rows and the log forgets them
(the client writes them to the run directory as they come, and bins them for the live
views), so a worker's memory does not grow with the run's length. Clocks
start at the run's first training step: every worker waits at a start barrier, and
`time` 0 is the moment they pass it, so set-up is never booked as compute or waiting.
"""
from __future__ import annotations

import contextlib
import functools
import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..comm.base import StopWait, compressed_sum, gathered_sum
from ..config import RunConfig
from ..config.registry import tail_length
from ..data import _epoch_order, split_batch, steps_per_epoch
from ..maths.backend import synchronize, to_numpy
from ..maths.metrics import EvaluationError
from ..maths.optim import Plan, clip_summary, make_optimizer
from ..results.records import StepLog, eval_record, event_record, pack_rows, row_block

FLUSH_S = 0.25  # live batches leave the worker a few times a second


@functools.lru_cache(maxsize=8)
def _equal_split(batch_size: int, size: int) -> tuple[tuple[int, int], ...]:
    """`split_batch` of `batch_size` rows into `size` equal shares (cached: the simulator's
    workers share one process)."""
    return tuple(split_batch(batch_size, [1.0] * size))


@dataclass(slots=True)
class StepOut:
    """What one step reports; `stop` ends the loop ("stopped" or "diverged")."""

    loss: float = float("nan")
    lr: float = 0.0
    samples: int = 0
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    staleness: float = 0.0
    bytes_sent: float = float("nan")   # bytes this worker sent (`comm.base` counts); NaN: not counted
    stop: str | None = None


@dataclass
class WorkerContext:
    """Everything a worker's algorithm may use; built once per run per worker."""

    rank: int
    size: int
    kind: str                    # "cpu" | "gpu"
    xp: Any                      # numpy or cupy
    config: RunConfig
    plan: Plan
    model: Any
    X: Any                       # training set on this worker's device, (N, F)
    y: Any                       # (N,)
    evaluator: Any = None        # on the ranks that evaluate (rank 0; LTFB: every trainer)
    comm: Any = None             # Comm among the run's workers
    server: Any = None           # Server proxy
    shared: dict[str, Any] = field(default_factory=dict)  # name -> SharedArray
    control: Any = None          # stop/abort requests
    emit: Callable[[dict], None] | None = None   # sends one live batch to the client
    t0_wall: float = 0.0         # when the engine started the loops, wall clock (time.time())
    extra: dict[str, Any] = field(default_factory=dict)   # per-algorithm setup (tournament sets, ...)
    start_barrier: Callable[[], None] | None = None   # every worker of the run passes it together
    timer: Callable[[], float] = time.perf_counter    # every time the loop and the algorithms book reads
    #   this clock: real seconds here; a transport may hand in a virtual clock (the simulator does)
    steps: StepLog = field(default_factory=StepLog)
    t_start: float | None = None       # perf_counter at the first training step: time 0
    started_wall: float | None = None  # the same moment, wall clock (the client aligns its own events)
    resume: dict | None = None         # a resumed run's: {"step", "state", "time", "clock", "t_start", ...}
    time_offset: float = 0.0           # a resumed run's records go on from its checkpoint's time
    checkpoint_every: int | None = None   # steps between this run's checkpoints (`save_state`); None: none
    checkpoint_asked: bool = False     # wall-clock checkpoints: at the step the client asks (`control.checkpoint_at`)
    elastic: bool = False              # an elastic run: keep the state at each boundary, pause when asked
    kept: tuple[int, dict] | None = None   # (step, state before it) at the last boundary (elastic runs)
    # rank 0: (steps run, loss, parameters) at its lowest validation loss (test loss without a validation set);
    # a checkpoint keeps the loss as "best.test_loss" whichever it is (the key older checkpoints have)
    best: tuple[int, float, Any] | None = None
    since_best: int = 0          # rank 0: evaluations since that lowest loss (`early_stop`)
    # rank 0: (steps run, parameters) at its last evaluation: what a run that fails keeps (`kept_on_failure`)
    last_evaluated: tuple[int, Any] | None = None
    early_stopped: dict[str, Any] | None = None   # rank 0: where `early_stop` ended the run
    rows_out: Any = None               # a ring to the client on this host for the step rows (`comm.rowring`);
    #   None: they go with the live batches
    _pending: list[dict] = field(default_factory=list)
    _next_flush: float = 0.0           # when the next live batch leaves (time.perf_counter)
    _wall_timer: bool = False          # `timer` is that wall clock itself (`start`): close_step's reading serves
    _next_eval: int = 0                # no evaluation before this step (`close_step`)
    _stop_held_at: int | None = None   # rank 0: the step whose stop `stop_requested` held back (once a run)
    _batches: dict[tuple[int, int], tuple[Any, Callable]] = field(default_factory=dict)   # `batch`'s kept `batches`

    # ---------------------------------------------------------------- data
    def batch(self, step: int, lo: int, hi: int, batch_size: int | None = None,
              index: Any = None) -> tuple[Any, Any]:
        """Rows lo:hi of global batch `step` (the order depends on seed and epoch only).

        `index` maps batch positions into a subset (LTFB trainers' partitions)."""
        b = batch_size or self.plan.batch_size
        key = (b, id(index))
        kept = self._batches.get(key)
        if kept is None or kept[0] is not index:   # (the index is held: its id is not reused)
            kept = self._batches[key] = (index, self.batches(b, index))
        return kept[1](step, lo, hi)

    def batches(self, batch_size: int | None = None, index: Any = None) -> Callable[[int, int, int], tuple[Any, Any]]:
        """`batch` with its batch size and index fixed, as one callable to keep: `rows(step,
        lo, hi)`. The one home of a batch's rows; a step that calls it thousands of times a
        second skips `batch`'s lookups."""
        X, y, xp, seed = self.X, self.y, self.xp, self.config.seed
        n = X.shape[0] if index is None else len(index)
        b = batch_size or self.plan.batch_size
        spe = steps_per_epoch(n, b)   # checks N and B once; then each step is a slice of the cached epoch order
        host = xp is np

        def rows(step: int, lo: int, hi: int) -> tuple[Any, Any]:
            if not 0 <= lo <= hi <= b:
                raise ValueError(f"lo, hi: 0 <= lo <= hi <= {b}, got {lo}, {hi}")
            epoch, k = divmod(step, spe)
            start = k * b
            idx = _epoch_order(n, seed, epoch)[start + lo:start + hi]   # == global_batch(...)[lo:hi]
            if index is not None:
                idx = index[idx]
            if host:
                return X.take(idx, axis=0), y[idx]   # take: the same rows, 2-3x faster than X[idx] here
            idx = xp.asarray(idx)
            return X[idx], y[idx]
        return rows

    def initial_params(self) -> Any:
        """A fresh, writable copy of the run's initial parameters on this worker's device
        (`Problem.params0`: built once per process, `model.init(seed)`)."""
        from ..problem import Problem
        return Problem.from_config(self.config).initial_params(self.xp)

    def my_slice(self, shares: list[float] | None = None, batch_size: int | None = None) -> tuple[int, int]:
        """This worker's rows of each global batch: equal shares unless given."""
        if not shares:   # every worker of a run asks the same: cut once (O(P) each, O(P^2) in one process)
            return _equal_split(batch_size or self.plan.batch_size, self.size)[self.rank]
        return split_batch(batch_size or self.plan.batch_size, shares)[self.rank]

    # ---------------------------------------------------------------- clocks
    def start(self) -> None:
        """Wait for every worker at the start barrier, then start the clock: time 0 is
        the first training step, the same moment on every worker (to the barrier's skew).
        A resumed worker's records go on from its checkpoint's time: where its transport
        restored the clock itself (the simulator's virtual one, `resume["clock"]`), time 0
        is the original run's; else the time since its checkpoint is added to that one's.

        The run's control takes its first, slow poll before the barrier (`prime`: a
        scheduler round trip on Dask, after which a flag its poller keeps is read), which the
        worker that arrives last would otherwise pay after the barrier, at its first step,
        while the others train: 20-40 ms that made a short asynchronous run's two workers
        take turns instead of running together."""
        prime = getattr(self.control, "prime", None)
        if prime is not None:
            prime()
        missing = self.start_barrier() if self.start_barrier is not None else []
        self.t_start, self.started_wall = self.timer(), time.time()
        self._wall_timer = self.timer is time.perf_counter
        if self.resume is not None:
            if self.resume.get("clock_restored"):
                self.t_start = float(self.resume["t_start"])
            else:
                self.time_offset = float(self.resume["time"])
        if missing:
            self.event("start_timeout", f"worker(s) {missing} had not started; began without them")
        self.flush(force=True)  # tells the client when training started

    def now(self) -> float:
        """Seconds since the run's first training step (0 before it)."""
        return self.timer() - self.t_start + self.time_offset if self.t_start is not None else 0.0

    def clock(self) -> float:
        """`timer()` after the device's queued work is done (CuPy is asynchronous): read
        it around compute. Around host-side exchanges `timer()` alone is enough."""
        if self.xp is not np:
            synchronize(self.xp)
        return self.timer()

    def clock_fn(self) -> Callable[[], float]:
        """`clock` as one callable to keep: `timer` itself on the host (nothing queued to
        wait for; a step reads its clock several times, ~0.1 us a call saved each)."""
        return self.timer if self.xp is np else self.clock

    def sync_device(self) -> None:
        synchronize(self.xp)

    # ---------------------------------------------------------------- communication helpers
    def allreduce(self, buf: Any) -> Any:
        """Allreduce through ctx.comm, staging device buffers through the host when the
        comm is host-only (shared memory, Dask); NCCL comms take device buffers."""
        if self.xp is np or getattr(self.comm, "device", False):
            return self.comm.allreduce(buf)
        return self.xp.asarray(self.comm.allreduce(to_numpy(buf)))

    def allreduce_fn(self) -> Callable[[Any], Any]:
        """`allreduce` as one callable to keep: the comm's own on the host (nothing to
        stage; a step that exchanges thousands of times a second skips the check)."""
        return self.comm.allreduce if self.xp is np and self.comm is not None else self.allreduce

    def compressed_sum(self, buf: Any, payload_bytes: float, gather: bool) -> Any:
        """`comm.base.compressed_sum` through ctx.comm (staged through the host as `allreduce`)."""
        if self.xp is np or getattr(self.comm, "device", False):
            return compressed_sum(self.comm, buf, payload_bytes, gather)
        return self.xp.asarray(compressed_sum(self.comm, to_numpy(buf), payload_bytes, gather))

    def gathered_sum(self, buf: Any, payload: Any, decode: Any) -> Any:
        """`comm.base.gathered_sum` through ctx.comm (buffer and payload staged through the
        host as `allreduce`, and decoded there)."""
        if self.xp is np or getattr(self.comm, "device", False):
            return gathered_sum(self.comm, buf, payload, decode)
        return self.xp.asarray(gathered_sum(self.comm, to_numpy(buf), to_numpy(payload), decode))

    def comm_buffer(self, m: int, dtype: Any) -> Any:
        """A buffer of m elements to fill and allreduce: the comm's own slot when it has
        one (shared memory: no copy in), else a fresh zeroed array on the device."""
        if self.xp is np and self.comm is not None:
            try:
                buf = self.comm.buffer(m)
                if buf.dtype == dtype:
                    buf[...] = 0
                    return buf
            except AttributeError:
                pass
        return self.xp.zeros(m, dtype=dtype)

    # ---------------------------------------------------------------- records
    def record(self, rec: dict) -> None:
        """Keep a record other than a step's (eval, event, tournament): sent with the next batch."""
        self._pending.append(rec)
        if time.perf_counter() >= self._next_flush:
            self.flush()

    def evaluated(self, name: str, step: int, epoch: float, now: float, scores: dict[str, Any], params: Any) -> None:
        """Record an evaluation of `params` after (0-based) `step` (`eval_record`); rank 0
        also keeps a host copy of the parameters of its lowest validation loss so far, or
        test loss without a validation set (`best`: the run's `params_best.npy`, what an
        overfitting run was at its best), and counts the evaluations since for `early_stop`."""
        self.record(eval_record(name, step, epoch, now, **scores))
        if self.rank == 0:   # the validation loss chooses where there is one (`val_fraction`), else the test loss
            loss = scores.get("val_loss", scores.get("test_loss"))
            if loss is not None and math.isfinite(loss) and (self.best is None or loss < self.best[1]):
                self.best = (step + 1, float(loss), np.array(to_numpy(params), copy=True))
                self.since_best = 0
                self.last_evaluated = (step + 1, self.best[2])
            else:
                self.last_evaluated = (step + 1, np.array(to_numpy(params), copy=True))
                if self.best is not None:
                    self.since_best += 1
                patience = self.config.early_stop
                if patience is not None and self.since_best >= patience and self.early_stopped is None \
                        and step + 1 < self.plan.total_steps:
                    self.stop_early(step, patience)

    def kept_on_failure(self, exc: BaseException | None = None) -> dict[str, Any]:
        """What a loop that fails hands back of its model (rank 0; nothing elsewhere): the
        parameters of its last evaluation, which the run's last test numbers are of, with how
        many steps they had run (`params_steps`), and those at its best. Not the parameters
        of the failing moment: a step that raised may have left them half updated, and an
        algorithm's evaluated parameters (a centre, an average) may need its peers. The
        exception is an evaluation that raised (`exc`, an `EvaluationError` whose steps
        are known): the parameters it was given are whole, the ones a success would have
        kept, so they are kept, said to be not evaluated (`params_of`)."""
        scored = exc.params if isinstance(exc, EvaluationError) else None
        if scored is not None:
            exc.params = None   # (kept below on rank 0: the exception need not carry them, nor a GPU's array)
        if self.rank != 0:
            return {"params": None, "best": self.best}
        if scored is not None and exc.steps is not None:
            return {"params": np.array(to_numpy(scored), copy=True), "params_steps": int(exc.steps),
                    "params_of": f"its training, not evaluated: {exc.why}", "best": self.best}
        if self.last_evaluated is None:
            return {"params": None, "best": self.best}
        return {"params": self.last_evaluated[1], "params_steps": self.last_evaluated[0], "best": self.best}

    def stop_early(self, step: int, patience: int) -> None:
        """`early_stop`'s decision, on rank 0 at the evaluation after `step`: the validation
        loss (the test loss without a validation set) has not gone below its best for
        `patience` evaluations. Asks every loop to stop (a
        synchronous run's stop question carries it to all at the next step, so they end
        together) and says why in an event; the engine reads the run as completed."""
        at, loss = self.best[0], self.best[1]          # type: ignore[index]
        on = "validation" if self.config.val_fraction else "test"
        self.early_stopped = {"evaluated_at": step + 1, "patience": patience, "best_steps": at, "on": on,
                              "best_loss": loss}
        self.event("early_stop", f"the {on} loss has not gone below its best, {loss:.4g} after {at} steps, in "
                   f"{patience} evaluation{'s' if patience > 1 else ''} (early_stop {patience}): stopping after "
                   f"{step + 1} steps")
        if self.control is not None:
            self.control.request_stop("early_stop")

    def loop_result(self, status: str, params: Any, last_step: int, summary: dict[str, Any]) -> dict[str, Any]:
        """What a worker's loop hands back at its end (`run_loop`, and the simulator's drivers
        for each worker they step): how it ended, rank 0's parameters, its step records, when
        it started, the best kept and where `early_stop` ended it."""
        return {"status": status, "params": params, "last_step": last_step, "summary": summary,
                "steps": self.step_columns(), "started": self.started_wall, "best": self.best,
                "early_stopped": self.early_stopped}

    def event(self, event: str, message: str) -> None:
        self.record(event_record(self.now(), event, self.rank, message))

    def flush(self, done: bool = False, force: bool = False) -> None:
        """Send one live batch: every step row since the last one (packed: the client writes
        them to the run directory as they come and bins them for the live views) and the
        pending records. Without a client (`emit` None) the rows stay in the log. With a
        ring to the client (`rows_out`) the rows go into it, and a batch leaves only with
        records, or when forced; rows that do not fit give the ring up for the rest of the
        run (they go with the batches from then on: `comm.rowring`)."""
        if self.emit is None:
            self._pending = []
            self._next_flush = time.perf_counter() + FLUSH_S
            return
        ring = self.rows_out
        if ring is not None and self.steps.n:
            if self.steps.n <= ring.room():
                ring.put(row_block(self.steps.take(self.plan.epoch)))
            else:   # the client has not read for a while: every later row goes with the batches, after these
                self.rows_out = None
        rows = pack_rows(self.steps.take(self.plan.epoch)) if self.rows_out is None else None
        if force or done or rows is not None or self._pending:
            self.emit({"kind": "live", "rank": self.rank, "started": self.started_wall, "rows": rows,
                       "records": self._pending, "done": done})
        self._pending = []
        self._next_flush = time.perf_counter() + FLUSH_S

    def save_state(self, step: int, state: dict[str, Any], tag: str | None = None) -> None:
        """Send this worker's state before `step` (the next it runs) for the run's checkpoint:
        its step rows so far leave first (one channel, in order), so the client has every
        row before `step` when the state arrives. `clock`/`t_start` let a transport whose
        clock is its own (the simulator's) restore it exactly. `tag`: "paused" or "kept"
        (an elastic run regroups from it: it travels with the batch, never held); "stopped"
        or "ended" (where the loop ended: a stopped run's checkpoint, `run_loop`)."""
        self.flush(force=True)
        if self.best is not None and state:   # rank 0's parameters at its lowest test loss go on with the run
            state = {**state, "best.params": self.best[2], "best.steps": self.best[0], "best.test_loss": self.best[1],
                     "best.since": self.since_best}
        if self.emit is not None:
            batch = {"kind": "state", "rank": self.rank, "step": int(step), "time": self.now(),
                     "clock": self.timer(), "t_start": self.t_start, "state": state}
            if tag is not None:
                batch["tag"] = tag
            self.emit(batch)

    def step_columns(self) -> dict[str, np.ndarray]:
        """The steps this worker logged and has not sent yet (LOG_FIELDS and epoch): its
        loop's result carries them (none after the last flush)."""
        return self.steps.columns(self.plan.epoch)

    def stop_requested(self) -> bool:
        """Whether the run's control asks this worker to stop (a synchronous run's leader asks
        it in each step's exchange; an asynchronous worker at the top of each step).

        One edge, on rank 0 of a run with `early_stop`: a stop asked on the step whose
        evaluation may still take early_stop's decision is held back for that step (once a
        run), so the decision, if taken, rides on the next step as it does without the stop
        and the run ends where it would have ended, completed; if it is not taken, the held
        stop ends the run one step later, stopped (a stop heeded before the evaluation ended
        the run a step short of the early stop's end while reporting it completed).

        Why here and not in the exchange that carries the stop: the exchange of a step is
        packed before that step's evaluation (which needs the exchanged update), so nobody
        can know there whether the evaluation will decide; the choice is only to carry the
        stop or hold it, and this is the one question every one of rank 0's stop readings
        goes through (`SyncTail`'s, cgdp's, the simulator's lockstep drivers', an
        asynchronous loop's). The step it needs is read off the step log only when a stop
        is pending (`step_under_way`); the hold is remembered because with `eval_every` 1
        every step is evaluated and a stop held at each would never be heeded."""
        if self.control is None or not self.control.stop_requested():
            return False
        if self.rank != 0 or self.config.early_stop is None or self.early_stopped is not None:
            return True
        step = self.step_under_way()
        if self._stop_held_at is None and step + 1 < self.plan.total_steps and self.plan.is_eval_step(step):
            self._stop_held_at = step
        return self._stop_held_at != step

    def step_under_way(self) -> int:
        """The step this worker is in, read off its step log: the one after its newest row
        (`close_step` books every step it closes), else the step its loop began at (a resumed
        run's checkpoint step, or 0). Read only where it is needed (`stop_requested`, with a
        stop pending), so no step pays for it."""
        newest = self.steps.newest()
        if newest is not None:
            return int(newest[0]) + 1
        return int(self.resume["step"]) if self.resume is not None else 0


class Algorithm:
    """Base class: one instance per worker per run.

    What the algorithm is and needs (sync or not, who evaluates, its server role, ...) is
    declared once, in `registry`'s table, naming this class; loading it binds the class's
    `spec`, which `sync` and `evaluates` read."""

    spec: Any = None     # the AlgorithmSpec, bound when the registry loads the class

    def __init__(self, ctx: WorkerContext):
        self.ctx = ctx
        if "spec" not in type(self).__dict__:   # built directly, not through `AlgorithmSpec.cls`
            from ..config.registry import spec_of
            type(self).spec = spec_of(type(self))

    @property
    def sync(self) -> bool:
        """Every worker must reach every step (a lost worker fails the run)."""
        return self.spec.sync

    @property
    def evaluates(self) -> str:
        """Who evaluates: "rank0", "all" (every rank a share, same params) or "trainers" (LTFB)."""
        return self.spec.evaluates

    def step(self, step: int) -> StepOut:
        raise NotImplementedError

    def eval_params(self) -> Any:
        """The parameters to evaluate now (rank 0): the model, the server's, the centre."""
        raise NotImplementedError

    # What a checkpoint holds of this worker (`workbench.checkpoint`): the algorithm's whole
    # state between two steps, as NumPy arrays and plain numbers, copied; `load_state`
    # puts it back into a fresh instance of the same run. An algorithm that does not
    # define them has no checkpoints (`checkpoints_offered`).
    def state(self) -> dict[str, Any]:
        """This worker's state before its next step (copies: the loop goes on)."""
        raise NotImplementedError

    def load_state(self, state: dict[str, Any]) -> None:
        """Take up `state` (what `state` gave, in the run it came from)."""
        raise NotImplementedError

    # Elastic membership (`execution.elastic`): where a regrouped run may go on from, and
    # what a worker that joins starts with.
    def boundary(self, step: int) -> bool:
        """Whether the state after this (0-based) step is one every worker can regroup at
        (every step for sync_sgd; an average for the local family)."""
        return True

    @classmethod
    def joiner_state(cls, state: dict[str, Any]) -> dict[str, Any]:
        """A joining worker's state, from a member's `state` at a boundary: what every
        worker holds alike; the member's own parts (memories, generators) are left out,
        so the newcomer starts them afresh (`load_state` keeps what it is not given)."""
        return dict(state)

    def steps_done(self) -> None:
        """Called once after this worker's last planned step, before its last evaluation."""

    def failed(self) -> None:
        """Called when a step raised (the error then ends the loop): a server role this
        worker takes part in may be told it is gone."""

    def finish(self) -> np.ndarray | None:
        """End of the run; rank 0 returns the final parameters (NumPy)."""
        return to_numpy(self.eval_params()) if self.ctx.rank == 0 else None

    # whose updates `clip_counts` counts (the summary says it beside the numbers)
    clip_counted = "rank 0's own updates (each worker clips its own gradient)"

    def clip_counts(self) -> tuple[Any, Any]:
        """The counts of the rule that clips this run's gradients ([updates, clipped], [sum
        of the norms, the largest]), as rank 0 sees them at the end (its own rule's: every
        update of the synchronous family, rank 0's own steps where workers step alone);
        (None, None) without clipping."""
        opt = getattr(self, "opt", None)
        return (None, None) if opt is None else (opt.state.get("clip"), opt.state.get("clip_norm"))

    def ended_summary(self) -> dict[str, Any]:
        """What rank 0 adds to the run's summary at the end: the algorithm's own, and
        the clipping rule's counts."""
        if self.ctx.rank != 0:
            return getattr(self, "summary", {})
        return {**getattr(self, "summary", {}),
                **clip_summary(self.ctx.config.grad_clip, *self.clip_counts(), self.clip_counted)}

    def evaluate(self, step: int) -> None:
        """Periodic evaluation; LTFB overrides to evaluate every trainer."""
        ctx = self.ctx
        if self.evaluates == "all" and ctx.comm is not None and ctx.size > 1 and ctx.evaluator is not None:
            # Every rank holds the same parameters: each scores its share of the evaluation
            # sets and one small allreduce sums them, so nobody idles while rank 0 evaluates.
            part = ctx.evaluator.partial(self.eval_params(), ctx.rank, ctx.size)
            buf = ctx.xp.zeros(len(part), dtype=np.float32)
            buf[:] = ctx.xp.asarray(part.astype(np.float32))
            total = to_numpy(ctx.allreduce(buf))
            if ctx.rank == 0:
                scores = ctx.evaluator.from_partials(total.astype(np.float64))
                ctx.evaluated(self.eval_name, step, ctx.plan.epoch(step + 1), ctx.now(), scores, self.eval_params())
        elif ctx.rank == 0 and ctx.evaluator is not None:
            params = self.eval_params()
            ctx.evaluated(self.eval_name, step, ctx.plan.epoch(step + 1), ctx.now(), ctx.evaluator(params), params)

    eval_name = "0"


class EndsOnServer:
    """For an algorithm whose result lives on a server that every worker updates in its
    own time (async_sgd, async_msgd, and easgd, async_easgd, async_measgd's centre).

    Each worker retires from the server at the end of its last step (or when it fails or
    stops), and rank 0's evaluations from then on (the run's last evaluation and the
    parameters it returns) wait until every worker has retired (`server.final()`). The
    result then holds every worker's last update, whatever order the workers end in (read
    when rank 0 itself ends, easgd's returned centre after 12 steps on 2 CPU workers
    differed by 2.4e-3 between runs of one config, in half of six runs: the other worker's
    last exchange had or had not landed yet). A lost worker is retired by its transport, so
    nobody waits for it; a stop request ends the wait (`StopWait`), and a stopped run
    reports the server as it is."""

    left = False

    def steps_done(self) -> None:
        self.leave()

    def failed(self) -> None:
        self.leave()

    def leave(self) -> None:
        """This worker has made its last update: it retires (once; its turns are skipped)."""
        if not self.left:
            self.left = True
            try:
                self.ctx.server.retire(self.ctx.rank)    # type: ignore[attr-defined]
            except Exception:
                pass   # a server already gone: the run is ending anyway

    def server_params(self, now: Callable[[], Any]) -> Any:
        """What rank 0 evaluates: the final parameters once it has left, `now()` before."""
        ctx = self.ctx                                   # type: ignore[attr-defined]
        if self.left and ctx.rank == 0:
            try:
                return ctx.xp.asarray(ctx.server.final())
            except StopWait:
                pass
        return ctx.xp.asarray(now())

    def finish(self) -> np.ndarray | None:
        self.leave()
        return super().finish()                          # type: ignore[misc]


class LocalWorker(Algorithm):
    """The prelude shared by the families whose workers keep their own parameters x_i and
    step them on their slice of each global batch (the EASGD family, local SGD / DiLoCo,
    D-PSGD, AD-PSGD): x_i from the run's initial parameters, a gradient buffer, the
    configured update rule with its own state (`rule`: overrides such as EASGD's
    momentum=0), my rows of each global batch and their share of it, the clock; and the
    local step itself, timed. What a step reads is bound once (the clock, the schedule, the
    rows: at the teaching size a step is ~0.1 ms)."""

    def __init__(self, ctx: WorkerContext, **rule: Any):
        super().__init__(ctx)
        xp = ctx.xp
        self.params = ctx.initial_params()          # x_i: every worker starts at the same point
        self.grad = xp.empty_like(self.params)
        self.opt = make_optimizer(ctx.config, ctx.model.layout(), xp, self.params.dtype, **rule)
        self.lo, self.hi = ctx.my_slice()
        self.weight = (self.hi - self.lo) / ctx.plan.batch_size
        self.clock, self.schedule, self.rows = ctx.clock_fn(), ctx.plan.schedule, ctx.batches()

    def local_state(self) -> dict[str, Any]:
        """x_i and its rule's state: the part of a family's `state` this prelude owns."""
        return {**state_copy(self.ctx.xp, params=self.params), **optimizer_state(self.ctx.xp, self.opt)}

    def load_local_state(self, state: dict[str, Any]) -> None:
        self.params[...] = self.ctx.xp.asarray(state["params"])
        load_optimizer_state(self.ctx.xp, self.opt, state)

    def local_step(self, step: int, lr: float) -> float:
        """One step of the rule on x_i at my slice of global batch `step`; returns its loss."""
        X, y = self.rows(step, self.lo, self.hi)
        loss, _ = self.ctx.model.loss_and_grad(self.params, X, y, grad_out=self.grad)
        self.opt.step(self.params, self.grad, lr)
        return loss

    def timed_local_step(self, step: int) -> tuple[float, float, float, float]:
        """The scheduled lr, then `local_step` between two readings of the clock: (lr,
        loss, t0, t1), the times on the algorithm's clock."""
        lr = self.schedule(step)
        clock = self.clock
        t0 = clock()
        loss = self.local_step(step, lr)
        return lr, loss, t0, clock()


# ------------------------------------------------------------------------------ synchronous steps
_LAST_TAIL: list[Any] = [None] * 4   # (sum, key, decoded tail, slowest busy time): SyncTail.exchange; read-only


class SyncTail:
    """The synchronous exchange with its packed tail: the one home of what every
    synchronous step does around its collective (`exchange`).

        buffer = [ vector (n) | loss | stop | compute_s[0..P) | busy_s[0..P) ]

    Every worker writes its weighted loss, the leader's stop flag (the leader asks the
    run's control), its compute time and its busy time since its previous exchange ended
    (its step, and anything else, such as rank 0's evaluations) into its own slots, zeroing
    the others'; after the sum, every worker reads the same global loss, stop flag and
    compute times, derives its wait (the slowest worker's busy time less its own: idle, not
    communicating), and makes the step's decision (`settle`). `rank`/`size` are within the
    collective's group (LTFB trainers); the group's rank 0 leads."""

    __slots__ = ("ctx", "n", "rank", "size", "end", "clock", "asks", "t_free", "t_end", "decoded", "total",
                 "_times_at", "_busy_at", "_mine", "_sum")

    def __init__(self, ctx: WorkerContext, n: int, rank: int | None = None, size: int | None = None):
        self.ctx, self.n = ctx, n
        self.rank = ctx.rank if rank is None else rank
        self.size = ctx.size if size is None else size
        self.end = n + tail_length(self.size)
        self.clock = ctx.clock_fn()
        self.asks = ctx.stop_requested if self.rank == 0 else None   # the leader's question, bound once
        self.t_free: float | None = None   # when my last exchange (and update) ended (ctx.clock)
        self.t_end: float | None = None    # when my last collective returned (ctx.clock)
        self.decoded: list[float] = []     # the last exchange's reduced tail, as numbers (`times`)
        p = self.size                      # (where the decoded tail holds every worker's times)
        self._times_at, self._busy_at = slice(2, 2 + p), slice(2 + p, 2 + 2 * p)
        self.total: Any = None             # the last exchange's sum (the reducer's array: not to keep)
        # (buffer, its tail, the tail's writer) cut once, and (sum, its tail) likewise: a step
        # packs the same buffer, and a host comm hands back the same sum array, thousands of
        # times a second
        self._mine: tuple[Any, Any, Any] = (None, None, None)
        self._sum: tuple[Any, Any] = (None, None)

    def exchange(self, out: StepOut, buf: Any, loss_w: float, compute_s: float, reduce: Callable[[Any], Any]) -> bool:
        """Pack my scalars into buf[n:], `reduce(buf)` (the collective: its sum is kept in
        `total`, the clock when it returned in `t_end`), and read the reduced tail into
        `out`: `out.comm_s` and `out.wait_s` (the exchange's time split, `comm_and_wait`:
        from the end of my busy time, packing included, to `t_end`), then `out.loss` and
        `out.stop` (`settle`); every worker's compute time is left in `times`. True when
        the update applies."""
        held, tail, write = self._mine
        if buf is not held:
            tail = buf[self.n:self.end]
            write = _tail_writer(tail, self.rank, self.size)
            self._mine = (buf, tail, write)
        clock = self.clock
        t1 = clock()         # my busy time ends, the exchange begins
        since = self.t_free
        if since is None:    # step 0: since time 0 (before the clock starts: the compute alone)
            since = self.ctx.t_start
        busy = t1 - since if since is not None else compute_s
        asks = self.asks
        stop = 1.0 if asks is not None and asks() else 0.0
        if write is not None:
            try:
                write(tail, 0, loss_w, stop, compute_s, busy)   # my slots, the others' zeroed: one C call
            except OverflowError:    # a value past float32's range (a diverging loss): NumPy makes it inf
                write = None
        if write is None:            # (or a device buffer)
            p, r = self.size, self.rank
            if p > 1:                # one worker writes every slot
                tail.fill(0)
            tail[0], tail[1], tail[2 + r], tail[2 + p + r] = loss_w, stop, compute_s, busy
        self.total = total = reduce(buf)
        self.t_end = t2 = clock()
        comm_total = t2 - t1
        held, tail = self._sum
        if total is held:    # the same writeable sum array as last step: its tail is cut
            tail = tail.tolist()
            slowest = max(tail[self._busy_at])
        else:
            n = self.n
            key = (id(total), n, self.end)
            if _LAST_TAIL[0] is total and _LAST_TAIL[1] == key:   # the ranks of a process that got one sum
                tail, slowest = _LAST_TAIL[2:]                      # (the simulator's): decoded once, O(P) not O(P^2)
            else:
                view = total[n:self.end]
                tail = (view if isinstance(view, np.ndarray) else to_numpy(view)).tolist()
                slowest = max(tail[self._busy_at])
                if isinstance(total, np.ndarray):
                    if not total.flags.writeable:   # only a sum nobody rewrites
                        _LAST_TAIL[:] = [total, key, tail, slowest]
                    else:
                        self._sum = (total, view)
        self.decoded = tail
        out.comm_s, out.wait_s = comm_and_wait(comm_total, slowest, busy)
        return settle(out, tail[0], tail[1] > 0)

    @property
    def times(self) -> list[float]:
        """Every worker's compute time at the last exchange."""
        return self.decoded[self._times_at]

    def freed(self) -> float:
        """My exchange (and update) ended now: my next busy time counts from here (returned)."""
        self.t_free = t = self.clock()
        return t


_FORMATS = {np.dtype(np.float32): "f", np.dtype(np.float64): "d"}


def _tail_writer(tail: Any, rank: int, size: int) -> Callable[..., None] | None:
    """`write(tail, 0, loss_w, stop, compute_s, busy)`: one C call that writes my four
    slots of a host tail and zeroes the others' (a struct whose pad bytes are the others'
    slots: packing zeroes its whole span first), rounding as NumPy's assignment does; it
    raises OverflowError where a finite value does not fit a float32. None where the tail
    is not a contiguous host float array (a device buffer).

    >>> tail = np.full(6, 7.0, np.float32); _tail_writer(tail, 1, 2)(tail, 0, 0.5, 1.0, 0.25, 0.75); tail.tolist()
    [0.5, 1.0, 0.0, 0.25, 0.0, 0.75]
    """
    code = _FORMATS.get(tail.dtype) if isinstance(tail, np.ndarray) else None
    if code is None or not (tail.flags.c_contiguous and tail.flags.writeable and tail.dtype.isnative):
        return None
    s = tail.itemsize
    return struct.Struct(f"={code}{code}{rank * s}x{code}{(size - 1) * s}x{code}{(size - 1 - rank) * s}x").pack_into


def comm_and_wait(comm_total: float, slowest: float, busy: float) -> tuple[float, float]:
    """A worker's exchange time split in two: idle while the slowest worker (busy for
    `slowest` since its last exchange, against my `busy`) finished its part, at most the
    whole exchange, and the rest, moving bytes. Returns (comm_s, wait_s).

    >>> comm_and_wait(1.0, 0.75, 0.5)
    (0.75, 0.25)
    >>> comm_and_wait(1.0, 0.5, 0.75)      # I was the slowest: no wait
    (1.0, 0.0)
    """
    wait = min(comm_total, max(0.0, slowest - busy))
    return comm_total - wait, wait


def settle(out: StepOut, loss: float, stop: bool) -> bool:
    """The decision every worker of a synchronous step makes together, from the same
    reduced numbers: diverged (the global loss is NaN/inf: the update does not apply),
    else the update applies, and the loop ends after this step when the leader asked to
    stop (`stopped`). Sets `out.loss` and `out.stop`; True when the update applies.

    A stop completes the step it is decided at: every worker then holds the state before
    the next step, the one a checkpoint holds, so a stopped run leaves one there and goes
    on from it bitwise (`run_loop`).

    >>> out = StepOut(); settle(out, float("nan"), True), out.stop
    (False, 'diverged')
    >>> out = StepOut(); settle(out, 0.5, True), out.stop
    (True, 'stopped')
    """
    out.loss = loss
    if not math.isfinite(loss):
        out.stop = "diverged"
        return False
    if stop:
        out.stop = "stopped"
    return True


def checkpoints_offered(cls: type) -> bool:
    """Whether an algorithm's workers can be checkpointed (it defines `state` and `load_state`)."""
    return cls.state is not Algorithm.state and cls.load_state is not Algorithm.load_state


def state_copy(xp: Any, **arrays: Any) -> dict[str, np.ndarray]:
    """{name: a NumPy copy of each array} (device arrays brought to the host): a state's arrays.

    >>> a = np.zeros(2, np.float32); s = state_copy(np, x=a); a += 1; s["x"].tolist()
    [0.0, 0.0]
    """
    return {k: (np.array(v, copy=True) if xp is np else to_numpy(v).copy()) for k, v in arrays.items()}


def _pause_now(ctx: WorkerContext, step: int) -> bool:
    """Whether the elastic run's loops pause after this boundary step: the client asked for
    a pause at a step this one has reached, or (a virtual clock, which every worker reads
    alike at a boundary) at a time the clock has reached."""
    asked = ctx.control.pause_at()
    if not asked:
        return False
    if "step" in asked:
        return step + 1 >= int(asked["step"])
    return ctx.timer() >= float(asked["time"])


def optimizer_state(xp: Any, opt: Any, prefix: str = "opt") -> dict[str, np.ndarray]:
    """An update rule's state arrays (momentum, Adam's moments, ...) as state entries."""
    return state_copy(xp, **{f"{prefix}.{k}": v for k, v in opt.state.items()})


def load_optimizer_state(xp: Any, opt: Any, state: dict[str, Any], prefix: str = "opt") -> None:
    """Put `optimizer_state`'s entries back into the rule's arrays (in place: views stay views)."""
    for k, a in opt.state.items():
        a[...] = xp.asarray(state[f"{prefix}.{k}"])


def server_state(ctx: WorkerContext) -> dict[str, Any]:
    """Rank 0's part of a checkpoint that is the server role's whole state (`server.*`: its
    `snapshot` op); {} on the other ranks. Taken when rank 0 reaches the checkpoint's step:
    an asynchronous run's other workers are at their own steps then."""
    if ctx.rank != 0 or ctx.server is None:
        return {}
    return {f"server.{k}": np.asarray(v) for k, v in ctx.server.snapshot().items()}


def load_server_state(ctx: WorkerContext, state: dict[str, Any]) -> None:
    """Rank 0 puts the server's state back (`restore`), before the start barrier lets any
    worker use it."""
    if ctx.rank == 0 and ctx.server is not None:
        ctx.server.restore({k.removeprefix("server."): v for k, v in state.items() if k.startswith("server.")})


def clock_reading(ctx: WorkerContext, value: Any) -> float | None:
    """A saved reading of the worker's clock (a tail's `t_free`), where a resumed run's clock
    is the saved run's own (the simulator restores its virtual clock); else None (the
    reading belonged to another process's clock: the resumed worker starts afresh)."""
    if ctx.resume is not None and ctx.resume.get("clock_restored") and value is not None:
        return float(value)
    return None


def close_step(ctx: WorkerContext, step: int, out: StepOut, sync: bool,
               evaluate: Callable[[int], None] | None, now: float | None = None) -> str | None:
    """The loop's contract for one step's outcome: `run_loop` and the simulator's fast
    drivers (which step many workers in one loop) each call it once per worker and step.

    A divergence the step decided (`out.stop`: a synchronous step settles it with every
    worker) ends the loop with its event on rank 0 (also on every worker of an
    asynchronous run) and no record. Otherwise the step's row is booked at `now` (the
    worker's clock, read here when None); an asynchronous worker whose loss is NaN/inf
    ends as diverged and asks every other worker to stop (a synchronous one learns it at
    its next exchange); on an eval step `evaluate(step)` runs (None: not this worker's
    to do); and a few times a second the rows leave as a live batch. A stop the step
    decided (`settle`) ends the loop after all that: the step is complete, and rank 0
    says so in an event.

    Returns the status that ends this worker's loop ("stopped", "diverged"), or None.
    """
    stop = out.stop
    if stop == "diverged":
        if ctx.rank == 0 or not sync:
            ctx.event("diverged", f"loss became {out.loss} at step {step} with lr {out.lr:.6g}")
        return stop
    if now is None:
        now = ctx.timer()
    loss = out.loss        # (the row packs every field as float64 itself: `StepLog.add`)
    ctx.steps.add(step, now - ctx.t_start + ctx.time_offset, loss, out.lr, out.samples, out.compute_s, out.comm_s,
                  out.wait_s, out.staleness, out.bytes_sent)
    if not sync and not math.isfinite(loss):  # asynchronous: this worker saw it first
        # (synchronous algorithms decide together and set out.stop; sync_easgd's local
        # steps between exchanges may see a NaN that the next exchange reports to all)
        ctx.event("diverged", f"loss became {out.loss} at step {step} with lr {out.lr:.6g}")
        if ctx.control is not None:
            ctx.control.request_stop("diverged")
        return "diverged"
    if evaluate is not None and step >= ctx._next_eval:   # (the plan asked once per evaluation, not every step)
        ctx._next_eval = ctx.plan.next_eval_step(step)
        if ctx._next_eval == step:
            try:
                evaluate(step)
            except EvaluationError as exc:   # what it scored had run step + 1 steps: kept (`kept_on_failure`)
                exc.steps = step + 1 if exc.steps is None else exc.steps
                raise
            ctx._next_eval = step + 1
    if stop == "stopped" and step + 1 < ctx.plan.total_steps:   # (after the last step: completed)
        if ctx.rank == 0:
            ctx.event("stopped", f"stop requested; ended after step {step}")
        return stop
    if (now if ctx._wall_timer else time.perf_counter()) >= ctx._next_flush:   # wall time: live batches a few times a second
        ctx.flush()
    return None


@contextlib.contextmanager
def float_errors(seen: dict[str, int], steps: StepLog):
    """NumPy's floating-point errors inside a worker's loop (overflow, invalid value, divide
    by zero) noted in `seen` (kind -> the step it first happened in: the one after the
    newest row of `steps`) instead of printed as RuntimeWarnings on the workers' stderr,
    which a notebook shows in red before, and apart from, the run's own account. The run's
    summary keeps the earliest of each kind over its workers (`numerics`) and says it beside
    the other notes (`measure.numerics_note`); a loss that becomes NaN or inf still ends the
    run as diverged, at its step and lr. Underflow stays ignored, as NumPy's default has it.
    Costs nothing while no error happens."""
    def note(kind: str, flag: int) -> None:
        if kind not in seen:
            at = steps.newest()
            seen[kind] = int(at[0]) + 1 if at else 0
    with np.errstate(over="call", invalid="call", divide="call", call=note):
        yield


def run_loop(ctx: WorkerContext, algo: Algorithm) -> dict[str, Any]:
    """Drive `algo` for the planned steps; returns {"status", "params" (rank 0), "steps"
    (every step's record, as columns), "started" (wall clock of step 0), ...}.

    A resumed worker (`ctx.resume`) takes up its checkpoint's state and runs on from its
    step; with `ctx.checkpoint_every`, the state before every such step is sent for the
    run's checkpoint (`WorkerContext.save_state`), and so before the step the client asks for
    (`control.checkpoint_at`: checkpoints every so many seconds of wall clock). An
    asynchronous worker asks at the top of each step whether to stop; a synchronous one
    learns it from its step (`settle`), which it completes; what a step's outcome does
    next is `close_step`.

    A run that takes checkpoints also leaves one where a stop ended it: each worker sends
    its state before the step it would have run next (tagged "stopped"; the client writes
    the checkpoint once every worker's is in, `execution.saver`), and so does an
    asynchronous worker that completed its plan ("ended": the others may be stopped). Rank 0
    of a run its `early_stop` ended tags its state "early_stopped": the run completed, and
    the client writes no checkpoint of its end."""
    plan, status = ctx.plan, "completed"
    first = 0
    if ctx.resume is not None:
        algo.load_state(ctx.resume["state"])
        kept = ctx.resume["state"]
        if "best.params" in kept and ctx.rank == 0:   # the best so far, from before the checkpoint (`evaluated`)
            ctx.best = (int(kept["best.steps"]), float(kept["best.test_loss"]), np.asarray(kept["best.params"]))
            ctx.since_best = int(kept.get("best.since", 0))
        first = int(ctx.resume["step"])
    step = first - 1
    sync, total = algo.sync, plan.total_steps
    every = ctx.checkpoint_every
    asked = ctx.checkpoint_asked and ctx.control is not None and hasattr(ctx.control, "checkpoint_at")
    bare = bool((ctx.extra.get("checkpoint") or {}).get("bare"))   # the step alone (a replayed simulation's)
    pausing = ctx.elastic and ctx.control is not None and hasattr(ctx.control, "pause_at")
    end: int | None = None    # where a stopped (or, asynchronous, finished) loop goes on from
    if ctx.elastic:
        ctx.kept = (first, algo.state())
    asks_stop, saves, elastic = not sync, every is not None or asked, ctx.elastic   # (what each step reads, once)
    take_step, evaluate, last = algo.step, algo.evaluate, total - 1
    ctx.start()
    for step in range(first, total):
        if asks_stop and ctx.stop_requested():
            status, end = "stopped", step
            break
        try:
            out = take_step(step)
        except StopWait:          # a wait on a turn or partner ended on the stop request: mid-step,
            status = "stopped"    # no state to go on from (the run's stop leaves no checkpoint)
            break
        except BaseException:
            algo.failed()
            raise
        if step == last and out.stop != "diverged":
            algo.steps_done()
        ended = close_step(ctx, step, out, sync, evaluate)
        if ended is not None:
            status = ended
            if ended == "stopped":
                end = step + 1
            break
        if saves and (every is not None and (step + 1) % every == 0 or asked and ctx.control.checkpoint_at() == step + 1) \
                and step + 1 < total:
            ctx.save_state(step + 1, {} if bare else algo.state())
        if elastic and algo.boundary(step) and step + 1 < total:
            ctx.kept = (step + 1, algo.state())
            if pausing and _pause_now(ctx, step):   # the run regroups here (`execution.elastic`)
                ctx.save_state(step + 1, ctx.kept[1], tag="paused")
                status = "paused"
                break
    if every is not None or ctx.checkpoint_asked:
        if status == "completed" and not sync:
            end = total
        if end is not None and (end < total or not sync):
            if ctx.early_stopped is not None:   # rank 0 ended the run by `early_stop`: it completed (no state needed)
                ctx.save_state(end, {}, tag="early_stopped")
            else:
                ctx.save_state(end, {} if bare else algo.state(), tag="stopped" if status == "stopped" else "ended")
    params = algo.finish()
    ctx.flush(done=True)
    return ctx.loop_result(status, params, step, algo.ended_summary())
