"""Ring allreduce between Dask workers, over direct worker-to-worker connections.

The portable allreduce for workers on several hosts (`comm="dask"`). Each rank opens one
connection to its right neighbour's own Dask server (the address the worker already
listens on: tcp, tls, or ucx where distributed-ucxx is installed) and receives from its
left neighbour through a handler (`HANDLER`) installed on every worker of the run before
the loops start (`install`). No actor, no scheduler: every message goes straight from one
worker to the next.

Algorithm (reduce-scatter, then all-gather), for P ranks and a buffer of m elements cut
into P contiguous chunks, chunk c = [c m // P, (c + 1) m // P) (uneven sizes, empty
chunks when m < P are fine):

* reduce-scatter, steps s = 0 .. P-2: rank r sends chunk (r - s) mod P to rank r+1 and
  adds the chunk (r - s - 1) mod P arriving from rank r-1 into its own copy. After it,
  rank r holds the complete sum of chunk (r + 1) mod P;
* all-gather, steps s = 0 .. P-2: rank r sends chunk (r + 1 - s) mod P on and stores the
  chunk (r - s) mod P arriving from its left.

With P = 2 the two ranks instead swap whole buffers in one step: the same bytes as the
ring (m each way), half the latency.

Each rank sends and receives 2 (P-1) messages of about m / P elements: 2 m (P-1) / P
elements each way per allreduce, whatever P (the star through one actor moved P m in and
P m out of the actor's worker).

Summation order (deterministic, independent of timing): chunk c is summed starting at rank
c and going up the ring, ``((x_c + x_{c+1}) + x_{c+2}) + ... + x_{c-1}`` (indices mod P).
Chunk 0 is exactly the rank-order sum; the others are rank-order sums rotated to start
at rank c, equal to it to float rounding. For P = 2 (the swap) both ranks compute
x_0 + x_1: bitwise the rank-order sum, hence the shared-memory allreduce's result (and
`ring_order_sum` agrees, since a + b == b + a in IEEE arithmetic). Every rank ends with
bitwise the same values: the all-gather copies, it does not add.

Gossip's peer-to-peer exchange (`neighbour_exchange`, dpsgd) goes over the same kind of
direct connections, one per (rank, peer) pair, opened at its first use: rank r sends its
vector to each peer j (key "ring/j<r", so the receiver has one in-order inbox per sender)
and takes one message from each of its peers' inboxes. Each rank sends d n floats a call
(d = len(peers)), the exchange's own messages and nothing else.

Failures never hang: a neighbour whose process dies closes its connection (the reader
sees it at once), a failed send names the rank it was for, and a rank that gives up
forwards the reason to its right neighbour, so the whole ring ends with `WorkerLost`
naming the first rank that was lost. A lost host that leaves no closed connection is
caught by the run's abort flag (the engine aborts a synchronous run when it sees a worker
gone), checked every `ABORT_POLL_S`; connecting is bounded by `CONNECT_TIMEOUT_S`.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import numpy as np

from .base import WorkerLost

HANDLER = "workbench_ring"   # the op name the peers' servers dispatch our connection to
ABORT_POLL_S = 0.5           # how often a waiting rank checks the run's abort flag
CONNECT_TIMEOUT_S = 20.0     # opening the connection to the right neighbour


class _Closed:
    """Put in a mailbox when the left neighbour's connection ends (or it gave up)."""

    def __init__(self, reason: str):
        self.reason = reason


_BOXES: dict[str, asyncio.Queue] = {}   # this process's inboxes: "ring/rank" -> queue (on the worker's loop)


def _box(key: str) -> asyncio.Queue:
    if key not in _BOXES:
        _BOXES[key] = asyncio.Queue()
    return _BOXES[key]


async def _serve(comm: Any, key: str, src: int, src_address: str) -> None:
    """The receiving end of one neighbour's connection: every message it sends goes into
    the inbox `key`, in order, until the connection ends."""
    box = _box(key)
    try:
        while True:
            msg = await comm.read()
            if "abort" in msg:
                box.put_nowait(_Closed(msg["abort"]))
                return
            box.put_nowait(msg)
    except Exception as exc:  # CommClosedError, OSError: the left neighbour is gone or left
        box.put_nowait(_Closed(f"rank {src} ({src_address}) is gone: "
                               f"its ring connection closed ({type(exc).__name__})"))


async def _close(comm: Any) -> None:
    await comm.close()   # a tornado coroutine: wrapped, since run_coroutine_threadsafe wants a native one


def install(dask_worker: Any) -> None:
    """Register the ring's receiving handler on a worker (via `Client.run`; idempotent)."""
    dask_worker.handlers.setdefault(HANDLER, _serve)


def chunk_bounds(m: int, size: int) -> list[tuple[int, int]]:
    """The P contiguous chunks the ring moves, as (lo, hi); sizes differ by at most one.

    >>> chunk_bounds(10, 3)
    [(0, 3), (3, 6), (6, 10)]
    >>> chunk_bounds(2, 3)
    [(0, 0), (0, 1), (1, 2)]
    """
    return [(c * m // size, (c + 1) * m // size) for c in range(size)]


def ring_order_sum(parts: list[np.ndarray]) -> np.ndarray:
    """What the ring computes, in its exact order (the oracle tests compare bitwise).

    >>> parts = [np.array([1e8, 1.0, 3.0], np.float32), np.array([1.0, -1e8, 1.0], np.float32),
    ...          np.array([-1e8, 1e8, 1.0], np.float32)]
    >>> ring_order_sum(parts).tolist()   # element 1 starts at rank 1: (-1e8 + 1e8) + 1 = 1
    [0.0, 1.0, 5.0]
    >>> float((parts[0][1] + parts[1][1]) + parts[2][1])   # in rank order 1 is lost in -1e8
    0.0
    """
    size, m = len(parts), parts[0].shape[0]
    out = np.empty_like(parts[0])
    for c, (lo, hi) in enumerate(chunk_bounds(m, size)):
        acc = parts[c][lo:hi].copy()
        for k in range(1, size):
            acc += parts[(c + k) % size][lo:hi]
        out[lo:hi] = acc
    return out


class RingComm:
    """The worker-side `Comm` for several hosts: a ring allreduce over Dask's comms.

    Args:
        ring: a name unique to this collective (run id and group).
        rank, size: this worker's place in the ring.
        peers: every rank's worker address, in rank order.
        control: the run's control (its abort flag ends a wait).
        worker: the Dask worker this runs in (default: the current one).
    """

    def __init__(self, ring: str, rank: int, size: int, peers: list[str], control: Any = None,
                 worker: Any = None):
        if len(peers) != size:
            raise ValueError(f"peers: one address per rank ({size}), got {len(peers)}")
        if worker is None:
            from distributed import get_worker
            worker = get_worker()
        self.ring, self.rank, self.size, self.peers, self.control = ring, rank, size, peers, control
        self.worker = worker
        self.loop = worker.loop.asyncio_loop
        self.right, self.left = (rank + 1) % size, (rank - 1) % size
        self.key = f"{ring}/{rank}"
        self.out: Any = None               # the connection to the right neighbour (opened at first use)
        self.inbox: asyncio.Queue | None = None
        # Two working buffers, used in turn. A send only queues a view of the buffer (the
        # comm layer does not copy it), so a buffer must not change until the neighbour has
        # it. Within a call that holds: a chunk is only overwritten once its complete sum
        # has come round the ring, which needed the neighbour to have read what this rank
        # sent of it. Across calls, call k+2 reuses call k's buffer, and finishing call k+1
        # needed the right neighbour's part of it, sent after the neighbour had all of call k.
        self.bufs = [np.empty(0, np.float32), np.empty(0, np.float32)]
        self.calls = 0
        self.broken = ""                   # why the ring cannot be used any more
        self.sent_bytes = 0                # payload bytes this rank has sent, for the benchmark
        # the peer exchange: a connection per peer, and two send buffers used in turn (as
        # `bufs`: call k+2 reuses call k's, and ending call k+1 needed every peer's message of
        # k+1, which that peer sent after it had this rank's message of call k)
        self.peer_out: dict[int, Any] = {}
        self.xbufs = [np.empty(0, np.float32), np.empty(0, np.float32)]
        self.xcalls = 0

    # ------------------------------------------------------------------ the thread's side
    def allreduce(self, buf: Any) -> np.ndarray:
        """The sum, as a buffer this comm owns: valid until the next call. `buf` is left as it is."""
        buf = np.asarray(buf)
        i = self.calls % 2
        self.calls += 1
        if self.bufs[i].shape != buf.shape or self.bufs[i].dtype != buf.dtype:
            self.bufs[i] = np.empty_like(buf)
        work = self.bufs[i]
        np.copyto(work, buf)
        if self.size == 1:
            return work
        return self._run(self._allreduce(work))

    def neighbour_exchange(self, vec: Any, peers: list[int]) -> dict[int, np.ndarray]:
        """Gossip's peer-to-peer exchange (`base.neighbour_exchange`): `vec` to each rank in
        `peers` over a direct connection, and what each of them sent (copies)."""
        vec = np.asarray(vec)
        i = self.xcalls % 2
        self.xcalls += 1
        if self.xbufs[i].shape != vec.shape or self.xbufs[i].dtype != vec.dtype:
            self.xbufs[i] = np.empty_like(vec)
        work = self.xbufs[i]
        np.copyto(work, vec)
        if not peers:
            return {}
        return self._run(self._exchange(work, list(peers)))

    def allgather(self, payload: Any) -> list[np.ndarray]:
        """Every worker's byte payload in rank order (`base.gathered_sum`): a ring allgather
        over the connection to the right neighbour, P - 1 steps, each passing on the payload
        received in the step before (each worker sends P - 1 payloads: `ring_allgather_bytes`)."""
        work = np.array(payload, dtype=np.uint8, copy=True)    # in flight while the caller goes on
        if self.size == 1:
            return [work]
        return self._run(self._allgather(work))

    def barrier(self) -> None:
        self.allreduce(np.zeros(1, dtype=np.float32))

    def close(self) -> None:
        """Close the connections to the right neighbour and the peers, and drop this rank's inboxes."""
        try:  # the worker (and its loop) may be shutting down: nothing left to tidy then
            for conn in [self.out, *self.peer_out.values()]:
                if conn is not None and not self.broken:
                    asyncio.run_coroutine_threadsafe(_close(conn), self.loop).result(timeout=5)
                elif conn is not None:
                    self.loop.call_soon_threadsafe(conn.abort)
            for key in [self.key, *(self._peer_key(self.rank, j) for j in self.peer_out)]:
                self.loop.call_soon_threadsafe(_BOXES.pop, key, None)
        except Exception:
            pass
        self.out = None
        self.peer_out = {}

    def _run(self, coro: Any) -> Any:
        if self.broken:
            coro.close()
            raise WorkerLost(self.broken)
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        while True:
            try:
                return fut.result(timeout=ABORT_POLL_S)
            except (TimeoutError, concurrent.futures.TimeoutError):
                if self.control is not None and self.control.aborted():
                    fut.cancel()
                    self.broken = "allreduce aborted: a peer is gone"
                    raise WorkerLost(self.broken) from None
            except WorkerLost as exc:
                self.broken = str(exc)
                raise

    # ------------------------------------------------------------------ the event loop's side
    async def _connect(self) -> None:
        from distributed.comm import connect
        address = self.peers[self.right]
        try:
            self.out = await connect(address, timeout=CONNECT_TIMEOUT_S, **self.worker.connection_args)
            await self.out.write({"op": HANDLER, "key": f"{self.ring}/{self.right}", "src": self.rank,
                                  "src_address": self.peers[self.rank], "reply": False})
        except Exception as exc:
            raise WorkerLost(f"rank {self.right} ({address}) is unreachable: {type(exc).__name__}: {exc}") from None
        self.inbox = _box(self.key)

    async def _send(self, data: np.ndarray) -> None:
        from distributed.protocol import to_serialize
        try:
            await self.out.write({"d": to_serialize(data)})
        except Exception as exc:
            raise WorkerLost(f"rank {self.right} ({self.peers[self.right]}) is gone: "
                             f"sending to it failed ({type(exc).__name__})") from None
        self.sent_bytes += data.nbytes

    async def _receive(self) -> np.ndarray:
        msg = await self.inbox.get()
        if isinstance(msg, _Closed):
            raise WorkerLost(msg.reason)
        return msg["d"]

    async def _allreduce(self, work: np.ndarray) -> np.ndarray:
        try:
            if self.out is None:
                await self._connect()
            p, r = self.size, self.rank
            if p == 2:                                       # swap whole buffers
                await self._send(work)
                other = await self._receive()
                if not other.flags.writeable:
                    other = other.copy()
                # x_0 + x_1 on both ranks; the sum goes into the received array, since
                # `work` may still be on its way to the neighbour
                return np.add(work, other, out=other) if r == 0 else np.add(other, work, out=other)
            bounds = chunk_bounds(work.shape[0], p)
            for s in range(p - 1):                           # reduce-scatter
                lo, hi = bounds[(r - s) % p]
                await self._send(work[lo:hi])
                lo, hi = bounds[(r - s - 1) % p]
                part = await self._receive()
                np.add(part, work[lo:hi], out=work[lo:hi])   # (sum so far from the left) + mine
            for s in range(p - 1):                           # all-gather
                lo, hi = bounds[(r + 1 - s) % p]
                await self._send(work[lo:hi])
                lo, hi = bounds[(r - s) % p]
                work[lo:hi] = await self._receive()
            return work
        except WorkerLost as exc:
            await self._tell_right(str(exc))
            raise
        except asyncio.CancelledError:
            await self._tell_right("allreduce aborted: a peer is gone")
            raise

    async def _allgather(self, work: np.ndarray) -> list[np.ndarray]:
        try:
            if self.out is None:
                await self._connect()
            p, r = self.size, self.rank
            parts: list[Any] = [None] * p
            parts[r] = cur = work
            for s in range(p - 1):               # step s: pass on rank r - s's, get rank r - s - 1's
                await self._send(cur)
                cur = np.array(await self._receive(), dtype=np.uint8, copy=True)
                parts[(r - s - 1) % p] = cur
            return parts
        except WorkerLost as exc:
            await self._tell_right(str(exc))
            raise
        except asyncio.CancelledError:
            await self._tell_right("allgather aborted: a peer is gone")
            raise

    def _peer_key(self, dst: int, src: int) -> str:
        """The inbox on rank `dst` for the exchange's messages from rank `src`."""
        return f"{self.ring}/{dst}<{src}"

    async def _exchange(self, work: np.ndarray, peers: list[int]) -> dict[int, np.ndarray]:
        from distributed.comm import connect
        from distributed.protocol import to_serialize
        for j in peers:
            if j in self.peer_out:
                continue
            address = self.peers[j]
            try:
                conn = await connect(address, timeout=CONNECT_TIMEOUT_S, **self.worker.connection_args)
                await conn.write({"op": HANDLER, "key": self._peer_key(j, self.rank), "src": self.rank,
                                  "src_address": self.peers[self.rank], "reply": False})
            except Exception as exc:
                raise WorkerLost(f"rank {j} ({address}) is unreachable: {type(exc).__name__}: {exc}") from None
            self.peer_out[j] = conn
        for j in peers:                                     # every send first: nobody waits to send
            try:
                await self.peer_out[j].write({"d": to_serialize(work)})
            except Exception as exc:
                raise WorkerLost(f"rank {j} ({self.peers[j]}) is gone: sending to it failed "
                                 f"({type(exc).__name__})") from None
            self.sent_bytes += work.nbytes
        got = {}
        for j in peers:
            msg = await _box(self._peer_key(self.rank, j)).get()
            if isinstance(msg, _Closed):
                raise WorkerLost(msg.reason)
            got[j] = np.array(msg["d"], copy=True)
        return got

    async def _tell_right(self, reason: str) -> None:
        """Pass the reason on, so that the rest of the ring ends with it too (best effort)."""
        if self.out is None:
            return
        try:
            await asyncio.wait_for(self.out.write({"abort": reason}), timeout=1.0)
        except Exception:
            pass
