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
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from .base import WorkerLost

SPIN = 2000                # polls (yielding the core) before starting to sleep
SLEEP_S = 50e-6            # sleep between polls once spinning did not pay
ABORT_POLL_S = 0.5         # how often a blocked wait checks whether the run was aborted


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
        spins, deadline = 0, time.perf_counter() + ABORT_POLL_S
        while flags.min() < phase:
            spins += 1
            if spins < SPIN:
                os.sched_yield()   # a peer is usually microseconds away: stay on the core
            else:
                time.sleep(SLEEP_S)
                if time.perf_counter() > deadline:
                    deadline = time.perf_counter() + ABORT_POLL_S
                    if self.control is not None and self.control.aborted():
                        raise WorkerLost("allreduce aborted: a peer is gone")

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
