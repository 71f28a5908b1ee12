"""In-process front-ends (workers as threads): a collective, and the server roles' cores
(`roles`) behind a lock. The thread transport runs every algorithm through these, and
gets the same maths as the distributed front-ends."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .base import WorkerLost, check_wait
from .roles import ChunkMaster, ServerCore

ABORT_POLL_S = 0.5


class ThreadGroup:
    """Shared state of P thread workers; `comm(rank)` gives each its `Comm`."""

    def __init__(self, size: int, control: Any = None):
        self.size = size
        self.control = control
        self.slots: list[Any] = [None] * size
        self.result: Any = None
        self.barrier_ = threading.Barrier(size)

    def comm(self, rank: int) -> ThreadComm:
        return ThreadComm(self, rank)

    def wait(self) -> None:
        # Time out now and then to notice an aborted run instead of hanging forever.
        while True:
            try:
                self.barrier_.wait(timeout=ABORT_POLL_S)
                return
            except threading.BrokenBarrierError:
                if self.control is not None and self.control.aborted():
                    raise WorkerLost(getattr(self.control, "reason", "run aborted")) from None
                if self.barrier_.broken:
                    self.barrier_.reset()


class ThreadComm:
    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank, self.size = group, rank, group.size

    def allreduce(self, buf: Any) -> Any:
        g = self.group
        g.slots[self.rank] = buf
        g.wait()
        if self.rank == 0:  # one thread sums in rank order: deterministic
            total = g.slots[0].copy()
            for other in g.slots[1:]:
                total += other
            g.result = total
        g.wait()
        out = g.result.copy()
        g.wait()  # nobody overwrites slots/result before everyone has copied
        return out

    def barrier(self) -> None:
        self.group.wait()

    def close(self) -> None:
        pass


class ThreadServer:
    """A server role's core (`roles.ServerCore`) behind a lock (FCFS), with a condition
    for round-robin turns and LTFB partners."""

    def __init__(self, core: ServerCore, control: Any = None):
        self.core = core
        self.control = control
        self.lock = threading.Condition()

    def pull(self) -> tuple[int, np.ndarray]:
        with self.lock:
            return self.core.pull()

    def push(self, grad: np.ndarray, lr: float, version: int):
        with self.lock:
            return self.core.push(grad, lr, version)

    def elastic(self, x: np.ndarray, alpha: float, rank: int | None = None) -> np.ndarray:
        """FCFS under the lock; with `rank`, strictly in rank order (original EASGD)."""
        with self.lock:
            while not self.core.my_turn(rank):
                if not self.lock.wait(timeout=ABORT_POLL_S):
                    check_wait(self.control, "elastic turn")
            d = self.core.exchange(x, alpha, rank)
            self.lock.notify_all()
            return d

    def retire(self, rank: int) -> None:
        """Round-robin: a finished worker gives up its turns so the rest are not blocked."""
        with self.lock:
            self.core.advance_turn(retire=rank)
            self.lock.notify_all()

    def centre(self) -> np.ndarray:
        with self.lock:
            return self.core.centre()

    def deposit(self, rnd: Any, trainer: int, params: np.ndarray, state: np.ndarray | None = None,
                meta: dict | None = None) -> None:
        with self.lock:
            self.core.deposit(rnd, trainer, params, state, meta)
            self.lock.notify_all()

    def collect(self, rnd: Any, trainer: int) -> Any:
        """LTFB: wait until `trainer` left its round-`rnd` payload (or ended), then take it."""
        with self.lock:
            while not self.core.can_collect(rnd, trainer):
                if not self.lock.wait(timeout=ABORT_POLL_S):
                    check_wait(self.control, "tournament partner")
            return self.core.collect(rnd, trainer)

    def depart(self, trainer: int) -> None:
        with self.lock:
            self.core.depart(trainer)
            self.lock.notify_all()


class ThreadChunkMaster:
    """cgdp's master (`roles.ChunkMaster`) for workers that are threads: a lock, and a
    condition per step."""

    def __init__(self, core: ChunkMaster, control: Any = None):
        self.core = core
        self.control = control
        self.cond = threading.Condition()
        self.completed = -1

    def push(self, step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
        with self.cond:
            if self.core.add(step, rank, lo, hi, grad, lr, loss_w, stop, compute_s):
                self.completed = step
                self.cond.notify_all()

    def fetch(self, step: int):
        with self.cond:
            while not self.cond.wait_for(lambda: self.completed >= step, timeout=ABORT_POLL_S):
                check_wait(self.control, "chunk master fetch", on_stop=False)   # a sync step: stops ride on it
            return self.core.result()

    def wait_sent(self) -> None:
        pass  # pushes are synchronous here

    def history(self) -> list[int]:
        return list(self.core.chunk_history)
