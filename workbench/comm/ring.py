"""Ring allreduce between Dask workers, over direct worker-to-worker connections.

The portable allreduce for workers on several hosts (`comm="dask"`; on one host the
workbench picks shared memory instead, `comm.shm`). Each rank opens one connection to its
right neighbour's own Dask server (the address the worker already listens on: tcp, tls,
or ucx where distributed-ucxx is installed), and the left neighbour's connection to it
arrives through a handler (`HANDLER`) installed on every worker of the run before the
loops start (`install`). No actor, no scheduler: every byte goes straight from one worker
to the next.

Algorithm (reduce-scatter, then all-gather), for P ranks and a buffer of m elements cut
into P contiguous chunks, chunk c = [c m // P, (c + 1) m // P) (uneven sizes, empty
chunks when m < P are fine):

* reduce-scatter, steps s = 0 .. P-2: rank r sends chunk (r - s) mod P to rank r+1 and
  adds the chunk (r - s - 1) mod P arriving from rank r-1 into its own copy. After it,
  rank r holds the complete sum of chunk (r + 1) mod P;
* all-gather, steps s = 0 .. P-2: rank r sends chunk (r + 1 - s) mod P on and stores the
  chunk (r - s) mod P arriving from its left.

What a rank sends at each step is what it received at the step before (the 2 (P-1)
steps are one pipeline: step t sends chunk (r - t) mod P). Each chunk travels in
segments of at most `SEGMENT_BYTES`, and a segment is added and passed on as soon as it
has arrived, so that on a real network the sums and the next hop overlap the rest of the
chunk's transfer (a chunk's last hop ends one segment, not one chunk, after its first).
With P = 2 the two ranks instead swap whole buffers (in segments too): the same bytes as
the ring (m each way), one hop instead of two.

Each rank sends and receives 2 (P-1) chunks of about m / P elements: 2 m (P-1) / P
elements each way per allreduce, whatever P (`base.ring_allreduce_bytes`); the time the
cost model charges for it is `network.ring_allreduce_time`.

Frames: over tcp and tls (a Dask comm with a byte stream), every segment is a 16-byte
header (kind, byte count) and the array's own bytes: sent from the array (the caller's
buffer or this comm's, never a copy) and read straight into the place it belongs (the
sum's buffer, or one scratch buffer whose segment is added at once). Over a comm without
a byte stream (ucx, inproc), each segment is one Dask message (a copy serialised, then
copied into place). The byte count also catches ranks that call with buffers of different sizes.

Summation order (deterministic, independent of timing and of the segment size): chunk c
is summed starting at rank c and going up the ring, ``((x_c + x_{c+1}) + x_{c+2}) +
... + x_{c-1}`` (indices mod P). Chunk 0 is exactly the rank-order sum; the others are
rank-order sums rotated to start at rank c, equal to it to float rounding. For P = 2
(the swap) both ranks compute x_0 + x_1: bitwise the rank-order sum, hence the
shared-memory allreduce's result (and `ring_order_sum` agrees, since a + b == b + a in
IEEE arithmetic). Every rank ends with bitwise the same values: the all-gather copies, it
does not add.

Gossip's peer-to-peer exchange (`neighbour_exchange`, dpsgd) goes over the same kind of
direct connections, one per (rank, peer) pair, opened at its first use: rank r sends its
vector to each peer j (key "ring/j<r", so the receiver has one in-order connection per
sender) and reads one frame from each of its peers. Each rank sends d n floats a call
(d = len(peers)), the exchange's own messages and nothing else.

Failures never hang: a neighbour whose process dies closes its connection (a read from it
fails at once), a failed send names the rank it was for, and a rank that gives up sends
the reason to its right neighbour in place of its next frame, so the whole ring ends with
`WorkerLost` naming the first rank that was lost. A lost host that leaves no closed
connection is caught by the run's abort flag (the engine aborts a synchronous run when it
sees a worker gone), checked every `ABORT_POLL_S`; connecting is bounded by
`CONNECT_TIMEOUT_S`.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import ssl
import struct
from typing import Any

import numpy as np

from .base import WorkerLost

HANDLER = "workbench_ring"   # the op name the peers' servers dispatch our connection to
ABORT_POLL_S = 0.5           # how often a waiting rank checks the run's abort flag
CONNECT_TIMEOUT_S = 20.0     # opening the connection to the right neighbour
# The pipeline's unit: a segment is summed and passed on as soon as it is in. Each costs the
# event loop a few reads and a send (60-90 us on a loaded 2-core host), so 1 MiB keeps that
# under a tenth of its transfer; buffers below P MiB travel as whole chunks.
SEGMENT_BYTES = 1 << 20

_HEADER = struct.Struct("<qq")   # a frame's kind and its payload's byte count
_DATA, _ABORT = 0, 1


def chunk_bounds(m: int, size: int) -> list[tuple[int, int]]:
    """The P contiguous chunks the ring moves, as (lo, hi); sizes differ by at most one.

    >>> chunk_bounds(10, 3)
    [(0, 3), (3, 6), (6, 10)]
    >>> chunk_bounds(2, 3)
    [(0, 0), (0, 1), (1, 2)]
    """
    return [(c * m // size, (c + 1) * m // size) for c in range(size)]


def segments(lo: int, hi: int, most: int) -> list[tuple[int, int]]:
    """[lo, hi) cut into consecutive segments of at most `most` elements (none when empty).

    >>> segments(0, 10, 4)
    [(0, 4), (4, 8), (8, 10)]
    >>> segments(3, 3, 4)
    []
    """
    return [(a, min(a + most, hi)) for a in range(lo, hi, max(1, most))]


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


# ------------------------------------------------------------------------------ connections
class _Link:
    """One connection between two ranks, used only on the worker's event loop: frames
    written from arrays and read into them (see the module's docstring).

    Args:
        comm: the Dask comm (its `stream`, where it has one, carries the frames).
        peer, address: the rank at the other end and its worker's address (for errors).
    """

    def __init__(self, comm: Any, peer: int, address: str):
        self.comm, self.peer, self.address = comm, peer, address
        self.stream = getattr(comm, "stream", None)
        sock = getattr(self.stream, "socket", None)
        # a plain socket takes header and payload in one call (no lone 16-byte packet);
        # TLS goes through the stream, which encrypts
        self.sock = sock if isinstance(sock, socket.socket) and not isinstance(sock, ssl.SSLSocket) else None
        self.head = bytearray(_HEADER.size)
        self.last_write: Any = None      # the stream's future for the last bytes it queued
        self.finished = asyncio.Event()  # inbound: set once the ring is done with it (`_serve` returns)

    def gone(self, how: str) -> WorkerLost:
        return WorkerLost(f"rank {self.peer} ({self.address}) is gone: {how}")

    async def send(self, data: Any, kind: int = _DATA) -> int:
        """Queue one frame (the payload stays the caller's: unchanged until the peer has it);
        returns the payload's bytes."""
        view = memoryview(data).cast("B")
        n = view.nbytes
        try:
            if self.stream is None:
                from distributed.protocol import to_serialize
                # a copy: a comm that hands over objects (inproc) would otherwise give the
                # peer a view that the caller may change before the peer has read it
                await self.comm.write({"abort": bytes(view).decode()} if kind == _ABORT
                                      else {"d": to_serialize(np.array(data, copy=True))})
                return n
            head = _HEADER.pack(kind, n)
            parts: list[Any] = [head, view] if n else [head]
            if self.sock is not None and not self.stream.writing():
                try:
                    sent = self.sock.sendmsg(parts)     # non-blocking: what the kernel takes now
                except BlockingIOError:
                    sent = 0
                if sent >= len(head):
                    parts, sent = ([view[sent - len(head):]] if n else []), 0
                parts = [p[sent:] if i == 0 else p for i, p in enumerate(parts)]
                parts = [p for p in parts if len(p)]
            for p in parts:                             # the rest, as the socket takes it
                self.last_write = self.stream.write(p)
        except Exception as exc:   # StreamClosedError, CommClosedError, OSError
            raise self.gone(f"sending to it failed ({type(exc).__name__})") from None
        return n

    async def flushed(self) -> None:
        """Wait until everything queued is in the kernel's hands (or failed)."""
        last, self.last_write = self.last_write, None
        if last is not None:
            try:
                await last
            except Exception as exc:
                raise self.gone(f"sending to it failed ({type(exc).__name__})") from None

    async def _frame(self) -> int:
        """Read the next frame's header: its payload's byte count (WorkerLost for an abort)."""
        try:
            await self.stream.read_into(self.head)
            kind, n = _HEADER.unpack(self.head)
            if kind == _ABORT:
                raise WorkerLost((await self.stream.read_bytes(n)).decode())
        except WorkerLost:
            raise
        except Exception as exc:
            raise self.gone(f"its ring connection closed ({type(exc).__name__})") from None
        return n

    async def _message(self) -> Any:
        try:
            msg = await self.comm.read()
        except Exception as exc:
            raise self.gone(f"its ring connection closed ({type(exc).__name__})") from None
        if "abort" in msg:
            raise WorkerLost(msg["abort"])
        return msg["d"]

    async def recv_into(self, dest: np.ndarray) -> None:
        """Read the next frame into `dest` (contiguous, the frame's size)."""
        if self.stream is None:
            got = await self._message()
            if got.nbytes != dest.nbytes:
                raise _mismatch(self.peer, got.nbytes, dest.nbytes)
            np.copyto(dest, got.reshape(dest.shape))
            return
        n = await self._frame()
        if n != dest.nbytes:
            raise _mismatch(self.peer, n, dest.nbytes)
        if n:
            try:
                await self.stream.read_into(memoryview(dest).cast("B"))
            except Exception as exc:
                raise self.gone(f"its ring connection closed ({type(exc).__name__})") from None

    async def recv_bytes(self) -> np.ndarray:
        """Read the next frame into a new uint8 array of its size."""
        if self.stream is None:
            return np.array(await self._message(), dtype=np.uint8, copy=True).reshape(-1)
        out = np.empty(await self._frame(), np.uint8)
        if out.nbytes:
            try:
                await self.stream.read_into(memoryview(out))
            except Exception as exc:
                raise self.gone(f"its ring connection closed ({type(exc).__name__})") from None
        return out

    def abort(self) -> None:
        """Drop the connection now (its pending frames too) and let the handler return."""
        try:
            self.comm.abort()
        finally:
            self.finished.set()


def _mismatch(peer: int, got: int, want: int) -> ValueError:
    return ValueError(f"buf: every rank's buffer must have the same size; rank {peer} sent "
                      f"{got} bytes where this rank expected {want}")


_INBOUND: dict[str, asyncio.Future] = {}   # this process's arriving connections: key -> future of its _Link


def _inbound(key: str) -> asyncio.Future:
    """The future of the connection arriving under `key` (made by whoever asks first)."""
    if key not in _INBOUND:
        _INBOUND[key] = asyncio.get_running_loop().create_future()
    return _INBOUND[key]


async def _serve(comm: Any, key: str, src: int, src_address: str) -> None:
    """The receiving end of a neighbour's (or gossip peer's) connection: handed to the ring
    under `key`, which reads it itself; the handler holds the connection (so that the
    worker's server does not read it) until the ring is done with it."""
    link = _Link(comm, src, src_address)
    box = _inbound(key)
    if box.done():   # a second connection under a key in use: refuse it
        link.abort()
        return
    box.set_result(link)
    await link.finished.wait()


def install(dask_worker: Any) -> None:
    """Register the ring's receiving handler on a worker (via `Client.run`; idempotent)."""
    dask_worker.handlers.setdefault(HANDLER, _serve)


# ------------------------------------------------------------------------------ the comm
class RingComm:
    """The worker-side `Comm` for several hosts: a ring allreduce over Dask's comms.

    Args:
        ring: a name unique to this collective (run id and group).
        rank, size: this worker's place in the ring.
        peers: every rank's worker address, in rank order.
        control: the run's control (its abort flag ends a wait).
        worker: the Dask worker this runs in (default: the current one).
        segment_bytes: the pipeline's unit (every rank of the ring must use the same).
    """

    def __init__(self, ring: str, rank: int, size: int, peers: list[str], control: Any = None,
                 worker: Any = None, segment_bytes: int = SEGMENT_BYTES):
        if len(peers) != size:
            raise ValueError(f"peers: one address per rank ({size}), got {len(peers)}")
        if worker is None:
            from distributed import get_worker
            worker = get_worker()
        self.ring, self.rank, self.size, self.peers, self.control = ring, rank, size, peers, control
        self.worker, self.segment_bytes = worker, int(segment_bytes)
        self.loop = worker.loop.asyncio_loop
        self.right, self.left = (rank + 1) % size, (rank - 1) % size
        self.key = f"{ring}/{rank}"
        self.out: _Link | None = None      # to the right neighbour (opened at first use)
        self.inn: _Link | None = None      # from the left neighbour (arrives through `_serve`)
        # The sums, in two buffers used in turn. A send only queues a view of a buffer, so it
        # must not change until the neighbour has it. Within a call that holds: a segment is
        # only overwritten once its complete sum has come round the ring, which needed the
        # right neighbour to have read what this rank sent of it. Across calls, call k+2
        # reuses call k's buffer, and finishing call k+1 needed the right neighbour's part
        # of it, sent after the neighbour had all of call k. The caller's own buffer is
        # sent too (this rank's chunk, at the first step): the call returns only once its
        # sum has come round, past the right neighbour, or (P = 2) once it is all sent.
        self.bufs = [np.empty(0, np.float32), np.empty(0, np.float32)]
        self.scratch = np.empty(0, np.float32)   # where the left's partial sums land before the add
        self.calls = 0
        self.broken = ""                   # why the ring cannot be used any more
        self.sent_bytes = 0                # payload bytes this rank has sent, for the benchmark
        # the peer exchange: a connection each way per peer, and two send buffers used in
        # turn (as `bufs`: call k+2 reuses call k's, and ending call k+1 needed every peer's
        # message of k+1, which that peer sent after it had this rank's message of call k)
        self.peer_out: dict[int, _Link] = {}
        self.peer_in: dict[int, _Link] = {}
        self.xbufs = [np.empty(0, np.float32), np.empty(0, np.float32)]
        self.xcalls = 0

    # ------------------------------------------------------------------ the thread's side
    def allreduce(self, buf: Any) -> np.ndarray:
        """The sum, as a buffer this comm owns: valid until the next call. `buf` is left as it is."""
        buf = np.ascontiguousarray(buf)
        i = self.calls % 2
        self.calls += 1
        if self.bufs[i].shape != buf.shape or self.bufs[i].dtype != buf.dtype:
            self.bufs[i] = np.empty_like(buf)
        out = self.bufs[i]
        if self.size == 1:
            np.copyto(out, buf)
            return out
        if self.size > 2 and (self.scratch.shape != buf.shape or self.scratch.dtype != buf.dtype):
            self.scratch = np.empty_like(buf)
        return self._run(self._allreduce(buf.reshape(-1), out.reshape(-1))).reshape(buf.shape)

    def neighbour_exchange(self, vec: Any, peers: list[int]) -> dict[int, np.ndarray]:
        """Gossip's peer-to-peer exchange (`base.neighbour_exchange`): `vec` to each rank in
        `peers` over a direct connection, and what each of them sent (new arrays)."""
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
        work = np.array(payload, dtype=np.uint8, copy=True).reshape(-1)   # in flight while the caller goes on
        if self.size == 1:
            return [work]
        return self._run(self._allgather(work))

    def barrier(self) -> None:
        self.allreduce(np.zeros(1, dtype=np.float32))

    def close(self) -> None:
        """Close the connections (flushing what is queued, unless the ring is broken) and
        release the arriving ones."""
        try:  # the worker (and its loop) may be shutting down: nothing left to tidy then
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout=5)
        except Exception:
            pass
        self.out, self.inn, self.peer_out, self.peer_in = None, None, {}, {}

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
            except (WorkerLost, ValueError) as exc:
                self.broken = str(exc)
                raise

    # ------------------------------------------------------------------ the event loop's side
    async def _connect(self, dst: int, key: str) -> _Link:
        from distributed.comm import connect
        address = self.peers[dst]
        try:
            comm = await connect(address, timeout=CONNECT_TIMEOUT_S, **self.worker.connection_args)
            await comm.write({"op": HANDLER, "key": key, "src": self.rank, "src_address": self.peers[self.rank],
                              "reply": False})
        except Exception as exc:
            raise WorkerLost(f"rank {dst} ({address}) is unreachable: {type(exc).__name__}: {exc}") from None
        return _Link(comm, dst, address)

    async def _neighbours(self) -> tuple[_Link, _Link]:
        if self.out is None:
            self.out = await self._connect(self.right, f"{self.ring}/{self.right}")
        if self.inn is None:
            self.inn = await _inbound(self.key)
        return self.out, self.inn

    async def _send(self, link: _Link, data: Any) -> None:
        self.sent_bytes += await link.send(data)

    async def _allreduce(self, buf: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The ring over `buf` (the caller's, only read) into `out` (see the module's docstring)."""
        try:
            right, left = await self._neighbours()
            p, r = self.size, self.rank
            seg = max(1, self.segment_bytes // max(1, buf.itemsize))
            if p == 2:                                       # swap whole buffers
                pieces = segments(0, buf.shape[0], seg)
                for lo, hi in pieces:
                    await self._send(right, buf[lo:hi])
                for lo, hi in pieces:
                    await left.recv_into(out[lo:hi])
                    # x_0 + x_1 on both ranks
                    if r == 0:
                        np.add(buf[lo:hi], out[lo:hi], out=out[lo:hi])
                    else:
                        np.add(out[lo:hi], buf[lo:hi], out=out[lo:hi])
                await right.flushed()                        # `buf` is the caller's again
                return out
            bounds = chunk_bounds(buf.shape[0], p)
            scratch = self.scratch.reshape(-1)
            for lo, hi in segments(*bounds[r], seg):         # step 0: this rank's own chunk
                await self._send(right, buf[lo:hi])
            last = 2 * p - 3
            for t in range(last + 1):                        # step t receives chunk (r - t - 1) mod P
                for lo, hi in segments(*bounds[(r - t - 1) % p], seg):
                    if t < p - 1:                            # reduce-scatter: (sum so far from the left) + mine
                        await left.recv_into(scratch[lo:hi])
                        np.add(scratch[lo:hi], buf[lo:hi], out=out[lo:hi])
                    else:                                    # all-gather: the complete sum
                        await left.recv_into(out[lo:hi])
                    if t < last:                             # on to the right, at step t + 1
                        await self._send(right, out[lo:hi])
            return out
        except (WorkerLost, ValueError) as exc:
            await self._tell_right(str(exc))
            raise
        except asyncio.CancelledError:
            await self._tell_right("allreduce aborted: a peer is gone")
            raise

    async def _allgather(self, work: np.ndarray) -> list[np.ndarray]:
        try:
            right, left = await self._neighbours()
            p, r = self.size, self.rank
            parts: list[Any] = [None] * p
            parts[r] = cur = work
            for s in range(p - 1):               # step s: pass on rank r - s's, get rank r - s - 1's
                await self._send(right, cur)
                cur = await left.recv_bytes()
                parts[(r - s - 1) % p] = cur
            return parts
        except WorkerLost as exc:
            await self._tell_right(str(exc))
            raise
        except asyncio.CancelledError:
            await self._tell_right("allgather aborted: a peer is gone")
            raise

    def _peer_key(self, dst: int, src: int) -> str:
        """The key on rank `dst` of the exchange's connection from rank `src`."""
        return f"{self.ring}/{dst}<{src}"

    async def _exchange(self, work: np.ndarray, peers: list[int]) -> dict[int, np.ndarray]:
        for j in peers:
            if j not in self.peer_out:
                self.peer_out[j] = await self._connect(j, self._peer_key(j, self.rank))
        for j in peers:                                     # every send first: nobody waits to send
            await self._send(self.peer_out[j], work)
        got = {}
        for j in peers:
            if j not in self.peer_in:
                self.peer_in[j] = await _inbound(self._peer_key(self.rank, j))
            got[j] = np.empty_like(work)
            await self.peer_in[j].recv_into(got[j])
        return got

    async def _tell_right(self, reason: str) -> None:
        """Pass the reason on, so that the rest of the ring ends with it too (best effort)."""
        if self.out is None:
            return
        try:
            await asyncio.wait_for(self.out.send(reason.encode(), kind=_ABORT), timeout=1.0)
            await asyncio.wait_for(self.out.flushed(), timeout=1.0)
        except Exception:
            pass

    async def _close(self) -> None:
        for link in [self.out, *self.peer_out.values()]:
            if link is None:
                continue
            if self.broken:
                link.abort()
                continue
            try:
                await asyncio.wait_for(link.flushed(), timeout=2.0)
                await link.comm.close()
            except Exception:
                link.abort()
        keys = [self.key, *(self._peer_key(self.rank, j) for j in self.peer_in)]
        for key in keys:
            box = _INBOUND.pop(key, None)
            if box is None:
                continue
            if box.done() and not box.cancelled():
                box.result().abort()
            else:
                box.cancel()
