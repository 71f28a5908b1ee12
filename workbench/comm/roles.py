"""The server roles' maths, each written once, front-end free.

An algorithm that needs a server declares a role (`AlgorithmSpec.needs.server`); the
transport puts the role's core behind a front-end that only serialises calls and moves
bytes. Each core below states its operations once, as a table (`OPS`, of
`base.RoleOp`: what a call waits for, whether it changes what others wait for, the
arrays it moves, the memory passes it costs the server), and one generic front-end per
transport serves any core from its table (`base.ServerRole`): a lock between threads
(`threads.ThreadServer`), a Dask actor (`dask.ServerActor`), shared memory between the
processes of one host (`shm.ShmServer`, whose state arrays are views of a segment that
the core updates in place), the simulator's virtual clock (`SimServer`). cgdp's master states its table too and
is served by the generic front-ends on threads and Dask (`ThreadChunkMaster` adds the
per-chunk weight return on threads); in shared memory (`ShmChunkMaster`, no master
process: the workers reduce the chunks themselves) and on the virtual clock
(`SimChunkMasterState`, per-link transfers) it keeps front-ends of its own.

* `ParameterServer`: the `parameter_server` role (pull; push applies the shared SGD rule
  with momentum / Nesterov / weight decay and counts staleness) and the `elastic_centre`
  role (the EASGD exchange, FCFS or in round-robin turns that skip retired workers).
* `TournamentMailbox`: the `tournament` role (LTFB partners deposit and collect models;
  a departed trainer leaves nothing to wait for).
* `ModelTable`: the `pairwise` role (AD-PSGD: every worker's model, and the atomic
  average of two of them).
* `ChunkMaster`: the `cgdp_master` role (CGDP's host-side master: per-chunk sums in rank
  order, per-chunk updates, the step's outcome, the run-time chunk size `ChunkTuner`);
  it times iterations with the clock it is given, so a virtual clock can drive it.

Cores are not thread-safe by themselves: front-ends serialise calls.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..maths.optim import Optimizer, OptimizerSettings, make_optimizer, state_spec, whole_layout
from .base import RoleOp

H_VERSION, H_TURN, N_HEADER = 0, 1, 2   # ParameterServer's int64 header slots


# ------------------------------------------------------------------------------ the update rule of a role
def role_optimizer(n: int, dtype: Any, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
                   optimizer: OptimizerSettings | None = None, layout: Any = None,
                   state: dict[str, Any] | None = None) -> Optimizer:
    """A role's update rule: `optimizer` (settings from the config, with the model's
    `layout`), or plain SGD from momentum / nesterov / weight_decay; its state arrays
    are those `state` holds (views of a shared segment), else fresh."""
    settings = optimizer or OptimizerSettings("sgd", momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    if layout is None:
        if settings.optimizer != "sgd":
            raise ValueError(f"layout: the model's layer layout for the {settings.optimizer} update, got None")
        layout = whole_layout(n)
    given = {k: v for k, v in (state or {}).items() if v is not None}
    return make_optimizer(settings, layout, np, dtype, state=given)


def role_state_spec(n: int, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
                    optimizer: OptimizerSettings | None = None, layout: Any = None,
                    **_: Any) -> list[tuple[str, tuple[int, ...], str]]:
    """The optimiser state arrays a role with these options keeps (a shared-memory
    front-end allots them in its segment)."""
    settings = optimizer or OptimizerSettings("sgd", momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    return state_spec(settings, layout if layout is not None else whole_layout(n))


# ------------------------------------------------------------------------------ parameter server / centre
def elastic_difference(x_worker: Any, centre: Any, alpha: float, out: Any = None, xp: Any = np) -> Any:
    """EASGD's elastic difference d = alpha (x_i - xc), into `out` (else a new array):
    the worker subtracts it from x_i, the centre adds it (sync_easgd: every worker's, summed).
    Every member of the family computes it here (`xp`: NumPy or CuPy).

    >>> elastic_difference(np.array([3.0, 1.0]), np.array([1.0, 1.0]), 0.5).tolist()
    [1.0, 0.0]
    """
    if out is None:
        return alpha * (x_worker - centre)
    xp.subtract(x_worker, centre, out=out)
    out *= alpha
    return out
def server_state(params: np.ndarray, size: int, momentum: bool) -> dict[str, Any]:
    """Fresh state arrays of a ParameterServer (a shared-memory front-end maps its own)."""
    return {"x": np.array(params, copy=True), "velocity": np.zeros_like(params) if momentum else None,
            "header": np.zeros(N_HEADER, np.int64), "retired": np.zeros(size, np.int8)}


def _whole(core: Any, *_: Any, **__: Any) -> tuple[int, ...]:
    return (core.x.shape[0],)


def _copy_out(core: Any, *_: Any, **__: Any) -> tuple[float, int | None]:
    return 1.0, None                   # one pass through the vector


class ParameterServer:
    """Parameters (or the EASGD centre) updated by pushed gradients or elastic exchanges.

    State: `x`, the optimiser's state (momentum, Adam's moments: they live here, not on
    the workers; the rule is `optimizer` with `layout`, else SGD), a version counter (updates applied: staleness = version at push - version at pull), the
    round-robin turn and which workers retired. `state` hands in those arrays (views of a
    shared segment); by default they are fresh copies.
    """

    def __init__(self, params: np.ndarray | None, size: int = 1, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, *, optimizer: OptimizerSettings | None = None, layout: Any = None,
                 state: dict[str, Any] | None = None):
        state = state or server_state(params, size, momentum > 0)
        self.x, self.header, self.retired = state["x"], state["header"], state["retired"]
        self.size = size
        opt_state = {k: v for k, v in state.items() if k not in ("x", "header", "retired")}
        self.opt = role_optimizer(self.x.shape[0], self.x.dtype, momentum, nesterov, weight_decay, optimizer, layout,
                                  opt_state)

    ROLE = "parameter_server"   # and "elastic_centre": one core, the algorithm calls its own ops
    OPS = {op.name: op for op in (
        RoleOp("pull", "pull", sizes_out=_whole, work=_copy_out),
        RoleOp("push", "push", sizes_in=lambda grad, *_, **__: (len(grad),), sizes_out=_whole,
               work=lambda core, grad, *_, **__: (core.opt.passes, len(grad))),
        # FCFS without a rank; with one, strictly in rank order (original EASGD)
        RoleOp("elastic", "exchange", ready=lambda core, x, alpha, rank=None: core.my_turn(rank),
               turn=lambda x, alpha, rank=None: rank, changes=True,
               sizes_in=lambda x, *_, **__: (len(x),), sizes_out=lambda core, x, *_, **__: (len(x),),
               work=lambda core, x, *_, **__: (3.0, len(x)), what="elastic turn"),
        # round-robin: a finished (or lost) worker gives up its turns so the rest are not blocked
        RoleOp("retire", "retire", changes=True, notice=True),
        RoleOp("centre", "centre", sizes_out=_whole, work=_copy_out),
        # the run's result: x once every worker has retired (after every worker's last update)
        RoleOp("final", "final", ready=lambda core: core.all_retired(), sizes_out=_whole, work=_copy_out,
               what="the other workers' last updates"),
        # checkpoints: rank 0 reads the whole state, and puts it back before a resumed run starts
        RoleOp("snapshot", "snapshot", sizes_out=lambda core: (len(core.x),) + tuple(
            a.size for a in core.opt.state.values() if a.size > 1), work=_copy_out),
        RoleOp("restore", "restore", changes=True, sizes_in=lambda state: tuple(
            int(np.asarray(v).size) for v in state.values() if np.asarray(v).size > 1),
               work=lambda core, state: (1.0, None)),
    )}

    def snapshot(self) -> dict[str, np.ndarray]:
        """The parameters (or centre), the update rule's state and the version, copied."""
        return {"x": self.x.copy(), "version": np.array([self.version], np.int64),
                **{f"opt.{k}": v.copy() for k, v in self.opt.state.items()}}

    def restore(self, state: dict[str, Any]) -> None:
        """Take up a `snapshot` (in place: a shared segment's views stay views). Every
        worker is there again, and a round-robin starts at rank 0, as a fresh run does."""
        self.x[...] = state["x"]
        self.header[H_VERSION] = int(np.asarray(state["version"]).reshape(-1)[0])
        self.header[H_TURN] = 0
        self.retired[...] = 0
        for k, a in self.opt.state.items():
            a[...] = state[f"opt.{k}"]

    @property
    def version(self) -> int:
        return int(self.header[H_VERSION])

    @property
    def turn(self) -> int:
        return int(self.header[H_TURN])

    def pull(self) -> tuple[int, np.ndarray]:
        """Current version and a copy of the parameters."""
        return self.version, self.x.copy()

    def push(self, grad: np.ndarray, lr: float, version: int) -> tuple[int, np.ndarray, int]:
        """Apply `x -= lr g` through the optimiser (momentum, Nesterov, weight decay);
        returns the new version, fresh parameters and the staleness of `grad`."""
        out = np.empty_like(self.x)
        new, staleness = self.push_into(grad, lr, version, out)
        return new, out, staleness

    def push_into(self, grad: np.ndarray, lr: float, version: int, out: np.ndarray) -> tuple[int, int]:
        """`push` with the fresh parameters written into `out`; returns the new version and
        the staleness: its maths (`apply_push`) and its count (`count_push`)."""
        self.apply_push(grad, lr, out)
        return self.count_push(version)

    def apply_push(self, grad: np.ndarray, lr: float, out: np.ndarray) -> None:
        """A push's maths: `x -= lr g` through the rule, the fresh parameters into `out`.
        (The simulator's replay runs the counts of every op in virtual-time order first,
        and the maths behind them, in the same server order.)"""
        self.opt.step(self.x, grad, lr)
        np.copyto(out, self.x)

    def count_push(self, version: int) -> tuple[int, int]:
        """A push's count: one more update applied; returns the new version and the
        staleness of a gradient taken at `version`."""
        staleness = self.version - version
        self.header[H_VERSION] += 1
        return self.version, staleness

    @property
    def plain(self) -> bool:
        """The update is `x -= lr g` alone (no momentum, no weight decay): `lr g` needs no
        server state, so a front-end may compute it before taking its lock (`scaled`)."""
        return self.opt.name == "sgd" and self.opt.velocity is None and not self.opt.weight_decay

    def scaled(self, grad: np.ndarray, lr: float) -> np.ndarray:
        """`lr g` in this core's scratch buffer, the first half of a plain update (the
        optimiser's own operation, so `push_scaled` then gives exactly `push`'s result)."""
        np.multiply(grad, lr, out=self.opt._g)
        return self.opt._g

    def push_scaled(self, step: np.ndarray, version: int) -> tuple[int, np.ndarray, int]:
        """`push` of a plain update whose `lr g` (`scaled`) was computed beforehand."""
        staleness = self.version - version
        self.x -= step
        self.header[H_VERSION] += 1
        return self.version, self.x.copy(), staleness

    def elastic(self, x_worker: np.ndarray, alpha: float) -> np.ndarray:
        """EASGD: d = alpha (x_i - xc); xc += d; returns d (the worker subtracts it)."""
        d = self.apply_exchange(x_worker, alpha)
        self.header[H_VERSION] += 1
        return d

    def apply_exchange(self, x_worker: np.ndarray, alpha: float, out: np.ndarray | None = None) -> np.ndarray:
        """An elastic exchange's maths on the centre: d = alpha (x_i - xc) (into `out`),
        xc += d; returns d."""
        d = elastic_difference(x_worker, self.x, alpha, out)
        self.x += d
        return d

    def centre(self) -> np.ndarray:
        return self.x.copy()

    def all_retired(self) -> bool:
        """Every worker has ended (retired itself, or was retired as lost)."""
        return bool(self.retired.all())

    def final(self) -> np.ndarray:
        """The parameters once `all_retired()` (front-ends wait for it): what the run ends with."""
        return self.x.copy()

    def my_turn(self, rank: int | None) -> bool:
        """Whether an exchange of `rank` may go now (None: FCFS, always)."""
        return rank is None or self.turn == rank

    def exchange(self, x_worker: np.ndarray, alpha: float, rank: int | None = None) -> np.ndarray:
        """The elastic exchange once `my_turn(rank)`; round-robin passes the turn on."""
        d = self.apply_exchange(x_worker, alpha)
        self.count_exchange(rank)
        return d

    def count_exchange(self, rank: int | None = None) -> None:
        """An exchange's count: one more update applied; round-robin (`rank` given) passes the turn on."""
        self.header[H_VERSION] += 1
        if rank is not None:
            self.advance_turn()

    def retire(self, rank: int) -> None:
        """Round-robin: `rank` has ended; its turns are skipped from now on."""
        self.advance_turn(retire=rank)

    def advance_turn(self, retire: int | None = None) -> None:
        """Round-robin: pass the turn on (or retire `retire`), skipping retired workers."""
        if retire is not None:
            self.retired[retire] = 1
            turn = self.turn
        else:
            turn = (self.turn + 1) % self.size
        if not self.retired.all():
            while self.retired[turn]:
                turn = (turn + 1) % self.size
        self.header[H_TURN] = turn


# ------------------------------------------------------------------------------ tournament
def _left(params: Any, state: Any) -> tuple[int, ...]:
    return (len(params),) + ((len(state),) if state is not None else ())


class TournamentMailbox:
    """LTFB's exchange: trainers leave their model for a round, partners take it."""

    def __init__(self) -> None:
        self.mailbox: dict[tuple[Any, int], Any] = {}   # (round, trainer) -> what it left
        self.departed: set[int] = set()                # trainers that have ended

    ROLE = "tournament"
    OPS = {op.name: op for op in (
        RoleOp("deposit", "deposit", changes=True,
               sizes_in=lambda rnd, trainer, params, state=None, meta=None: _left(params, state)),
        RoleOp("collect", "collect", ready=lambda core, rnd, trainer: core.can_collect(rnd, trainer),
               sizes_out=lambda core, rnd, trainer: core.left_sizes(rnd, trainer), what="tournament partner"),
        RoleOp("depart", "depart", changes=True, notice=True),
    )}

    def left_sizes(self, rnd: Any, trainer: int) -> tuple[int, ...]:
        """The arrays `collect(rnd, trainer)` would answer with (none when it ended without)."""
        got = self.mailbox.get((rnd, trainer))
        return () if got is None else _left(got[0], got[1])

    def deposit(self, rnd: Any, trainer: int, params: np.ndarray, state: np.ndarray | None = None,
                meta: dict | None = None) -> None:
        """Leave `trainer`'s model of round `rnd` (weights, optimiser state or None, small
        facts). Arrays are separate arguments so that the network emulator charges their bytes."""
        self.mailbox[(rnd, trainer)] = (params, state, meta)

    def can_collect(self, rnd: Any, trainer: int) -> bool:
        """Whether `collect(rnd, trainer)` can answer now (front-ends wait for this)."""
        return (rnd, trainer) in self.mailbox or trainer in self.departed

    def collect(self, rnd: Any, trainer: int) -> tuple[np.ndarray, np.ndarray | None, dict | None] | None:
        """Take (params, state, meta) `trainer` left for round `rnd`; None if it ended without."""
        return self.mailbox.pop((rnd, trainer), None)

    def depart(self, trainer: int) -> None:
        """`trainer` has ended; partners waiting for it get None instead of waiting."""
        self.departed.add(trainer)


# ------------------------------------------------------------------------------ AD-PSGD's models
class ModelTable:
    """AD-PSGD's exchange (Lian et al., ICML 2018): every worker's model, one row each.

    A worker never waits for a peer: it averages its row with a neighbour's in one atomic
    operation (`average`: both rows become their mean, then its own local update is
    applied to its row) and goes on from what its row is then. Rows start at the initial
    parameters. `log` keeps the (rank, peer, step) of every average in the order they
    happened: the pairing sequence that a plain reference loop replays (tests).
    """

    def __init__(self, params: np.ndarray | None, size: int, x: np.ndarray | None = None, log: Any = None):
        # `x` and `log` hand in the rows and the log (a shared-memory front-end's views: the
        # rows of a segment, `shm.SharedLog`); by default a fresh table of `params` and a list
        self.x = x if x is not None else np.tile(np.asarray(params), (size, 1))      # (P, n)
        self.size = size
        self.log: Any = log if log is not None else []

    ROLE = "pairwise"
    OPS = {op.name: op for op in (
        # x_i, x_j <- (x_i + x_j) / 2; x_i -= update: the worker's update in, its new row out
        RoleOp("average", "average", sizes_in=lambda rank, peer, update, step=-1: (len(update),),
               sizes_out=lambda core, rank, peer, update, step=-1: (len(update),),
               work=lambda core, rank, peer, update, step=-1: (5.0, len(update))),  # read 3 rows, write 2
        RoleOp("model", "model", sizes_out=lambda core, rank: (core.x.shape[1],),
               work=lambda core, rank: (1.0, core.x.shape[1])),
        # the workers' mean and their consensus distance (what rank 0 evaluates)
        RoleOp("mean", "mean", sizes_out=lambda core: (core.x.shape[1],),
               work=lambda core: (float(core.size), core.x.shape[1])),
        # checkpoints: every row, read by rank 0 and put back before a resumed run starts
        RoleOp("snapshot", "snapshot", sizes_out=lambda core: (core.x.size,), work=lambda core: (1.0, core.x.size)),
        RoleOp("restore", "restore", changes=True, sizes_in=lambda state: (state["rows"].size,),
               work=lambda core, state: (1.0, core.x.size)),
    )}

    def snapshot(self) -> dict[str, np.ndarray]:
        """Every worker's row, copied."""
        return {"rows": self.x.copy()}

    def restore(self, state: dict[str, Any]) -> None:
        """Take up a `snapshot`'s rows (in place). The log of averages starts again empty."""
        self.x[...] = state["rows"]

    def average(self, rank: int, peer: int, update: np.ndarray, step: int = -1) -> np.ndarray:
        """Atomically: rows `rank` and `peer` become their mean, then row `rank` -= `update`
        (its local step, taken at the model it last had); returns a copy of row `rank`."""
        x = self.x
        if peer != rank:
            x[rank] += x[peer]
            x[rank] *= 0.5
            x[peer] = x[rank]
        x[rank] -= update
        self.log.append((rank, peer, step))
        return x[rank].copy()

    def model(self, rank: int) -> np.ndarray:
        return self.x[rank].copy()

    def mean(self) -> tuple[np.ndarray, float]:
        """The workers' average x_bar and the consensus distance (1/P) sum_i ||x_i - x_bar||^2."""
        xbar = self.x.mean(axis=0, dtype=np.float64)
        return xbar.astype(self.x.dtype), float(((self.x - xbar) ** 2).sum() / self.size)


# ------------------------------------------------------------------------------ cgdp master
TUNE_STEPS = 4       # iterations timed per chunk size while auto-tuning (after a warm-up step)


def chunk_bounds(groups: Sequence[tuple[int, int]], chunk_layers: int) -> list[tuple[int, int]]:
    """Flat-vector slices of each chunk, in BACKWARD order (last layers first).

    >>> chunk_bounds([(0, 10), (10, 15), (15, 18)], 2)
    [(10, 18), (0, 10)]
    """
    back = list(reversed(groups))
    chunks = []
    for i in range(0, len(back), chunk_layers):
        part = back[i:i + chunk_layers]
        chunks.append((min(lo for lo, _ in part), max(hi for _, hi in part)))
    return chunks


class ChunkTuner:
    """Grow the chunk while iterations get faster; keep the best (the paper's rule).

    >>> t = ChunkTuner("auto", 3)
    >>> [t.observe(s) for s in [9, 1, 1, 1, 1] + [9, 2, 2, 2, 2]]   # 2 layers per chunk is slower
    [1, 1, 1, 1, 2, 2, 2, 2, 2, 1]
    """

    def __init__(self, setting: int | str, n_layers: int):
        self.auto = setting == "auto"
        self.n_layers = n_layers
        self.current = 1 if self.auto else min(int(setting), n_layers)
        self.best: tuple[float, int] | None = None
        self.samples: list[float] = []
        self.done = not self.auto

    def observe(self, step_s: float) -> int:
        """Record one iteration's time; returns the chunk size for the next iteration."""
        if self.done:
            return self.current
        self.samples.append(step_s)
        if len(self.samples) < TUNE_STEPS + 1:
            return self.current
        t = float(np.median(self.samples[1:]))  # the first step after a change warms caches
        self.samples = []
        if self.best is None or t < self.best[0]:
            self.best = (t, self.current)
            if self.current < self.n_layers:
                self.current += 1
                return self.current
        self.current, self.done = self.best[1], True
        return self.current

    def state(self) -> np.ndarray:
        """Where the search is, as one array (a checkpoint's): current, done, the best
        (time, size) so far (NaN, 0: none), the samples of the size being timed.

        >>> t = ChunkTuner("auto", 3); _ = [t.observe(s) for s in [9, 1, 1, 1, 1, 9]]
        >>> u = ChunkTuner("auto", 3); u.load_state(t.state())
        >>> [t.observe(s) for s in [2, 2, 2, 2]] == [u.observe(s) for s in [2, 2, 2, 2]]
        True
        """
        best_t, best_c = self.best if self.best is not None else (float("nan"), 0)
        return np.array([self.current, float(self.done), best_t, best_c, *self.samples], np.float64)

    def load_state(self, state: Any) -> None:
        """Take up `state`'s search."""
        a = np.asarray(state, np.float64).reshape(-1)
        self.current, self.done = int(a[0]), bool(a[1])
        self.best = None if math.isnan(a[2]) else (float(a[2]), int(a[3]))
        self.samples = [float(v) for v in a[4:]]


def sum_in_rank_order(parts: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
    """out = parts[0] + parts[1] + ... in rank order (deterministic sums); returns out."""
    np.copyto(out, parts[0])
    for part in parts[1:]:
        out += part
    return out


def _step_done(core: ChunkMaster, step: int, *_: Any) -> bool:
    return core.completed >= step


class ChunkMaster:
    """CGDP's master: master weights, optimiser and the per-chunk reduction.

    `add` takes one worker's weighted chunk; once every worker's part of a chunk is in,
    it sums them in rank order and updates that chunk of the master weights (a stop
    completes the step it rides on, as every synchronous step's: `base.settle`); once every chunk of the step is done, the step's outcome
    (global loss, stop flag, every worker's compute time) is published and the tuner
    sees the iteration's duration by `clock`. `state` hands in `x` and the velocity
    (views of a shared segment); by default they are fresh copies.

    `weight_return` says how the front-ends hand the fresh weights back (the core's maths
    is the same either way): `chunks`, each chunk's as soon as it is updated (`chunk` waits
    for one chunk; `done_chunk` names the chunk the last `add` completed), or `whole`, the
    whole vector once the step is complete (`fetch`).
    """

    ROLE = "cgdp_master"
    # push: one worker's weighted chunk (completes a chunk, then the step: waiters re-check);
    # fetch: the whole fresh vector and the step's outcome, once the step is complete;
    # outcome: the outcome alone (the weights came back chunk by chunk);
    # chunk: the fresh weights of one chunk, once it is updated (the per-chunk return)
    OPS = {op.name: op for op in (
        RoleOp("push", "add", changes=True, sizes_in=lambda step, rank, lo, hi, *_: (hi - lo,),
               work=lambda core, step, rank, lo, hi, *_: (1.0 + core.opt.passes / core.size, hi - lo)),
        RoleOp("fetch", "result", ready=_step_done, sizes_out=lambda core, *_: (core.x.shape[0],),
               what="chunk master fetch"),
        RoleOp("outcome", "outcome", ready=_step_done, what="chunk master fetch"),
        RoleOp("chunk", "chunk_weights", ready=lambda core, step, lo, hi: core.chunk_ready(step, lo, hi),
               sizes_out=lambda core, step, lo, hi: (hi - lo,), work=lambda core, step, lo, hi: (1.0, hi - lo),
               what="chunk master chunk"),
        RoleOp("history", "history"),
        # checkpoints: rank 0 reads the whole state, and puts it back before a resumed run starts
        RoleOp("snapshot", "snapshot"),
        RoleOp("restore", "restore", changes=True),
    )}

    def __init__(self, params: np.ndarray | None, size: int, groups: list[tuple[int, int]], chunk_layers: int | str,
                 momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0, *,
                 optimizer: OptimizerSettings | None = None, layout: Any = None,
                 clock: Callable[[], float] = time.perf_counter, state: dict[str, Any] | None = None,
                 weight_return: str = "whole"):
        if weight_return not in ("chunks", "whole"):
            raise ValueError(f"weight_return: chunks or whole, got {weight_return!r}")
        self.weight_return = weight_return
        state = state or {"x": np.array(params, copy=True)}
        self.x = state["x"]
        # the optimiser state is master state: shared by the workers, not theirs
        self.opt = role_optimizer(self.x.shape[0], self.x.dtype, momentum, nesterov, weight_decay, optimizer, layout,
                                  {k: v for k, v in state.items() if k != "x"})
        self.size, self.groups = size, [tuple(g) for g in groups]
        self.tuner = ChunkTuner(chunk_layers, len(self.groups))
        self.clock = clock
        self.parts: dict[tuple[int, int], dict[int, np.ndarray]] = {}
        self.step, self.chunks_left, self.loss, self.stop = -1, 0, 0.0, False
        self.losses: dict[int, float] = {}                 # rank -> its weighted loss this step
        self.last_outcome = (0.0, False, [0.0] * size)   # (loss, stop, compute times) of the last completed step
        self.times: dict[int, float] = {}
        self.last_done = clock()
        self.chunk_history: list[int] = []
        self._total = np.empty_like(self.x)
        self.completed = -1                                 # the last step whose every chunk is updated
        self.updated: dict[tuple[int, int], int] = {}      # chunk -> the last step it was updated for
        self.done_chunk: tuple[int, int] | None = None      # the chunk the last `add` completed

    def reduce_chunk(self, parts: Sequence[np.ndarray], lo: int, hi: int, lr: float) -> None:
        """Sum every worker's part of [lo, hi) in rank order and update the master there."""
        total = sum_in_rank_order(parts, self._total[lo:hi])
        self.opt.step_chunk(self.x, total, lr, lo, hi)

    def add(self, step: int, rank: int, lo: int, hi: int, grad: np.ndarray, lr: float,
            loss_w: float = 0.0, stop: bool = False, compute_s: float | None = None) -> bool:
        """One worker's weighted chunk; True when this completed the whole step.

        The stop flag rides on the first chunk sent (rank 0's last layers) and comes
        back with the step's outcome: the loops end after this step."""
        if step != self.step:  # first chunk of a new step
            self.step, self.loss, self.stop, self.losses = step, 0.0, False, {}
            self.chunks_left = len(chunk_bounds(self.groups, self.tuner.current))
        self.done_chunk = None
        parts = self.parts.setdefault((lo, hi), {})
        parts[rank] = grad
        self.losses[rank] = self.losses.get(rank, 0.0) + loss_w
        self.stop = self.stop or stop
        if compute_s is not None:
            self.times[rank] = compute_s
        if len(parts) < self.size:
            return False
        del self.parts[(lo, hi)]
        self.reduce_chunk([parts[r] for r in range(self.size)], lo, hi, lr)
        self.updated[(lo, hi)] = step
        self.done_chunk = (lo, hi)
        self.chunks_left -= 1
        if self.chunks_left:
            return False
        # A fast worker may start the next step before a slow one fetches this one:
        # keep this step's outcome apart from the running sums.
        self.loss = 0.0
        for r in range(self.size):    # in rank order, whatever order they arrived in: repeatable bits
            self.loss += self.losses.get(r, 0.0)
        self.last_outcome = (float(self.loss), bool(self.stop), [self.times.get(r, 0.0) for r in range(self.size)])
        self.completed = step
        self.step_done(self.clock())
        return True

    def step_done(self, now: float) -> int:
        """A step completed at `now`: the tuner sees its duration; returns the next chunking."""
        self.chunk_history.append(self.tuner.current)
        step_s, self.last_done = now - self.last_done, now
        return self.tuner.observe(step_s)

    def result(self, step: int | None = None, rank: int | None = None) -> tuple[np.ndarray, float, bool, int, list[float]]:
        """Fresh weights, the step's global loss, the stop flag, next step's chunk size,
        every worker's compute time (for speed-based shares): the last completed step's."""
        loss, stop, times = self.last_outcome
        return self.x.copy(), loss, stop, self.tuner.current, times

    def outcome(self, step: int | None = None) -> tuple[float, bool, int, list[float]]:
        """`result` without the weights (they came back chunk by chunk)."""
        loss, stop, times = self.last_outcome
        return loss, stop, self.tuner.current, list(times)

    def chunk_ready(self, step: int, lo: int, hi: int) -> bool:
        """Whether [lo, hi) holds step `step`'s fresh weights (the chunk, or the whole step, is done)."""
        return self.updated.get((lo, hi), -1) >= step or self.completed >= step

    def chunk_weights(self, step: int, lo: int, hi: int) -> np.ndarray:
        """A copy of the fresh weights of [lo, hi) (once `chunk_ready`)."""
        return self.x[lo:hi].copy()

    def history(self) -> list[int]:
        """The chunk size (layers) each completed step used."""
        return list(self.chunk_history)

    def snapshot(self) -> dict[str, np.ndarray]:
        """The master weights, the update rule's state, the chunk tuner's and the chunk
        sizes used so far, copied (between steps: no part of a step is in)."""
        return {"x": self.x.copy(), **{f"opt.{k}": v.copy() for k, v in self.opt.state.items()},
                "tuner": self.tuner.state(), "history": np.array(self.chunk_history, np.int64)}

    def restore(self, state: dict[str, Any]) -> None:
        """Take up a `snapshot` (in place: a shared segment's views stay views)."""
        self.x[...] = state["x"]
        for k, a in self.opt.state.items():
            a[...] = state[f"opt.{k}"]
        self.tuner.load_state(state["tuner"])
        self.chunk_history = [int(c) for c in np.asarray(state["history"]).reshape(-1)]


def chunk_master_args(config: Any, size: int, model: Any, params0: np.ndarray) -> dict[str, Any]:
    """ChunkMaster's arguments for a run (every front-end builds its core from these)."""
    return {"params": params0, "size": size, "groups": model.layer_groups(), "chunk_layers": config.chunk_layers,
            "optimizer": OptimizerSettings.of(config), "layout": model.layout(),
            "weight_return": getattr(config, "weight_return", "whole")}


def role_core(role: str) -> type:
    """The core class that serves `role` (its `OPS` are the role's operations)."""
    cores = {"parameter_server": ParameterServer, "elastic_centre": ParameterServer,
             "tournament": TournamentMailbox, "pairwise": ModelTable, "cgdp_master": ChunkMaster}
    if role not in cores:
        raise ValueError(f"role: one of {', '.join(cores)}, got {role!r}")
    return cores[role]


def make_core(role: str, options: dict[str, Any], params0: np.ndarray, size: int, config: Any = None,
              model: Any = None, clock: Callable[[], float] = time.perf_counter) -> Any:
    """An in-process core for `role` (what the thread and actor front-ends hold)."""
    if role == "cgdp_master":   # from the run's config, or from `chunk_master_args` less params and size
        args = chunk_master_args(config, size, model, params0) if config is not None else \
            {"params": params0, "size": size, **options}
        return ChunkMaster(**args, clock=clock)
    if role == "tournament":
        return TournamentMailbox()
    if role == "pairwise":
        return ModelTable(params0, size)
    if role in ("parameter_server", "elastic_centre"):
        if "optimizer" in options and "layout" not in options and model is not None:
            options = {**options, "layout": model.layout()}
        return ParameterServer(params0, size, **options)
    raise ValueError(f"role: one of parameter_server, elastic_centre, tournament, pairwise, cgdp_master, got {role!r}")
