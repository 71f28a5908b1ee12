"""The start barrier: every worker of a run begins step 0 together.

A run's clock starts at its first training step. Workers come up at different times
(imports, data placement, a cold process, a first CUDA context), so without a barrier
the first allreduce would book the slowest worker's set-up as the others' waiting time,
and an asynchronous run would spend its first second with fewer workers than it reports.
Each loop calls its barrier once, after its own set-up and before step 0; time 0 is the
moment it passes.

A barrier call returns the ranks that never arrived (empty when all did): after
`timeout` seconds the workers that are there go on without the rest (a lost worker of an
asynchronous run must not hold the others forever), and a stop request ends the wait at
once (the loop then stops before its first step). An aborted run raises `WorkerLost`.

Three implementations, one per transport: shared memory on one host (microseconds of
skew), Dask events across hosts (a scheduler round trip of skew), threads in one process.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from .base import WorkerLost

START_TIMEOUT_S = 120.0   # a worker that has not arrived by then is left behind
POLL_S = 1e-3             # coarse wait: sleep between looks at the flags
SPIN_S = 0.05             # fine wait: once everyone is there, spin this long at most


def barrier_nbytes(size: int) -> int:
    """Bytes of a shared-memory start barrier for `size` workers: one int64 flag each, then
    the run's two words (`ShmStopWord`): the stop, and the step the client asked the next
    checkpoint before."""
    return 8 * (size + 2)


def _check(control: Any) -> bool:
    """True to stop waiting (stop requested); raises WorkerLost when the run was aborted."""
    if control is None:
        return False
    if control.aborted():
        raise WorkerLost("run aborted while waiting for the other workers to start")
    return bool(control.stop_requested())


class ShmStartBarrier:
    """Start barrier through one shared segment of `size` int64 flags (one host).

    Two phases: arrive (flag 1) and wait, sleeping, until every flag is set; then flag 2
    and spin until every flag is 2, so that all workers leave within microseconds of
    each other, not within one sleep."""

    def __init__(self, segment: str, rank: int, size: int, control: Any = None,
                 timeout: float = START_TIMEOUT_S):
        from .shm import attach
        self.rank, self.size, self.control, self.timeout = rank, size, control, timeout
        self.shm = attach(segment)
        self.flags = np.ndarray((size,), dtype=np.int64, buffer=self.shm.buf)

    def __call__(self) -> list[int]:
        flags, deadline = self.flags, time.perf_counter() + self.timeout
        flags[self.rank] = max(int(flags[self.rank]), 1)
        next_check = 0.0
        while flags.min() < 1:
            now = time.perf_counter()
            if now > deadline:
                return [int(r) for r in np.flatnonzero(flags < 1)]
            if now >= next_check:
                next_check = now + 0.1
                if _check(self.control):
                    # through, as far as the others can tell: one that arrives later passes its
                    # second phase (it waited for this flag's 2 until its deadline, 120 s, while
                    # this worker sat in its first allreduce)
                    flags[self.rank] = 2
                    return []
            time.sleep(POLL_S)
        flags[self.rank] = 2
        end = time.perf_counter() + SPIN_S
        while flags.min() < 2 and time.perf_counter() < end:
            os.sched_yield()
        while flags.min() < 2 and time.perf_counter() < deadline:  # a peer descheduled: sleep instead
            time.sleep(POLL_S)
        return []

    def close(self) -> None:
        from .shm import detach
        del self.flags
        detach(self.shm)


def release_shm_barrier(segment: str, rank: int, size: int) -> None:
    """Mark `rank` as arrived (and through) without it: a lost worker of an asynchronous
    run must not keep the survivors waiting. Runs on a surviving worker."""
    from .shm import attach
    shm = attach(segment)
    flags = np.ndarray((size,), dtype=np.int64, buffer=shm.buf)
    flags[rank] = 2
    del flags


class ShmStopWord:
    """The run's stop request as one int64 in the start barrier's segment (after the
    workers' flags), and after it the step the client asked the next checkpoint before
    (0: none yet): a loop on the segment's host reads them at every step (`view[0]`,
    `view[1]`), for the cost of a memory read, where the Dask event and variable behind
    them are scheduler round trips that loops poll at most once a second beside them
    (`ThrottledControl`). `set_shm_stop` and `set_shm_checkpoint` write them, and `set`
    from a loop on the host."""

    def __init__(self, segment: str, size: int):
        from .shm import attach
        self.shm = attach(segment)
        self.words = np.ndarray((2,), dtype=np.int64, buffer=self.shm.buf, offset=8 * size)
        self.view = memoryview(self.words)   # a look costs ~40 ns, where a NumPy scalar costs ~150

    def is_set(self) -> bool:
        return self.view[0] != 0

    def set(self) -> None:
        """Ask every loop on this host to stop (as `set_shm_stop` does from elsewhere)."""
        self.view[0] = 1

    def close(self) -> None:
        from .shm import detach
        self.view.release()
        del self.words, self.view
        detach(self.shm)


def _set_word(segment: str, size: int, index: int, value: int) -> None:
    from .shm import attach, detach
    try:
        shm = attach(segment)
    except FileNotFoundError:
        return
    words = np.ndarray((2,), dtype=np.int64, buffer=shm.buf, offset=8 * size)
    words[index] = value
    del words
    detach(shm)


def set_shm_stop(segment: str, size: int) -> None:
    """Set the run's stop word (runs on a worker of the segment's host, on its event loop:
    the client may be elsewhere). A segment already gone (the run ended) is no error."""
    _set_word(segment, size, 0, 1)


def set_shm_checkpoint(segment: str, size: int, step: int) -> None:
    """Ask every loop on the segment's host to send its state before `step` (a wall-clock
    checkpoint; runs where `set_shm_stop` does). A segment already gone is no error."""
    _set_word(segment, size, 1, int(step))


class EventStartBarrier:
    """Start barrier through Dask events (workers on several hosts): each worker sets its
    own event, then waits for everyone's. Skew: a scheduler round trip."""

    def __init__(self, run_id: str, rank: int, size: int, control: Any = None,
                 timeout: float = START_TIMEOUT_S):
        self.run_id, self.rank, self.size, self.control, self.timeout = run_id, rank, size, control, timeout

    def _event(self, rank: int) -> Any:
        from distributed import Event
        return Event(f"workbench-start-{self.run_id}-{rank}")

    def __call__(self) -> list[int]:
        self._event(self.rank).set()
        deadline = time.perf_counter() + self.timeout
        missing = [r for r in range(self.size) if r != self.rank]
        while missing:
            if _check(self.control):
                return []
            if time.perf_counter() > deadline:
                return missing
            missing = [r for r in missing if not self._event(r).wait(timeout=0.1)]
        return []

    def close(self) -> None:
        pass


class ThreadStartBarrier:
    """Start barrier for workers that are threads of one process; `for_rank(r)` gives
    each its callable."""

    def __init__(self, size: int, control: Any = None, timeout: float = START_TIMEOUT_S):
        self.size, self.control, self.timeout = size, control, timeout
        self.arrived: set[int] = set()
        self.cond = threading.Condition()

    def for_rank(self, rank: int) -> Any:
        return lambda: self.wait(rank)

    def release(self, rank: int) -> None:
        """Count `rank` as arrived without it (a lost worker must not hold the others)."""
        with self.cond:
            self.arrived.add(rank)
            self.cond.notify_all()

    def wait(self, rank: int) -> list[int]:
        deadline = time.perf_counter() + self.timeout
        with self.cond:
            self.arrived.add(rank)
            self.cond.notify_all()
            while len(self.arrived) < self.size:
                if _check(self.control):
                    return []
                if time.perf_counter() > deadline:
                    return sorted(set(range(self.size)) - self.arrived)
                self.cond.wait(0.05)
        return []
