"""The simulated cluster as a transport (`workbench.sim`): virtual workers linked by virtual-time front-ends.

`SimTransport` builds, for the run's P virtual workers (1-1024, GPU then CPU ranks), the
same links a real transport builds (a collective per rank group, the declared server
role around its core from `comm.roles`, shared arrays, stop control), but every
front-end charges virtual time (`sim.costs`) and takes effect in virtual-time order
(`sim.clock`). Loops run in greenlets on one driver thread, so the engine's monitor
sees live batches and results exactly as from the thread transport.

Where each algorithm's time goes:

* collectives (sync_sgd, sync_easgd, LTFB trainers, shared evaluations): everyone
  waits for the last arrival; the reduced sum is ready `allreduce_s` later;
* server roles (async_sgd/msgd, the EASGD centre, LTFB's mailbox): request over the
  network, service serialised at the server in arrival order (first come, first
  served; round-robin turns wait for the turn), reply over the network; the core's
  operation happens at its service start, so pushes, elastic exchanges and deposits
  land in virtual-time order and staleness is what the timing makes it;
* shared arrays (Hogwild): written when the writer's clock reaches the write;
* cgdp: per-worker device->host link; chunks leave during the backward pass at the
  moment their layers' gradients are ready, the master (host memory speed) sums
  and updates each, and each updated chunk goes back over every worker's
  host->device link at once (`weight_return` chunks; whole: the whole vector after
  the last one); the fetch waits for the last copy to land.

Faults: `fail_worker` kills a virtual worker at a virtual time; a synchronous run's
peers then wait forever, which the driver turns into `WorkerLost` for each (the run
fails cleanly, as a real one does); an asynchronous one goes on (round-robin turns
skip the dead worker).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..algorithms.base import FLUSH_S
from ..comm.base import ThreadControl, WorkerLost
from ..comm.roles import make_core
from ..config import SIM_DEFAULT_DEVICE, ConfigError, RunConfig
from ..execution.transports.base import LocalArray, Progress, Reports, RunSetup, Transport, WorkerLinks, failed_loop
from .calibration import _one_blas_thread
from .clock import Killed, Scheduler, VProc
from .costs import SimCosts, default_network, make_costs
from .lockstep import HogwildLockstep, Lockstep, lockstep_refusal
from .roles import SimServer, SimServerState
from .server import ServerLockstep

MAX_WORKERS = 1024
# the driver of each fast path an algorithm's declaration may name (`AlgorithmSpec.fast_path`)
FAST_DRIVERS = {"replicas": Lockstep, "shared": HogwildLockstep, "server": ServerLockstep}


# ------------------------------------------------------------------------------ collectives
class SimGroup:
    """One rank group's collective: arrivals, the sum in rank order, the release."""

    def __init__(self, size: int, costs: SimCosts, sched: Scheduler):
        self.size, self.costs, self.sched = size, costs, sched
        self.side: SimPosted | None = None     # sync_easgd's overlapped sums (SimComm.elastic_start)
        self._reset()

    def _reset(self) -> None:
        self.slots: list[Any] = [None] * self.size
        self.procs: list[VProc | None] = [None] * self.size
        self.count = 0
        self.t_last = 0.0
        self.cost_s = 0.0

    def arrive(self, index: int, proc: VProc, buf: Any, cost_s: float | None = None, gather: bool = False) -> Any:
        """Wait for the group; the sum of the buffers (`gather`: every worker's buffer, a
        tuple of copies) is ready `cost_s` after the last arrival (the longest any arrival
        asked for; default the allreduce's)."""
        t = proc.now()
        self.slots[index], self.procs[index] = buf, proc
        self.count += 1
        self.t_last = max(self.t_last, t)
        if cost_s is not None:
            self.cost_s = max(self.cost_s, cost_s)
        if self.count < self.size:
            return proc.block()
        total = None
        if gather:
            total = tuple(self.slots)         # each arrival handed in its own copy
        elif buf is not None:
            total = np.array(self.slots[0], copy=True)
            for other in self.slots[1:]:
                total += other
            total.flags.writeable = False     # one result for everyone: read-only, never aliased by a buffer
        cost_s = self.cost_s if self.cost_s > 0 or cost_s is not None else \
            self.costs.allreduce_s(self.size, 0 if buf is None else len(buf))
        done = self.t_last + cost_s
        procs = self.procs
        self._reset()
        for p in procs:
            if p is not proc and p is not None:
                self.sched.wake(p, done, total)
        proc.sleep_until(done)
        return total



def next_flush(now: float, interval: float, rank: int, size: int) -> float:
    """When virtual worker `rank` of `size` sends its next live batch: the first point after
    `now` on its own grid, `interval` apart and shifted by rank/size of an interval. Workers
    that all flushed at one instant (a lockstep step, the run's first step) so flush next at
    `size` different instants across the interval: at 1,024 workers (a 16 s interval) about
    64 batches a second, where "now + interval" for every worker sent all 1,024 at once
    every 16 s and nothing in between (the live view stood still that long)."""
    phase = interval * (rank % size) / size
    return now + interval - ((now - phase) % interval)

class _Posted:
    """One overlapped sum in flight: its total and when it is in, once every worker posted."""

    __slots__ = ("total", "done", "waiters")

    def __init__(self) -> None:
        self.total: Any = None
        self.done = 0.0
        self.waiters: list[VProc] = []

    def wait_on(self, proc: VProc) -> Any:
        if self.total is None:
            self.waiters.append(proc)
            proc.block()
        proc.sleep_until(max(proc.now(), self.done))
        return self.total


class _Handle:
    __slots__ = ("posted", "proc")

    def __init__(self, posted: _Posted, proc: VProc):
        self.posted, self.proc = posted, proc

    def wait(self) -> Any:
        return self.posted.wait_on(self.proc)


class SimPosted:
    """A group's non-blocking sums (sync_easgd's overlapped exchange): a worker posts its
    buffer and goes on; the sum (rank order) is in `cost_s` after the last post."""

    def __init__(self, size: int, costs: SimCosts, sched: Scheduler):
        self.size, self.costs, self.sched = size, costs, sched
        self.round: _Posted | None = None
        self.slots: list[Any] = [None] * size
        self.count, self.t_last, self.cost_s = 0, 0.0, 0.0

    def post(self, index: int, proc: VProc, buf: Any, cost_s: float) -> _Handle:
        t = proc.now()
        if self.round is None:
            self.round = _Posted()
        rnd = self.round
        self.slots[index] = buf
        self.count += 1
        self.t_last, self.cost_s = max(self.t_last, t), max(self.cost_s, cost_s)
        if self.count == self.size:
            total = np.array(self.slots[0], copy=True)
            for other in self.slots[1:]:
                total += other
            total.flags.writeable = False
            rnd.total, rnd.done = total, self.t_last + self.cost_s
            for p in rnd.waiters:
                if not p.done:
                    self.sched.wake(p, rnd.done)
            self.round, self.slots = None, [None] * self.size
            self.count, self.t_last, self.cost_s = 0, 0.0, 0.0
        return _Handle(rnd, proc)


class SimComm:
    device = False

    def __init__(self, group: SimGroup, index: int, proc: VProc):
        self.group, self.rank, self.size, self.proc = group, index, group.size, proc

    def allreduce(self, buf: Any) -> Any:
        return self.group.arrive(self.rank, self.proc, buf)

    def neighbour_exchange(self, vec: Any, peers: list[int]) -> dict[int, Any]:
        """Point-to-point: my vector to each peer and theirs to me, charged as len(peers)
        messages of the vector, one after the other (one link per worker), or on this host's
        shared memory as its meetings and the peers' slots read (`SimCosts.neighbour_s`),
        once everyone of the group has arrived (D-PSGD's exchanges are synchronous)."""
        c = self.group.costs
        cost = c.neighbour_s(self.size, len(peers), len(vec))
        every = self.group.arrive(self.rank, self.proc, np.array(vec, copy=True), cost_s=cost, gather=True)
        return {j: every[j] for j in peers}

    def compressed_sum(self, buf: Any, payload_bytes: float, gather: bool) -> Any:
        """A compressed exchange's sum, charged as a ring allgather of the payloads or an
        allreduce of `payload_bytes` (`SimCosts.compressed_s`)."""
        cost = self.group.costs.compressed_s(self.size, payload_bytes, gather)
        return self.group.arrive(self.rank, self.proc, buf, cost_s=cost)

    def barrier(self) -> None:
        self.group.arrive(self.rank, self.proc, None)

    def close(self) -> None:
        pass


class SimChainComm(SimComm):
    """A cluster network's collective (any network but this host's shared memory): also
    SC'17's chain for sync_easgd (`elastic_sync`), its tree and its overlapped sum. On `shm`
    the run gets `SimComm`, which has neither, as `comm.shm.ShmComm` has neither: there
    sync_easgd's four paths run one blocking allreduce of [d_i | tail], charged as
    shared memory's (`SimCosts.allreduce_s`)."""

    def elastic_sum(self, buf: Any, host: bool = False) -> Any:
        """sync_easgd's exchange along SC'17's chain (`SimCosts.elastic_s`): a tree, and
        with `host` the copies to and from the host and the host's update of the centre."""
        cost = self.group.costs.elastic_s(self.size, len(buf), host)
        return self.group.arrive(self.rank, self.proc, buf, cost_s=cost)

    def elastic_start(self, buf: Any) -> Any:
        """The exchange's vector through the tree without waiting: returns a handle whose
        `wait()` gives the sum once it is in (`elastic_s`'s time after the last worker
        started it); meanwhile this worker computes on. A second channel of the group, so
        the blocking collectives in between (the tail, evaluations) are not mixed in."""
        side = self.group.side
        if side is None:
            side = self.group.side = SimPosted(self.size, self.group.costs, self.group.sched)
        return side.post(self.rank, self.proc, buf, self.group.costs.elastic_s(self.size, len(buf), False))


# ------------------------------------------------------------------------------ cgdp's master
class SimChunkMasterState:
    """cgdp's host-side master: parts arrive over each worker's link, the master sums
    and updates at the host's memory speed (`costs.master_bw`, the cpu_device profile's
    when named), one part at a time."""

    def __init__(self, setup: RunSetup, costs: SimCosts, sched: Scheduler):
        self.costs, self.sched = costs, sched
        self.clock_now = 0.0
        needs = setup.spec.needs
        self.core = make_core(needs.server, needs.options(setup.config, setup.model), setup.params0, setup.size, setup.config,
                              setup.model, clock=lambda: self.clock_now)
        self.free = 0.0                               # master busy until
        self.up = [0.0] * setup.size                  # device->host link of each worker busy until
        self.down = [0.0] * setup.size
        self.completed = -1
        self.completed_at: dict[int, float] = {}
        self.waiting: dict[int, list[VProc]] = {}
        self.chunked = setup.config.weight_return == "chunks"
        self.traces: dict[int, list[dict[str, Any]]] = {}

    TRACE_KEEP = 3    # steps whose transfers and updates are kept (the last but one complete one is reported)

    def _trace(self, step: int, what: str, rank: int | None, lo: int, hi: int, t0: float, t1: float) -> None:
        """One interval of a step's timeline (`timeline()`): a copy or the master's work on [lo, hi)."""
        self.traces.setdefault(step, []).append({"what": what, "rank": rank, "lo": lo, "hi": hi, "start": t0,
                                                 "end": t1})
        while len(self.traces) > self.TRACE_KEEP:
            del self.traces[min(self.traces)]

    def timeline(self) -> dict[str, Any] | None:
        """The last but one completed step's intervals (virtual seconds): each worker's chunk copies to
        the host ("d2h"), the master's sum and update of each part ("update"), the copies back
        ("h2d"); for the per-iteration figure (`ui.figures.cgdp_timeline_figure`)."""
        done = sorted(s for s in self.traces if s <= self.completed)
        if not done:
            return None
        step = done[-2] if len(done) > 1 else done[-1]   # one with a next step, whose forward pass shows
        return {"step": step, "weight_return": "chunks" if self.chunked else "whole",
                "intervals": [dict(e) for e in self.traces[step]]}

    def send(self, proc: VProc, rank: int, step: int, args: tuple) -> None:
        lo, hi = args[2], args[3]
        n_bytes = self.costs.share_bytes(lo, hi)
        start = max(proc.now(), self.up[rank])
        arrive = self.up[rank] = start + self.costs.message(n_bytes)
        self._trace(step, "d2h", rank, lo, hi, start, arrive)
        self.sched.at(arrive, lambda: self._deliver(arrive, step, args, n_bytes))

    def _deliver(self, arrive: float, step: int, args: tuple, n_bytes: float) -> None:
        start = max(arrive, self.free)
        # add the part into the chunk's sum (one pass); the chunk's update (update_passes) is
        # charged with each part's share, so a chunk is updated when its last part is in
        passes = 1.0 + self.core.opt.passes / len(self.up)   # the master's own rule
        self.free = self.clock_now = start + passes * n_bytes / self.costs.master_bw
        lo, hi = args[2], args[3]
        self._trace(step, "update", args[1], lo, hi, start, self.free)
        whole = self.core.add(*args)
        if self.chunked and (lo, hi) not in self.core.parts:
            # this part completed its chunk: the fresh weights of [lo, hi) leave for every
            # device at once, each over its own host->device link, in the order chunks complete
            chunk_bytes = self.costs.share_bytes(lo, hi)
            for r in range(len(self.down)):
                t0 = max(self.free, self.down[r])
                self.down[r] = t0 + self.costs.message(chunk_bytes)
                self._trace(step, "h2d", r, lo, hi, t0, self.down[r])
        if whole:
            self.completed = step
            self.completed_at[step] = self.free
            for p in self.waiting.pop(step, []):
                self.sched.wake(p, self.free)

    def fetch(self, proc: VProc, rank: int, step: int) -> Any:
        """The next forward pass's weights. `weight_return` chunks: every chunk went back
        as soon as it was updated (`_deliver`), lowest layers last, so the forward pass,
        which needs the lowest layers first, waits for the last copy to land and for no
        other; whole: the whole vector is copied once every chunk is updated."""
        proc.now()
        if self.completed < step:
            self.waiting.setdefault(step, []).append(proc)
            proc.block()
        if self.chunked:
            proc.sleep_until(max(proc.t, self.down[rank]))
            return self.core.result()
        t = max(proc.t, self.completed_at.get(step, proc.t), self.down[rank])
        self.down[rank] = t + self.costs.message(self.costs.vector_bytes)
        self._trace(step, "h2d", rank, 0, self.costs.n_params, t, self.down[rank])
        proc.sleep_until(self.down[rank])
        return self.core.result()


class SimChunkMaster:
    def __init__(self, state: SimChunkMasterState, proc: VProc, rank: int):
        self.s, self.proc, self.rank = state, proc, rank

    def push(self, step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
        self.s.send(self.proc, rank, step, (step, rank, lo, hi, np.array(grad, copy=True), lr, loss_w, stop,
                                            compute_s))

    def fetch(self, step: int, rank: int | None = None):
        return self.s.fetch(self.proc, self.rank, step)

    def wait_sent(self) -> None:
        self.proc.sleep_until(max(self.proc.now(), self.s.up[self.rank]))

    def history(self) -> list[int]:
        return list(self.s.core.chunk_history)

    def snapshot(self) -> dict[str, np.ndarray]:
        """The core's state and the master's virtual times (when it and each link are
        free, the clock its tuner reads, when the last step ended): a resumed run's
        virtual times go on from them."""
        s = self.s
        times = [s.free, s.clock_now, s.core.last_done, *s.up, *s.down]
        return {**s.core.snapshot(), "sim.times": np.array(times, np.float64)}

    def restore(self, state: dict[str, Any]) -> None:
        s = self.s
        s.core.restore(state)
        t = [float(v) for v in np.asarray(state["sim.times"]).reshape(-1)]
        P = len(s.up)
        s.free, s.clock_now, s.core.last_done = t[:3]
        s.up, s.down = t[3:3 + P], t[3 + P:3 + 2 * P]


# ------------------------------------------------------------------------------ compute
def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two float arrays of one shape and dtype hold the same bits (-0.0 is not 0.0,
    a NaN equals its own bits): compared as unsigned integers, 8 bytes at a time where the
    length allows, after a look at the first few (different parameters differ there: the
    asynchronous workers' comparisons end at once)."""
    head = min(8, a.shape[0])
    if a[:head].tobytes() != b[:head].tobytes():     # bytes: the same test, a sixth of the ufuncs' time here
        return False
    kind = f"u{a.dtype.itemsize}"
    if a.nbytes % 8 == 0 and a.flags.c_contiguous and b.flags.c_contiguous:
        kind = "u8"
    return bool((a.view(kind) == b.view(kind)).all())


class _Call:
    """One pooled `loss_and_grad`: its operands (the parameters as of the call) and, once
    the pool has computed it, its result or the exception it raised."""

    __slots__ = ("model", "params", "X", "y", "grad_out", "result", "error")

    def __init__(self, model: Any, params: np.ndarray, X: Any, y: Any, grad_out: Any):
        self.model, self.params, self.X, self.y, self.grad_out = model, params, X, y, grad_out
        self.result: Any = None
        self.error: BaseException | None = None


class ComputePool:
    """The virtual workers' `loss_and_grad` calls, computed together when one is needed.

    A call's result is needed at the end of its compute, `total` virtual seconds after it
    starts, not at its start. So a worker's call hands in its operands (a copy of its
    parameters, or the pool's first one when bitwise equal: sync_sgd's and cgdp's replicas)
    and its clock goes on to the compute's end (`charge` + `now`: the call's virtual time, as
    on the spot); meanwhile the other workers run up to that moment, and those that start a
    compute add theirs to the pool. When the first of them resumes, or at once where
    nothing is due before the compute's end, every pooled call is computed, in one pass per
    group of the same model and batch shape (`MLP.loss_and_grad_stacked`: identical
    parameters broadcast, different ones stacked). Workers ready at the same virtual
    instant (a synchronous step) and asynchronous workers whose computes overlap in virtual
    time (async_sgd, Hogwild, the EASGD family: staggered starts, each compute spanning
    the others') are batched alike.

    Bitwise the same run as computing each call on the spot (`SimTransport(batch_compute=False)`):
    the stacked maths is bitwise K plain calls (`tests/test_models.py`), the operands are
    fixed when the call is made (the parameters copied; the batch is the worker's own
    gather), and nothing else can see a result before its worker has it: the worker is
    suspended from its call to the compute's end, and the event order (its clock reaching
    the compute's end, in the heap's order) is the same as on the spot. Models without a
    stacked pass (the CNN) are computed call by call, at the same point."""

    MAX_STACK = 256   # calls of different parameters per stacked pass (bounds the stacked copies' memory)
    KEEP_ELEMENTS = 1 << 22   # stacking buffers kept between passes up to this many elements each (16 MB of float32)

    def __init__(self, sched: Scheduler):
        self.sched = sched
        self.calls: list[_Call] = []
        self.flushes = self.pooled = 0
        self.arch: dict[int, tuple | None] = {}   # id(model) -> (type, describe()): built once per worker
        # (n params, batch shape, dtypes) -> [capacity, params, X, y, grads]: the stacked pass's
        # operands, written in place every pass. Fresh ones each pass cost more than the maths at
        # 64 x 32 rows here (every pass page-faulted its MBs in anew); the values are the same.
        self.buffers: dict[tuple, list[Any]] = {}

    def submit(self, proc: VProc, model: Any, params: np.ndarray, X: Any, y: Any, grad_out: Any,
               total: float) -> tuple[float, Any]:
        """`model.loss_and_grad(params, X, y, grad_out)` for `proc`, charged `total` virtual seconds."""
        calls = self.calls
        first = calls[0].params if calls else None
        if first is not None and first.shape == params.shape and first.dtype == params.dtype \
                and params.dtype.kind == "f" and _bitwise_equal(params, first):
            mine = first
        else:
            mine = np.array(params, copy=True)
        call = _Call(model, mine, X, y, grad_out)
        calls.append(call)
        proc.charge(total)
        proc.now()                      # to the compute's end; others compute (and pool) meanwhile
        if call.result is None and call.error is None:
            self.flush()
        if call.error is not None:
            raise call.error
        return call.result

    def flush(self) -> None:
        """Compute every pooled call (one pass per group), results into their calls."""
        calls, self.calls = self.calls, []
        self.flushes += 1
        self.pooled += len(calls)
        groups: dict[tuple, list[_Call]] = {}
        for i, call in enumerate(calls):
            model = call.model
            arch = self.arch.get(id(model))   # the workers' models live as long as the run (and the pool)
            if arch is None:
                arch = self.arch[id(model)] = (type(model), model.describe()) \
                    if hasattr(model, "loss_and_grad_stacked") else ("one",)
            key = (*arch, call.X.shape, call.params.dtype.str) if arch[0] != "one" else ("one", i)
            groups.setdefault(key, []).append(call)
        for members in groups.values():
            first = members[0].params
            if len(members) > 1 and all(c.params is first for c in members[1:]):
                self._stacked(members, first)                    # shared parameters: one pass
                continue
            for lo in range(0, len(members), self.MAX_STACK):
                part = members[lo:lo + self.MAX_STACK]
                if len(part) == 1:
                    self._one(part[0])
                else:
                    self._stacked(part, None)

    @staticmethod
    def _one(call: _Call) -> None:
        try:
            call.result = call.model.loss_and_grad(call.params, call.X, call.y, grad_out=call.grad_out)
        except Exception as exc:        # raised in its own worker, as on the spot
            call.error = exc

    def _operands(self, members: list[_Call], shared: np.ndarray | None) -> tuple[Any, Any, Any, Any]:
        """The stacked (params, X, y, grads) of `members`: the first K rows of buffers kept
        between passes (grown by doubling), or fresh arrays where they would be big."""
        first, X0, y0 = members[0].params, members[0].X, members[0].y
        K, n = len(members), first.shape[0]
        if not (isinstance(X0, np.ndarray) and isinstance(y0, np.ndarray)) or \
                max(n, X0.size) * K > self.KEEP_ELEMENTS:
            params = shared if shared is not None else np.stack([c.params for c in members])
            X = np.stack([c.X for c in members])
            if X.dtype != first.dtype:
                X = X.astype(first.dtype)    # as loss_and_grad casts each batch (elementwise: the same values)
            return params, X, np.stack([c.y for c in members]), np.empty((K, n), first.dtype)
        key = (n, X0.shape, y0.shape, first.dtype.str, y0.dtype.str)
        bufs = self.buffers.get(key)
        if bufs is None or bufs[0] < K:
            cap = min(max(K, 2 * bufs[0] if bufs else 8), self.MAX_STACK)
            bufs = self.buffers[key] = [cap, np.empty((cap, n), first.dtype), np.empty((cap, *X0.shape), first.dtype),
                                        np.empty((cap, *y0.shape), y0.dtype), np.empty((cap, n), first.dtype), {}]
        cut = bufs[5].get(K)
        if cut is None:     # the same view objects every pass of K calls: the model keeps its views of them
            cut = bufs[5][K] = tuple(b[:K] for b in bufs[1:5])
        P, X, y, G = cut
        for k, c in enumerate(members):      # a mismatched operand raises here, as np.stack would
            if shared is None:
                P[k] = c.params
            X[k] = c.X                       # cast to params' dtype as loss_and_grad casts each batch
            y[k] = c.y
        return (shared if shared is not None else P), X, y, G

    def _stacked(self, members: list[_Call], shared: np.ndarray | None) -> None:
        try:
            params, X, y, grads = self._operands(members, shared)
            losses = members[0].model.loss_and_grad_stacked(params, X, y, grads)
        except Exception:               # a bad operand: each call on its own, so its worker gets its error
            for c in members:
                self._one(c)
            return
        for k, c in enumerate(members):
            grad_out = c.grad_out
            if grad_out is None:
                grad_out = grads[k].copy()
            else:
                grad_out[...] = grads[k]
            c.result = (float(losses[k]), grad_out)


class SimModel:
    """A worker's model whose `loss_and_grad` charges virtual compute time (the maths is
    the model's own, computed in the pool or on the spot); its clock is at the compute's
    end when the call returns. With `on_grad_ready` the layers' gradients become ready at
    their moments of the backward pass (cgdp's chunks leave then)."""

    def __init__(self, model: Any, proc: VProc, costs: SimCosts, rank: int, pool: ComputePool | None = None):
        self._model, self._proc, self._costs, self._rank, self._pool = model, proc, costs, rank, pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def loss_and_grad(self, params: Any, X: Any, y: Any, grad_out: Any = None, on_grad_ready: Any = None):
        proc, costs = self._proc, self._costs
        total = costs.compute(self._rank, len(X))
        if on_grad_ready is None:
            if self._pool is not None and isinstance(params, np.ndarray):
                return self._pool.submit(proc, self._model, params, X, y, grad_out, total)
            out = self._model.loss_and_grad(params, X, y, grad_out=grad_out)
            proc.charge(total)
            proc.now()
            return out
        t0 = proc.now()
        last = total * costs.last_pass_share(self._rank, len(X))   # micro-batches: the layers finish in the last
        begin = t0 + total - last
        fwd = last * costs.forward_share()
        n, done = self._model.n_params, [0]

        def ready(start: int, stop: int) -> None:
            done[0] += stop - start
            t_ready = begin + fwd + (last - fwd) * costs.backward_done(done[0] / n)
            proc.charge(max(0.0, t_ready - proc.t - proc.pending))
            proc.now()
            on_grad_ready(start, stop)

        out = self._model.loss_and_grad(params, X, y, grad_out=grad_out, on_grad_ready=ready)
        proc.charge(max(0.0, t0 + total - proc.t - proc.pending))
        return out


class SimEvaluator:
    """A worker's evaluator whose tournament score (`accuracy`, what LTFB's leader scores its
    own and its partner's model by) charges virtual time, a forward pass over the rows
    (`SimCosts.score`), as a real leader spends it (LTFB books it in the step's compute_s).
    The run's evaluations at eval steps (`__call__`, `partial`) are charged as before."""

    def __init__(self, evaluator: Any, proc: VProc, costs: SimCosts, rank: int):
        self._evaluator, self._proc, self._costs, self._rank = evaluator, proc, costs, rank

    def __getattr__(self, name: str) -> Any:
        return getattr(self._evaluator, name)

    def __call__(self, params: Any) -> dict[str, float]:
        return self._evaluator(params)

    def accuracy(self, params: Any, X: Any, y: Any) -> float:
        out = self._evaluator.accuracy(params, X, y)
        self._proc.charge(self._costs.score(self._rank, X.shape[0]))
        self._proc.now()
        return out


# ------------------------------------------------------------------------------ the transport
class SimTransport(Transport):
    name = "sim"
    restores_clock = True   # a resumed worker's virtual clock goes on from its checkpoint's reading

    def __init__(self, link: Any = None, batch_compute: bool = True, lockstep: bool = True) -> None:
        self.link = link             # a costmodel.Network replacing the config's named network (validation)
        self.batch_compute = batch_compute   # the workers of one virtual instant compute together (ComputePool)
        self.lockstep = lockstep     # every worker in one loop where it applies (sim.lockstep, sim.server)
        self.path = ""               # how the run was simulated: "lockstep" or "per worker"
        self.control = ThreadControl()
        self.reports = Reports(lambda rank: f"virtual worker {rank}")
        self.thread: threading.Thread | None = None
        self.size = 0
        self.cancelled = False
        self.sim_wall_s = 0.0
        self.makespan = 0.0
        self.costs: SimCosts | None = None
        self.pool: ComputePool | None = None
        self.stacked: tuple[int, int] | None = None   # the EASGD lockstep's (stacked passes, local steps)

    def again(self) -> SimTransport:
        return SimTransport(link=self.link, batch_compute=self.batch_compute, lockstep=self.lockstep)

    def choose(self, config: RunConfig) -> list[dict]:
        gpus = config.gpus if isinstance(config.gpus, int) else 0
        size = gpus + config.cpus
        if not 1 <= size <= MAX_WORKERS:
            raise ConfigError("cpus", f"1 to {MAX_WORKERS} virtual workers in total (cpus + gpus)", size)
        return ([{"name": f"sim-gpu-{i}", "kind": "gpu", "host": "sim"} for i in range(gpus)]
                + [{"name": f"sim-cpu-{i}", "kind": "cpu", "host": "sim"} for i in range(config.cpus)])

    def prepare(self, setup: RunSetup) -> None:
        from ..problem import Problem
        self.setup, self.size = setup, setup.size
        self.costs = make_costs(setup.config, setup.model, setup.kinds, Problem.from_config(setup.config).data,
                                link=self.link)

    def start(self, setup: RunSetup, sink: Callable[[dict], None], main: Callable[..., dict]) -> None:
        self.thread = threading.Thread(target=self._drive, args=(setup, sink, main), name="workbench-sim",
                                       daemon=True)
        self.thread.start()

    def _drive(self, setup: RunSetup, sink: Callable[[dict], None], main: Callable[..., dict]) -> None:
        t0 = time.perf_counter()
        sched = Scheduler()
        costs, needs, size = self.costs, setup.spec.needs, setup.size
        groups = [SimGroup(len(ranks), costs, sched) for ranks in setup.groups] if needs.collective else []
        # this host's shared memory offers what comm.shm does (no chain: sync_easgd's one allreduce)
        comm_cls = SimComm if costs.allreduce == "shm" else SimChainComm
        server_state: Any = None
        if needs.server == "cgdp_master":
            server_state = SimChunkMasterState(setup, costs, sched)
        elif needs.server is not None:
            server_state = SimServerState(make_core(needs.server, needs.options(setup.config, setup.model), setup.params0, size),
                                          costs, sched)
        shared = {name: LocalArray(setup.params0.copy()) for name in needs.shared}
        self.server_state = server_state
        cpu_kinds = ["cpu"] * size      # the maths runs on this machine's NumPy whatever the virtual device
        pool = self.pool = ComputePool(sched) if self.batch_compute else None

        def work(rank: int) -> Callable[[VProc], None]:
            def body(proc: VProc) -> None:
                gi, ranks = setup.group_of(rank)
                comm = comm_cls(groups[gi], ranks.index(rank), proc) if groups and gi >= 0 else None
                if isinstance(server_state, SimChunkMasterState):
                    server: Any = SimChunkMaster(server_state, proc, rank)
                elif server_state is not None:
                    server = SimServer(server_state, proc)
                else:
                    server = None
                links = WorkerLinks(comm=comm, server=server, shared=shared, control=self.control,
                                    start_barrier=lambda: [], timer=proc.now,
                                    adapt=lambda ctx: self._adapt(ctx, proc, costs, rank, pool))
                try:
                    result = main(setup.config, rank, cpu_kinds, setup.groups, setup.extra, setup.t0_wall, links,
                                  sink, resume=setup.resume_of(rank))
                except Killed as exc:
                    # Lost, as a real worker is; but nothing here depends on when live batches
                    # happened to leave (wall time), so its whole log up to the kill is kept:
                    # a run with a kill is as deterministic as one without.
                    self.reports.vanish(rank, getattr(exc, "workbench_steps", None), at=proc.sched.now)
                    return
                except Exception as exc:   # set-up failed before the loop could report it
                    result = failed_loop(exc)
                self.makespan = max(self.makespan, proc.t)
                self.reports.returned(rank, result)
            return body

        refusal = lockstep_refusal(setup, costs) if self.lockstep and self.batch_compute else "not asked for"
        if refusal is None:      # every rank's step in one loop, bitwise the per-worker run (sim.lockstep)
            self.path = "lockstep"
            driver = FAST_DRIVERS[setup.spec.fast_path](self, setup, sink, costs)
            procs = [sched.spawn(driver.body, name="worker 0")]
        else:
            self.path = "per worker"
            procs = [sched.spawn(work(r), name=f"worker {r}") for r in range(size)]
            for rank, p in enumerate(procs):
                part = setup.resume_of(rank)
                if part is not None:      # a resumed worker: its clock where its checkpoint read it
                    p.t = float(part["clock"])
                    if "sim.jitter" in part["state"]:
                        costs.rngs[rank].bit_generator.state = part["state"]["sim.jitter"]
        failures = (setup.extra.get("elastic") or {}).get("fail")   # an elastic run's: by rank now
        if failures is None:   # a resumed run's faults that fired before do not fire again (`engine._take_up`)
            failures = {r: at for r, at in setup.config.failures.items() if r not in setup.spent}
        for rank, at in (failures or {}).items():
            sched.kill(procs[rank], at, on_killed=lambda p, r=rank: self._killed(r, p))
        sched.between = self._between(sched)
        try:
            # One BLAS thread while the workers compute, as each real worker process has
            # (make_cluster) and as the local profile was timed: a virtual CPU worker is
            # one core. Also a matter of speed: a worker's matmuls are small, and on a
            # busy machine a second BLAS thread makes one of 160 rows (a worker's share of
            # an evaluation) take milliseconds instead of microseconds, waiting for a core.
            with _one_blas_thread():
                sched.run()
        finally:
            self.sim_wall_s = time.perf_counter() - t0
            for name, exc in sched.errors.items():   # a greenlet ended by something the body did not catch
                rank = int(name.split()[-1])
                if not self.reports.known(rank):
                    self.reports.returned(rank, {"status": "failed", "params": None,
                                                 "error": f"{type(exc).__name__}: {exc}"})

    def _adapt(self, ctx: Any, proc: VProc, costs: SimCosts, rank: int, pool: ComputePool | None) -> None:
        """A virtual worker's context: its model charges virtual time (and computes in the
        pool); its live batches leave every FLUSH_S x P/16 of wall time, so the run sends a
        few dozen a second in all whatever P (1024 workers flushing 4 times a second each
        cost more than their steps, in the driver and in the monitor that drains them), each
        worker at its own phase of that interval (`next_flush`), so they arrive spread out."""
        ctx.model = SimModel(ctx.model, proc, costs, rank, pool)
        if ctx.evaluator is not None:
            ctx.evaluator = SimEvaluator(ctx.evaluator, proc, costs, rank)
        save = ctx.save_state

        def saving(step: int, state: dict, tag: str | None = None) -> None:   # the jitter's generator too
            save(step, {**state, "sim.jitter": costs.rngs[rank].bit_generator.state}, tag=tag)
        ctx.save_state = saving
        interval = FLUSH_S * max(1.0, self.size / 16)
        flush = ctx.flush
        size = self.size

        def paced(done: bool = False, force: bool = False) -> None:
            flush(done=done, force=force)
            ctx._next_flush = next_flush(time.perf_counter(), interval, rank, size)
        ctx.flush = paced

    def _killed(self, rank: int, proc: VProc) -> None:
        # (when it was lost travels with the loss itself: `reports.vanish(..., at=)` in the loop's body)
        self.makespan = max(self.makespan, proc.t)
        state = self.server_state
        if isinstance(state, SimServerState) and "retire" in type(state.core).OPS:
            state.core.retire(rank)              # an asynchronous run's round-robin turns skip it
            state.changed(proc.sched.now)

    def _between(self, sched: Scheduler) -> Callable[[], None]:
        def check() -> None:
            if self.cancelled:   # the monitor gave up on a stop request: end every loop now
                self.cancelled = False
                for p in sched.procs:
                    if not p.done:
                        p.blocked = False
                        sched._resume(p, throw=WorkerLost("run cancelled"))
        return check

    def poll(self) -> Progress:
        return self.reports.poll()

    def pending(self) -> set[int]:
        return self.reports.pending(self.size)

    def request_stop(self, reason: str) -> None:
        self.control.request_stop(reason)

    def abort(self, reason: str) -> None:
        # A lost or failed worker of a synchronous run: its peers block for it in virtual
        # time and the driver ends them with WorkerLost (deterministically); nothing to do.
        return None

    def finish(self) -> Progress:
        if self.thread is not None:
            self.thread.join(timeout=30.0)
        return self.poll()

    def cancel(self) -> None:
        self.cancelled = True

    def wall_time(self, real_s: float) -> float:
        return self.makespan

    def roles(self) -> list[dict[str, Any]]:
        """The host-side role the algorithm declares (a parameter server, the elastic
        centre, LTFB's mailbox, cgdp's master): served by the virtual host, not a compute
        worker (it computes no gradients and takes no share of a batch)."""
        server = self.setup.spec.needs.server
        if server is None:
            return []
        c = self.setup.config
        if server == "cgdp_master":
            where = f"host memory at {self.costs.master_bw / 1e9:.3g} GB/s ({c.cpu_device} profile)"
        else:
            where = "one host core over the network"
        return [{"role": server.replace("_", " "), "host": "sim-host", "runs_on": where}]

    def describe(self) -> dict[str, Any]:
        c = self.setup.config
        return {"comm": "sim", "simulated": True, "time_unit": "virtual seconds", "roles": self.roles(),
                "device": (c.device or SIM_DEFAULT_DEVICE) if any(k == "gpu" for k in self.setup.kinds) else None,
                "cpu_device": c.cpu_device if any(k == "cpu" for k in self.setup.kinds) else None,
                "partitions": c.partitions,
                "calibration": self.costs.calibration if self.costs is not None else None,
                "network": default_network(c) if self.link is None else
                f"{self.link.name} (alpha {self.link.alpha * 1e6:.3g} us, {1 / self.link.beta / 1e9:.3g} GB/s)",
                "timing_model": c.timing_model or c.model,
                "compute_charged_by": self.costs.charged_by if self.costs is not None else None,
                "jitter": c.jitter, "sim_wall_s": round(self.sim_wall_s, 4), "sim_path": self.path,
                # what one sync_sgd step's gradient allreduce costs on this cluster (`costs.comm_against_sync`)
                "sync_allreduce_s": self.costs.allreduce_s(len(self.setup.kinds), self.setup.n_params)
                if self.costs is not None else None,
                # the allreduce charged (`SimCosts.allreduce`): "shm" where the network is this host's
                # shared memory, its meetings as `comm.shm`'s; read back by `costmodel.run_allreduce`
                "sim_allreduce": self.costs.allreduce if self.costs is not None else None,
                "sim_computes_per_pass": self.computes_per_pass(),
                **({"cgdp_timeline": self.server_state.timeline()}
                   if isinstance(getattr(self, "server_state", None), SimChunkMasterState) else {})}

    def computes_per_pass(self) -> float | None:
        """How many workers' `loss_and_grad` calls the pool computed together, on average
        (None where it computed none: sync_sgd's and hogwild_sgd's lockstep compute every
        worker at once; the EASGD lockstep's stacked passes give their own average).
        What an asynchronous run's timing lets it batch: async_sgd's server serialises the
        pushes, so only the computes that overlap one push's service share a pass."""
        stacked = self.stacked
        if stacked is not None and stacked[0]:
            return round(stacked[1] / stacked[0], 2)
        pool = self.pool
        if pool is None or not pool.flushes:
            return None
        return round(pool.pooled / pool.flushes, 2)

    def public(self, worker: dict, rank: int) -> dict:
        out = super().public(worker, rank)
        if self.costs is not None:
            out["device"] = self.costs.devices[rank].name
        return out
