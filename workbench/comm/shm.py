"""Shared memory between worker processes on one host: allreduce and shared buffers.

Segments are created once per run by one worker (`create_segment`) and attached by name
by the others. The allreduce is a two-phase reduce-scatter/all-gather over a (P, n)
slot array: each worker writes its buffer into its row, then sums its own column block
across rows in rank order (deterministic), then everyone copies the whole sum.

Synchronisation uses one int64 flag per worker (its phase counter) and spin-then-sleep
waits. The writes a flag publishes are ordered before it on x86-64 (total store order);
on weaker memory models this relies on the interpreter's own barriers between bytecodes.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from .base import WorkerLost

SPIN = 2000                # polls (yielding the core) before starting to sleep
SLEEP_S = 50e-6            # sleep between polls once spinning did not pay
ABORT_POLL_S = 0.5         # how often a blocked wait checks whether the run was aborted


def wait_until(ready: Callable[[], bool], control: Any, what: str) -> None:
    """Spin (yielding the core), then sleep, until `ready()`: a peer is usually
    microseconds away, but on an oversubscribed machine it may be descheduled. Every
    ABORT_POLL_S of sleeping, an aborted run (`control.aborted()`) ends the wait with
    WorkerLost naming `what`."""
    spins, deadline = 0, time.perf_counter() + ABORT_POLL_S
    while not ready():
        spins += 1
        if spins < SPIN:
            os.sched_yield()
        else:
            time.sleep(SLEEP_S)
            if time.perf_counter() > deadline:
                deadline = time.perf_counter() + ABORT_POLL_S
                if control is not None and control.aborted():
                    raise WorkerLost(f"{what} aborted: a peer is gone")


def create_segment(name: str, nbytes: int) -> str:
    """Create a zeroed shared-memory segment (kept alive by this process); returns its name."""
    shm = shared_memory.SharedMemory(name=name, create=True, size=max(nbytes, 8))
    np.frombuffer(shm.buf, dtype=np.uint8)[:] = 0
    _OWNED[name] = shm
    return shm.name


def unlink_segment(name: str) -> None:
    """Free a segment created by `create_segment` in this process."""
    shm = _OWNED.pop(name, None)
    if shm is not None:
        shm.close()
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


def attach(name: str) -> shared_memory.SharedMemory:
    """Attach to an existing segment.

    Python < 3.13 registers attachments with the resource tracker too. Worker processes
    spawned by one nanny share their parent's tracker, whose registry is a set, so the
    creator's `unlink` clears the one entry; unregistering here as well would make the
    tracker complain at unlink. Segments are per run, so a tracker that cleans up at exit
    is harmless."""
    if name in _OWNED:
        return _OWNED[name]
    return shared_memory.SharedMemory(name=name)


_OWNED: dict[str, shared_memory.SharedMemory] = {}


def allreduce_nbytes(size: int, n: int, dtype: Any = np.float32) -> int:
    """Bytes of the segment an allreduce of `n` elements among `size` workers needs."""
    itemsize = np.dtype(dtype).itemsize
    return 64 + 8 * size + itemsize * n * (size + 1)


class ShmComm:
    """Allreduce among the processes of one host through one shared segment.

    `n` is the capacity: any buffer of up to n elements can be reduced."""

    def __init__(self, name: str, rank: int, size: int, n: int, control: Any = None,
                 dtype: Any = np.float32):
        self.rank, self.size, self.n, self.control = rank, size, n, control
        self.shm = attach(name)
        buf = self.shm.buf
        self.flags = np.ndarray((size,), dtype=np.int64, buffer=buf, offset=64)
        off = 64 + 8 * size
        itemsize = np.dtype(dtype).itemsize
        self.slots = np.ndarray((size, n), dtype=dtype, buffer=buf, offset=off)        # (P, n)
        self.total = np.ndarray((n,), dtype=dtype, buffer=buf, offset=off + itemsize * n * size)
        self.phase = int(self.flags[rank])

    def buffer(self, m: int) -> np.ndarray:
        """This rank's slot as an array of m elements: write the contribution straight
        into it and `allreduce` skips the copy in."""
        if m > self.n:
            raise ValueError(f"buf: at most {self.n} elements for this segment, got {m}")
        return self.slots[self.rank, :m]

    def allreduce(self, buf: Any) -> np.ndarray:
        """The sum, as a view of the shared total: valid until this rank's next call
        (no peer can start overwriting it before this rank arrives again)."""
        m = buf.shape[0]
        if m > self.n:
            raise ValueError(f"buf: at most {self.n} elements for this segment, got {m}")
        lo, hi = self.rank * m // self.size, (self.rank + 1) * m // self.size  # my column block
        mine = self.slots[self.rank, :m]
        if not (buf.ctypes.data == mine.ctypes.data and buf.strides == mine.strides):
            mine[...] = buf
        self._arrive()
        block = self.total[lo:hi]
        np.copyto(block, self.slots[0, lo:hi])
        for r in range(1, self.size):  # rank order: the same sum on every run
            block += self.slots[r, lo:hi]
        self._arrive()
        return self.total[:m]

    def barrier(self) -> None:
        self._arrive()

    def _arrive(self) -> None:
        self.phase += 1
        self.flags[self.rank] = self.phase
        flags, phase = self.flags, self.phase
        if flags.min() < phase:
            wait_until(lambda: flags.min() >= phase, self.control, "allreduce")

    def close(self) -> None:
        del self.flags, self.slots, self.total
        if self.shm.name not in _OWNED:
            self.shm.close()


class SharedArray:
    """A float array in a shared segment that every worker on the host reads and writes
    without locks: Hogwild's parameters, or the EASGD centre in hogwild_easgd."""

    def __init__(self, name: str, n: int, dtype: Any = np.float32):
        self.shm = attach(name)
        self.array = np.ndarray((n,), dtype=dtype, buffer=self.shm.buf, offset=0)

    def close(self) -> None:
        name = self.shm.name
        del self.array
        if name not in _OWNED:
            self.shm.close()


# ------------------------------------------------------------------ parameter server
HEADER = 8  # int64 slots before the arrays: version, turn, retired bitmask, size, ...


def server_nbytes(n: int, momentum: bool) -> int:
    """Bytes of a shared parameter-server segment for n float32 parameters."""
    return 8 * HEADER + 4 * n * (2 if momentum else 1)


class ShmServer:
    """A parameter server / EASGD centre in shared memory, for workers on one host.

    The parameters, the optimiser's velocity and a version counter live in one segment;
    a kernel file lock (`fcntl.flock`, dropped by the kernel if its holder dies)
    serialises updates: first come, first served, like the actor, without a round trip
    through another process's event loop. Round-robin EASGD waits for its turn by
    polling the shared turn counter. Same methods as `ServerCore`'s front-ends.
    """

    def __init__(self, segment: str, lock_path: str, n: int, size: int, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0, control: Any = None):
        from ..maths.optim import SGD

        self.shm = attach(segment)
        self.header = np.ndarray((HEADER,), dtype=np.int64, buffer=self.shm.buf, offset=0)
        self.x = np.ndarray((n,), dtype=np.float32, buffer=self.shm.buf, offset=8 * HEADER)
        self.opt = SGD(n, np, np.float32, 0.0, nesterov, weight_decay)
        if momentum > 0:  # the velocity is server state: shared, not per worker
            self.opt.momentum = momentum
            self.opt.velocity = np.ndarray((n,), dtype=np.float32, buffer=self.shm.buf, offset=8 * HEADER + 4 * n)
        self.size, self.control = size, control
        self.lockfile = open(lock_path, "a+")

    # -- the lock
    def _acquire(self) -> None:
        import fcntl
        fcntl.flock(self.lockfile, fcntl.LOCK_EX)

    def _release(self) -> None:
        import fcntl
        fcntl.flock(self.lockfile, fcntl.LOCK_UN)

    # -- the server interface
    def pull(self) -> tuple[int, np.ndarray]:
        self._acquire()
        try:
            return int(self.header[0]), self.x.copy()
        finally:
            self._release()

    def push(self, grad: np.ndarray, lr: float, version: int) -> tuple[int, np.ndarray, int]:
        self._acquire()
        try:
            staleness = int(self.header[0]) - version
            self.opt.step(self.x, grad, lr)
            self.header[0] += 1
            return int(self.header[0]), self.x.copy(), staleness
        finally:
            self._release()

    def elastic(self, x_worker: np.ndarray, alpha: float, rank: int | None = None) -> np.ndarray:
        deadline = time.perf_counter() + ABORT_POLL_S
        while True:
            self._acquire()
            try:
                if rank is None or int(self.header[1]) == rank:
                    d = alpha * (x_worker - self.x)
                    self.x += d
                    self.header[0] += 1
                    if rank is not None:
                        self._advance_turn()
                    return d
            finally:
                self._release()
            time.sleep(SLEEP_S)  # not our turn yet (round-robin)
            if time.perf_counter() > deadline:
                deadline = time.perf_counter() + ABORT_POLL_S
                if self.control is not None and self.control.aborted():
                    raise WorkerLost("elastic exchange aborted: a peer is gone")

    def retire(self, rank: int) -> None:
        self._acquire()
        try:
            self.header[2] |= 1 << rank
            self._advance_turn(skip_only=True)
        finally:
            self._release()

    def _advance_turn(self, skip_only: bool = False) -> None:
        retired, size = int(self.header[2]), self.size
        turn = int(self.header[1]) if skip_only else (int(self.header[1]) + 1) % size
        for _ in range(size):
            if not retired >> turn & 1 or retired == (1 << size) - 1:
                break
            turn = (turn + 1) % size
        self.header[1] = turn

    def centre(self) -> np.ndarray:
        return self.pull()[1]

    def close(self) -> None:
        self.lockfile.close()
        del self.header, self.x
        if self.opt.velocity is not None and self.opt.momentum > 0:
            self.opt.velocity = None
        if self.shm.name not in _OWNED:
            self.shm.close()


def create_server_segment(name: str, params: np.ndarray, momentum: bool) -> str:
    """Create and fill a ShmServer segment (runs on one worker of the host)."""
    seg = create_segment(name, server_nbytes(params.shape[0], momentum))
    shm = _OWNED[seg]
    np.ndarray(params.shape, dtype=np.float32, buffer=shm.buf, offset=8 * HEADER)[:] = params
    return seg
