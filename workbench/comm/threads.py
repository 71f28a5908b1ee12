"""In-process front-ends (workers as threads): a collective, and any server role's core
(`roles`) behind a lock, served from the core's table of operations. The thread transport runs every algorithm through these, and
gets the same maths as the distributed front-ends."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .base import RoleFrontEnd, WorkerLost, check_wait, role_op
from .roles import ChunkMaster

ABORT_POLL_S = 0.5


def allreduce_meetings(size: int) -> int:
    """Barrier meetings (`ThreadGroup.wait`: every thread waits for every other) one
    `ThreadComm.allreduce` among `size` threads takes: 3 (the slots filled, the sum made,
    the sum copied by all), whatever P; 0 alone (a barrier of one waits for nobody). The
    cost model charges each as one latency (`costmodel.allreduce_terms(..., "threads")`).

    >>> allreduce_meetings(2), allreduce_meetings(8), allreduce_meetings(1)
    (3, 3, 0)
    """
    return 3 if size >= 2 else 0


def exchange_meetings(size: int) -> int:
    """Barrier meetings of a `ThreadComm.allgather` or `neighbour_exchange`: 2 (the slots
    filled, then read by all), 0 alone.

    >>> exchange_meetings(4), exchange_meetings(1)
    (2, 0)
    """
    return 2 if size >= 2 else 0


def allreduce_passes(size: int) -> int:
    """Passes over the vector on the longest thread's path through one allreduce: rank 0
    reads every slot as it sums them (P), then each thread copies the sum out (1): P + 1.
    The cost model charges them as the allreduce's bytes, (P + 1) n, from P = 2.

    >>> allreduce_passes(2), allreduce_passes(4)
    (3, 5)
    """
    return int(size) + 1


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

    def neighbour_exchange(self, vec: Any, peers: list[int]) -> dict[int, Any]:
        """Gossip's peer-to-peer exchange (`base.neighbour_exchange`): each worker puts its
        own vector in its slot, meets the others once, then copies only its peers' slots
        (len(peers) n floats read, not P n); a second meeting keeps every slot until all
        have read theirs."""
        g = self.group
        g.slots[self.rank] = vec        # the caller's array, unchanged while it waits here
        g.wait()
        got = {j: g.slots[j].copy() for j in peers}
        g.wait()
        return got

    def allgather(self, payload: Any) -> list[Any]:
        """Every worker's payload in rank order (`base.gathered_sum`): each puts its own in
        its slot, meets the others, copies the P - 1 others' payloads, and meets again so
        no slot is rewritten before all have read it. Never sums anything."""
        g = self.group
        g.slots[self.rank] = payload
        g.wait()
        got = [payload if j == self.rank else g.slots[j].copy() for j in range(self.size)]
        g.wait()
        return got

    def barrier(self) -> None:
        self.group.wait()

    def close(self) -> None:
        pass


class ThreadServer(RoleFrontEnd):
    """Any server role's core behind a lock, served from its table of operations
    (`base.RoleOp`): first come, first served; a call that waits (a round-robin turn, an
    LTFB partner) waits on the lock's condition, and one that changes state wakes them."""

    def __init__(self, core: Any, control: Any = None):
        self.core = core
        self.ops = type(core).OPS
        self.control = control
        self.lock = threading.Condition()

    def serve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, name)(*args, **kwargs)

    def bind(self, name: str) -> Any:
        """The op's call, built once from its table entry: the core's method under the
        lock, after waiting for `ready` if it has one, waking the waiters if it `changes`."""
        op = role_op(self.core, name)
        core, lock, control = self.core, self.lock, self.control
        method, ready, changes, what = getattr(core, op.method), op.ready, op.changes, op.what
        if ready is None and not changes:    # most calls: pull, push, centre
            def call(*args: Any, **kwargs: Any) -> Any:
                with lock:
                    return method(*args, **kwargs)
            return call

        def waiting_call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                if ready is not None:
                    while not ready(core, *args, **kwargs):
                        if not lock.wait(timeout=ABORT_POLL_S):
                            check_wait(control, what)
                out = method(*args, **kwargs)
                if changes:
                    lock.notify_all()
                return out
        return waiting_call


class ThreadChunkMaster(ThreadServer):
    """cgdp's master (`roles.ChunkMaster`) for workers that are threads: the generic
    front-end over the core's table (push, fetch, outcome, history), plus the per-chunk
    weight return (`weight_return` chunks): the thread whose push completes a chunk copies
    that chunk's fresh weights into every worker's buffer for the next step, outside the
    lock, while the other threads go on with their backward pass; a worker's fetch then
    waits for the step's outcome (which comes with the last chunk, the first layers: the
    ones the next forward pass needs first) and for the copies, and takes its buffer as
    it is. Two buffers per worker, used in turn (the step's parity): the worker still
    reads this step's weights of a chunk (its input gradient) after it has pushed it, so
    the fresh ones must not land in the array it is computing with."""

    def __init__(self, core: ChunkMaster, control: Any = None):
        super().__init__(core, control)
        self.chunked = core.weight_return == "chunks"
        if self.chunked:
            n = core.x.shape[0]
            self.boxes = [[np.empty(n, core.x.dtype), np.empty(n, core.x.dtype)] for _ in range(core.size)]
            self.copying = 0                           # chunk copies under way (outside the lock)

    def bind(self, name: str) -> Any:
        if not self.chunked or name not in ("push", "fetch"):
            return super().bind(name)
        core, lock, control, boxes = self.core, self.lock, self.control, self.boxes
        if name == "push":
            def push(step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
                with lock:
                    core.add(step, rank, lo, hi, grad, lr, loss_w, stop, compute_s)
                    done = core.done_chunk
                    if done is None:
                        return
                    self.copying += 1
                a, b = done        # nobody writes x[a:b] before every worker has fetched this step
                fresh = core.x[a:b]
                for box in boxes:
                    np.copyto(box[step % 2][a:b], fresh)
                with lock:
                    self.copying -= 1
                    lock.notify_all()
            return push

        def fetch(step: int, rank: int | None = None):
            if rank is None:
                raise ValueError("rank: the fetching worker's rank (weight_return chunks), got None")
            with lock:
                while not (core.completed >= step and self.copying == 0):
                    if not lock.wait(timeout=ABORT_POLL_S):
                        check_wait(control, "chunk master fetch", on_stop=False)   # a sync step: stops ride on it
                loss, stop, chunking, times = core.outcome(step)
            return boxes[rank][step % 2], loss, stop, chunking, times
        return fetch

    def wait_sent(self) -> None:
        pass  # pushes are synchronous here
