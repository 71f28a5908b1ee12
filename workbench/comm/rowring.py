"""A worker's step rows to a client on its own host, through shared memory (`RowRing`).

On Dask, a live batch (a worker's step rows a few times a second) goes from the training
thread to the worker's event loop, is serialised, crosses to the scheduler and on to the
client: each batch wakes the worker's event loop on the cores the training loops use, and
in a synchronous run every such moment on one worker is a wait for its partners (at the
teaching size, two workers on two cores, live batches through Dask cost sync_sgd 5-8% of
its speed: docs/benchmarks.md). Where the client shares the workers' host, each worker
instead copies its rows into a ring in shared memory that the client reads on its own
clock (`Monitor.drain`): no message, no wake-up, on the worker's side a copy. Worker 0
makes the rings, as it makes the run's other segments (`transports.dask`), and the client
opens them where it sees them with the token worker 0 wrote: on the same host.

One writer (the worker's loop) and one reader (the client) per ring, no lock: the
writer copies rows in, then advances `written`; the reader copies rows out up to the
`written` it read, then advances `read`. Records other than step rows (events,
evaluations, states) keep going through Dask. Order: rows reach the client in each
worker's step order. A worker whose rows do not fit (the client has not read for a
while) gives the ring up for the rest of its run and sends its rows through Dask from
then on (`WorkerContext.flush`); the client reads the rings after taking the queued
batches and before handing them on, so every row in a ring is handed on before any row
sent after it.
"""
from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from .shm import attach, attach_untracked, create_segment, detach

HEADER = 64            # bytes before the rows: written, read, capacity, fields (int64), the host token
TOKEN = 16             # bytes of the token worker 0 writes (the client reads it back), after the four counters
CAPACITY = 1 << 14     # rows a ring holds (16,384: 1.4 MB a worker; several seconds at 10k steps/s)


def ring_nbytes(capacity: int, fields: int) -> int:
    return HEADER + capacity * fields * 8


class RowRing:
    """One worker's ring of step rows, (capacity, fields) float64, in a shared segment.

    >>> ring = RowRing.create(f"wbd{secrets.token_hex(5)}", capacity=4, fields=2)
    >>> ring.put(np.arange(6.0).reshape(3, 2)), ring.room()
    (True, 1)
    >>> ring.take().tolist()
    [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    >>> ring.put(np.arange(8.0).reshape(4, 2)), ring.take()[-1].tolist()   # across the end of the ring
    (True, [6.0, 7.0])
    >>> ring.put(np.zeros((5, 2))), ring.take()                             # more than it holds: refused
    (False, None)
    >>> from workbench.comm.shm import unlink_segment
    >>> ring.close(); unlink_segment(ring.name)
    """

    def __init__(self, name: str, tracked: bool = True):
        self.name = name
        self.shm = attach(name) if tracked else attach_untracked(name)   # the client's: untracked (open_reader)
        head = np.ndarray((4,), dtype=np.int64, buffer=self.shm.buf, offset=0)
        self.capacity, self.fields = int(head[2]), int(head[3])
        self.counts = memoryview(self.shm.buf[:16]).cast("q")   # [written, read]: one look each, no NumPy scalar
        self.rows = np.ndarray((self.capacity, self.fields), dtype=np.float64, buffer=self.shm.buf, offset=HEADER)
        del head

    @classmethod
    def create(cls, name: str, capacity: int | None = None, fields: int = 11) -> RowRing:
        """A new ring of `capacity` rows (CAPACITY), kept alive by this process until
        `unlink_segment` (in a run, worker 0's: `create_rings`), with a random token in its
        header that a process on the same host reads back (`token`)."""
        capacity = capacity or CAPACITY
        create_segment(name, ring_nbytes(capacity, fields))
        shm = attach(name)
        head = np.ndarray((4,), dtype=np.int64, buffer=shm.buf, offset=0)
        head[2], head[3] = capacity, fields
        shm.buf[32:32 + TOKEN] = secrets.token_bytes(TOKEN)
        del head
        detach(shm)
        return cls(name)

    @property
    def token(self) -> bytes:
        return bytes(self.shm.buf[32:32 + TOKEN])

    def room(self) -> int:
        """Rows the writer may put now."""
        return self.capacity - (self.counts[0] - self.counts[1])

    def put(self, block: np.ndarray) -> bool:
        """Copy `block`'s rows in after the last ones (writer); False, and nothing copied,
        when they do not all fit."""
        k = block.shape[0]
        if k > self.room():
            return False
        written = self.counts[0]
        at = written % self.capacity
        first = min(k, self.capacity - at)
        self.rows[at:at + first] = block[:first]
        if first < k:
            self.rows[:k - first] = block[first:]
        self.counts[0] = written + k           # after the rows: the reader copies no further than this
        return True

    def take(self) -> np.ndarray | None:
        """A copy of every row put since the last take (reader); None if there are none."""
        written, read = self.counts[0], self.counts[1]
        k = written - read
        if k <= 0:
            return None
        at = read % self.capacity
        first = min(k, self.capacity - at)
        out = np.empty((k, self.fields), dtype=np.float64)
        out[:first] = self.rows[at:at + first]
        if first < k:
            out[first:] = self.rows[:k - first]
        self.counts[1] = written               # after the copy: the writer may reuse those rows now
        return out

    def close(self) -> None:
        self.counts.release()
        del self.rows
        detach(self.shm)


def create_rings(names: list[str], capacity: int, fields: int) -> list[tuple[str, bytes]]:
    """Runs on worker 0, which owns the run's segments (and frees them if the client
    vanishes): new rings, each with its token for the client to read back."""
    made = []
    for name in names:
        ring = RowRing.create(name, capacity, fields)
        made.append((ring.name, ring.token))
        ring.close()
    return made


def open_reader(name: str, token: bytes) -> RowRing | None:
    """The client's end of a ring worker 0 made: None where this process does not see that
    ring (the client is on another host; its rows then go with the live batches)."""
    try:
        ring = RowRing(name, tracked=False)   # the workers free it: this process's tracker stays out of it
    except Exception:   # not here (another host), or not ours
        return None
    if ring.token != token:
        ring.close()
        return None
    return ring


def open_writer(name: str | None) -> Any:
    """The worker's end of its ring; None without one (or where it cannot be opened: its
    rows then go through Dask)."""
    if not name:
        return None
    try:
        return RowRing(name)
    except Exception:
        return None
