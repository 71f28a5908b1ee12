"""The transport interface: how a run's workers are started and linked to each other.

The engine has one run path (`engine.execute`): it builds the run's typed set-up
(`RunSetup`), asks a transport to provide what the algorithm declared it needs
(`AlgorithmSpec.needs`), starts the loops through it, watches them with one monitor and
decides the status with one rule (`engine.decide_status`). A transport is one builder:

    class MyTransport(Transport):
        name = "mine"
        def choose(self, config) -> list[dict]          # the workers: name, kind, host (+ address, ...)
        def prepare(self, setup) -> None                # client side, before any loop: the needs
        def start(self, setup, sink, main) -> None      # one loop per worker: main(...) = engine.worker_main
        def poll(self) -> Progress                      # loops that returned, workers lost, transport gone
        def pending(self) -> set[int]                   # ranks still running
        def request_stop(self, reason), abort(self, reason)
        def release(self, rank) -> None                 # a lost worker of an async run: nobody waits for it
        def finish(self) -> Progress                    # after the monitor: the results left to fetch
        def close(self) -> None                         # free what prepare made, whoever is left

Per worker, a transport hands `main` (the engine's `worker_main`) one `WorkerLinks`: the collective of
the worker's rank group (`comm`: `allreduce`, `barrier`, `close`), the front-end of the
declared server role (`server`; the role's maths is its core in `workbench.comm.roles`),
the shared arrays (`shared[name].array`), the stop/abort `control`, the `start_barrier`
(returns the ranks that never arrived), the clock (`timer`: every time the loop and
the algorithms book is read from it, so a simulated transport hands in a virtual clock)
and `adapt`, called with the worker's built context (the simulator wraps its model).
Live record batches go to `sink` (any thread); a loop's returned dict (see
`algorithms.base.run_loop`) comes back through `poll`/`finish`.

Transports here: `threads` (in-process; the unit tests' way through the real engine path,
with fault injection), `sim` (`workbench.sim`: up to 1024 virtual workers on a virtual
clock, in this process) and `dask` (worker processes on one or several hosts, linked by
shared memory on one host, NCCL between GPUs or a ring over Dask's own connections, with
server roles in shared memory or as Dask actors).
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...config import ConfigError, RunConfig


@dataclass
class RunSetup:
    """Everything decided on the client before any loop starts (one run)."""

    config: RunConfig
    spec: Any                    # the AlgorithmSpec
    run_id: str
    workers: list[dict]          # chosen workers in rank order: name, kind, host (+ address, memory_limit, ...)
    groups: list[list[int]]      # ranks of each collective (one group unless the algorithm declares several)
    n_params: int
    params0: np.ndarray          # the initial parameters (for shared arrays and server roles)
    model: Any                   # the model (cgdp's master needs its layer groups)
    extra: dict[str, Any]        # the algorithm's own set-up (needs.setup), handed to every worker as ctx.extra
    total_steps: int
    schedule_text: str
    t0_wall: float = 0.0         # when the loops were started (wall clock)
    resume: dict[int, dict] | None = None   # a resumed run: rank -> its part of the checkpoint (engine._take_up)
    spent: frozenset[int] = frozenset()     # a resumed simulated run: the ranks whose fail_worker fault fired before

    def resume_of(self, rank: int) -> dict | None:
        """`rank`'s part of the checkpoint a resumed run continues from (None: a fresh run)."""
        return None if self.resume is None else self.resume.get(rank)

    @property
    def size(self) -> int:
        return len(self.workers)

    @property
    def kinds(self) -> list[str]:
        return [w["kind"] for w in self.workers]

    @property
    def hosts(self) -> set[str]:
        return {w["host"] for w in self.workers}

    def group_of(self, rank: int) -> tuple[int, list[int]]:
        return group_of(self.groups, rank)


def group_of(groups: list[list[int]], rank: int) -> tuple[int, list[int]]:
    """(group index, the group's ranks) of `rank`; (-1, [rank]) outside every group.

    >>> group_of([[0, 1], [2, 3]], 2)
    (1, [2, 3])
    """
    for gi, ranks in enumerate(groups):
        if rank in ranks:
            return gi, ranks
    return -1, [rank]


@dataclass
class WorkerLinks:
    """What a transport hands one worker's loop."""

    comm: Any = None                                   # the collective of the worker's rank group
    server: Any = None                                 # the server role's front-end
    shared: dict[str, Any] = field(default_factory=dict)   # name -> object with `.array`
    control: Any = None                                # stop / abort
    start_barrier: Callable[[], list[int]] | None = None
    timer: Callable[[], float] = time.perf_counter     # the clock every booked time is read from
    closers: list[Callable[[], None]] = field(default_factory=list)   # run (last first) when the loop ends
    rows: Any = None                                   # a ring to the client for the step rows (comm.rowring)
    adapt: Callable[[Any], None] | None = None         # called with the built WorkerContext (the simulator
    #   wraps its model so that compute charges virtual time)

    def close(self) -> None:
        for close in reversed(self.closers):
            try:
                close()
            except Exception:   # one link failing to close must not keep the others open
                pass


class LocalArray:
    """A plain array standing in for a shared-memory one (workers in one process)."""

    def __init__(self, array: Any):
        self.array = array

    def close(self) -> None:
        pass


@dataclass
class Progress:
    """What a transport reports to the monitor since its last report."""

    results: dict[int, dict] = field(default_factory=dict)   # rank -> the dict its loop returned
    lost: dict[int, str] = field(default_factory=dict)       # rank -> who ("name, address") vanished
    lost_at: dict[int, float] = field(default_factory=dict)  # rank -> when, in the records' time, where the
    #   transport knows it (the simulator: the virtual second of the kill); else the monitor's clock
    busy: dict[int, str] = field(default_factory=dict)       # rank -> what other work its worker took on beside
    #   the run's loop since the run chose it (another client's tasks on a shared cluster), said once a worker
    gone: str | None = None      # the transport itself is gone (e.g. "the scheduler at tcp://..."): the run ends
    why: str = ""                # ... and why


def failed_loop(exc: BaseException) -> dict[str, Any]:
    """A loop's result when it raised (its set-up, or its own error after the traceback went
    out as an event): the step rows and, from rank 0, the parameters of its last evaluation
    and at its best that travel with the exception (`engine.worker_main`: nothing computed is
    lost)."""
    return {"status": "failed", "params": None, "error": f"{type(exc).__name__}: {exc}",
            "steps": getattr(exc, "workbench_steps", None), **getattr(exc, "workbench_kept", {})}


class Reports:
    """What the loops of an in-process transport (threads, the simulator) returned or
    lost, each reported to the monitor once: the "reported / pending" bookkeeping of
    `Transport.poll` and `Transport.pending`, in one place. Loops write from their own
    threads; the monitor reads."""

    def __init__(self, describe: Callable[[int], str]):
        self.describe = describe        # rank -> who it was, as the lost-worker event names it
        self.lock = threading.Lock()
        self.results: dict[int, dict] = {}
        self.vanished: set[int] = set()
        self.lost_at: dict[int, float] = {}     # rank -> when it was lost, where the transport knows
        self.reported: set[int] = set()
        self.reported_lost: set[int] = set()

    def returned(self, rank: int, result: dict) -> None:
        """`rank`'s loop returned (or a lost one's records were kept: the simulator's)."""
        with self.lock:
            self.results[rank] = result

    def vanish(self, rank: int, steps: Any = None, at: float | None = None) -> None:
        """`rank` vanished as a killed process does; `steps`: its records, where kept; `at`: when,
        in the records' time, where the transport knows it. Set with the loss, under one lock: a
        monitor polling between the two read the loss without its time and put its own wall
        clock on the event (a simulated worker "lost at 13.47 s" of a 0.9 s virtual run)."""
        with self.lock:
            if at is not None:
                self.lost_at[rank] = at
            self.vanished.add(rank)
            if steps is not None:
                self.results[rank] = {"status": "lost", "params": None, "steps": steps}

    def known(self, rank: int) -> bool:
        with self.lock:
            return rank in self.results or rank in self.vanished

    def poll(self) -> Progress:
        """Results and losses since the last poll (a lost rank with kept records: both)."""
        out = Progress()
        with self.lock:
            for rank, res in self.results.items():
                if rank not in self.reported:
                    out.results[rank] = res
                    self.reported.add(rank)
            for rank in self.vanished:
                if rank not in self.reported_lost:
                    out.lost[rank] = self.describe(rank)
                    if rank in self.lost_at:
                        out.lost_at[rank] = self.lost_at[rank]
                    self.reported_lost.add(rank)
                    self.reported.add(rank)
        return out

    def pending(self, size: int) -> set[int]:
        """Ranks of `size` whose loops have neither been reported returned nor lost."""
        with self.lock:
            return {r for r in range(size) if r not in self.reported}


class Transport(ABC):
    """One way to start and link a run's workers (see the module docstring)."""

    name = "transport"

    @abstractmethod
    def choose(self, config: RunConfig) -> list[dict]:
        """The run's workers in rank order (dicts with at least name, kind, host)."""

    def check(self, setup: RunSetup) -> None:
        """Refuse, with a ConfigError, a set-up this transport cannot serve (before anything starts)."""
        return None

    @abstractmethod
    def prepare(self, setup: RunSetup) -> None:
        """Client side, before any loop: build what `setup.spec.needs` declares."""

    @abstractmethod
    def start(self, setup: RunSetup, sink: Callable[[dict], None], main: Callable[..., dict]) -> None:
        """Start one loop per worker: `main(config, rank, kinds, groups, extra, t0_wall, links,
        sink)` (the engine's `worker_main`; transports never import the engine); live batches
        go to `sink`."""

    @abstractmethod
    def poll(self) -> Progress:
        """Loops that returned, workers lost, since the last poll."""

    @abstractmethod
    def pending(self) -> set[int]:
        """Ranks whose loops have neither returned nor been lost."""

    @abstractmethod
    def request_stop(self, reason: str) -> None: ...

    @abstractmethod
    def abort(self, reason: str) -> None:
        """End every wait on a peer (a synchronous run lost a worker)."""

    def release(self, rank: int) -> None:
        """A lost worker of an asynchronous run: nobody may wait for it (start, turns)."""
        return None

    def finish(self) -> Progress:
        """After the monitor: the results of loops that ended but were not reported."""
        return Progress()

    def live_rows(self) -> dict[int, dict]:
        """Step rows the workers put where this client reads them itself ({rank: packed
        rows}, `records.pack_rows`'s form), since the last call: a transport whose rows all
        come with the live batches has none."""
        return {}

    # Elastic membership (`execution.elastic`): a run that regroups starts its loops again on
    # a fresh transport of the same kind, on the workers there then.
    def again(self) -> Transport:
        """A fresh transport of this kind on the same cluster (ConfigError where there is none)."""
        raise ConfigError("elastic", f"a transport that can start a run's loops again ({self.name} cannot)",
                          self.name)

    def use(self, workers: list[dict]) -> None:
        """Run on exactly these workers (in rank order), as `choose` would have picked them."""
        self.workers = list(workers)

    def newcomers(self, members: list[dict]) -> list[dict]:
        """Workers of the cluster that are not among `members` and are fit to join (none here)."""
        return []

    def request_pause(self, at: dict) -> None:
        """Ask an elastic run's loops to pause at their first boundary at or after `at`
        ({"step": K}, or {"time": T} on a virtual clock), through the run's control."""
        control = getattr(self, "control", None)
        if control is not None and hasattr(control, "request_pause"):
            control.request_pause(at)

    def request_checkpoint(self, step: int) -> None:
        """Ask every worker to send its state before `step` (wall-clock checkpoints), through
        the run's control (`control.request_checkpoint`)."""
        control = getattr(self, "control", None)
        if control is not None and hasattr(control, "request_checkpoint"):
            control.request_checkpoint(step)

    def fetch_state(self, rank: int, step: int) -> dict | None:
        """A worker's state for a checkpoint, kept where it was made (its batch said `held`);
        None when it is no longer there. Transports whose batches carry the state never
        hold it."""
        return None

    def cancel(self) -> None:
        """Loops ignored a stop request: stop waiting for them."""
        return None

    def close(self) -> None:
        """Free what `prepare` made."""
        return None

    def let_go(self) -> None:
        """The run is over (every loop, an elastic run's last too): let go of what
        `engine.transport_for` opened for it (a Dask client for an address)."""
        return None

    def describe(self) -> dict[str, Any]:
        """Summary entries of this transport (comm, server)."""
        return {}

    def wall_time(self, real_s: float) -> float:
        """The run's duration as its records count time (the simulator: virtual seconds)."""
        return real_s

    def public(self, worker: dict, rank: int) -> dict:
        """A worker as summary.json lists it."""
        return {"rank": rank, "name": worker["name"], "kind": worker["kind"], "host": worker["host"]}


def choose_workers(available: list[dict], config: RunConfig, busy: dict[str, list[str]] | None = None) -> list[dict]:
    """The workers a run uses: `gpus` GPU workers (all for "auto") then `cpus` CPU ones,
    idle ones first, each kind in `available`'s order.

    `busy`: each worker's tasks already there (address -> keys, as the scheduler's
    `processing` has them): a worker with any is taken only when the idle ones are too few
    (the run's task would queue behind them).

    >>> ws = [{"address": a, "kind": "cpu"} for a in ("w0", "w1", "w2")]
    >>> [w["address"] for w in choose_workers(ws, RunConfig(cpus=2), busy={"w0": ["long-1"]})]
    ['w1', 'w2']
    """
    def idle_first(ws: list[dict]) -> list[dict]:
        return sorted(ws, key=lambda w: bool((busy or {}).get(w["address"])))   # stable: the order otherwise
    gpu = idle_first([w for w in available if w["kind"] == "gpu"])
    cpu = idle_first([w for w in available if w["kind"] == "cpu"])
    n_gpu = len(gpu) if config.gpus == "auto" else config.gpus
    if n_gpu > len(gpu):
        raise ConfigError("gpus", f"at most the {len(gpu)} GPU worker(s) of this cluster", config.gpus)
    if config.cpus > len(cpu):
        raise ConfigError("cpus", f"at most the {len(cpu)} CPU worker(s) of this cluster", config.cpus)
    chosen = gpu[:n_gpu] + cpu[:config.cpus]
    if not chosen:
        raise ConfigError("cpus", "at least one worker in total (cpus + gpus)", config.cpus)
    if config.batch_size < len(chosen):
        raise ConfigError("batch_size", f"at least the number of workers ({len(chosen)})", config.batch_size)
    return chosen
