"""The communication interface every algorithm is written against.

Two roles cover the seed papers' algorithms:

* `Comm`: a collective among the P workers of a run: `allreduce` (elementwise sum in
  rank order, so results are deterministic) and `barrier`; `neighbour_exchange` (gossip's
  peer-to-peer exchange: every comm has its own, moving only the peers' vectors) and
  `compressed_sum` (compressed gradients, which a comm that charges time implements
  natively), each called through the one function of the same name below; and
  `allgather` of byte payloads (compressed gradients that are gathered), called through
  `gathered_sum`.
* a server role (`roles`): a parameter server (`pull`, `push`), the EASGD centre
  (`elastic`, `retire`, `centre`), LTFB's mailbox (`deposit`, `collect`, `depart`),
  AD-PSGD's table of models (`average`, `model`) or cgdp's master (`push`, `fetch`). Each
  role's maths lives in one core in `roles`, and each core states its operations once
  (`ServerRole`: a table of `RoleOp`s saying what each waits for, whether it changes what
  others wait for, what it moves); one generic front-end per transport serves any core
  from that table (`serve(op, *args)`, the ops also as methods: `RoleFrontEnd`): a lock
  between threads, a Dask actor, shared memory, the simulator's virtual clock. (cgdp's
  chunk master is served from its table on threads and Dask; in shared memory, where the
  workers reduce the chunks themselves, and on the virtual clock, it has its own.)

`Control` carries the stop and abort requests between the client and the loops. An
optional network emulator (`Emulated`) adds latency and a bandwidth cap to any of them.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol


# ------------------------------------------------------------------------------ bytes on the wire
# What one worker sends in an exchange, as the exchange's algorithm sends it: the numbers the
# step records' `bytes_sent` hold and the cost model's beta terms multiply. (On one host the
# shared-memory transport moves these bytes through memory; the count is the algorithm's.)
def ring_allreduce_bytes(size: int, n_bytes: float) -> float:
    """Bytes each worker sends in a ring allreduce (reduce-scatter + allgather) of `n_bytes`.

    >>> ring_allreduce_bytes(4, 1000), ring_allreduce_bytes(1, 1000)
    (1500.0, 0.0)
    """
    p = int(size)
    return 2.0 * (p - 1) / p * n_bytes if p > 1 else 0.0


def ring_allgather_bytes(size: int, n_bytes: float) -> float:
    """Bytes each worker sends in a ring allgather of one `n_bytes` payload per worker: it
    passes on P - 1 payloads (its own and P - 2 others').

    >>> ring_allgather_bytes(4, 100), ring_allgather_bytes(1, 100)
    (300.0, 0.0)
    """
    return float(int(size) - 1) * n_bytes


class WorkerLost(RuntimeError):
    """A collective cannot complete because a peer is gone (the run was aborted)."""


class StopWait(Exception):
    """A wait on a server role (an elastic turn, a tournament partner) ended because the
    run was asked to stop: the worker's loop ends as `stopped` (algorithms.base.run_loop)."""


def check_wait(control: Any, what: str, on_stop: bool = True) -> None:
    """Called now and then from inside a blocking wait: WorkerLost when the run was
    aborted (a peer of a synchronous run is gone), StopWait when a stop was asked and
    `on_stop` (waits whose end the peers do not decide together: turns, partners)."""
    if control is None:
        return
    if control.aborted():
        raise WorkerLost(f"{what} aborted: a peer is gone")
    if on_stop and control.stop_requested():
        raise StopWait(f"{what}: stop requested")


# ------------------------------------------------------------------------------ server roles
def _no_arrays(*args: Any) -> tuple[int, ...]:
    return ()


@dataclass(frozen=True)
class RoleOp:
    """One operation of a server role, with what every front-end needs to serve it.

    Sizes are the lengths of the arrays that travel (each converted to bytes by the
    front-end that charges them: the simulator scales a parameter vector to its timing
    model's, the network emulator counts real bytes), so the bytes in and out are stated
    here once and each transport prices them its own way.
    """

    name: str                 # what the algorithm calls (`server.pull()`)
    method: str               # the core's method that does it (same arguments)
    ready: Callable[..., bool] | None = None   # `ready(core, *args)`: the call may be served now;
    #   None: served at once (first come, first served). Front-ends wait for it.
    turn: Callable[..., int | None] | None = None   # `turn(*args)`: the rank whose round-robin
    #   turn `ready` waits for (None: no turn); the simulator's fast path for turns
    changes: bool = False     # serving it may make another call's `ready` true: waiters re-check
    notice: bool = False      # a one-way announcement (a worker retired or departed): no reply, and
    #   on the virtual clock it takes effect at once, free
    sizes_in: Callable[..., tuple[int, ...]] = _no_arrays        # `sizes_in(*args)`: arrays sent
    sizes_out: Callable[..., tuple[int, ...]] = _no_arrays       # `sizes_out(core, *args)`: arrays
    #   in the reply, as they are when the call is served (before the op runs)
    work: Callable[..., tuple[float, int | None]] | None = None  # `work(core, *args)`: (passes,
    #   floats or None for the whole vector) the server's memory goes through; None: no work
    what: str = ""            # the wait, as an error message names it

    @property
    def waits(self) -> bool:
        """Whether a call can wait (for a turn, a partner): such waits end on a stop too."""
        return self.ready is not None


class ServerRole(Protocol):
    """A server role's core: its maths (`roles`), and the table of its operations.

    Cores are not thread-safe; a front-end serialises calls to `serve`."""

    ROLE: ClassVar[str]
    OPS: ClassVar[Mapping[str, RoleOp]]


def role_op(core: Any, name: str) -> RoleOp:
    """The operation `name` of `core`'s role; a clear error for one it does not have."""
    ops = type(core).OPS
    if name not in ops:
        raise AttributeError(f"op: one of {', '.join(ops)} (the {type(core).ROLE} role), got {name!r}")
    return ops[name]


def serve_now(core: Any, op: RoleOp, args: tuple, kwargs: dict | None = None) -> Any:
    """Run `op` on `core` (the caller holds whatever serialises the core's calls)."""
    return getattr(core, op.method)(*args, **(kwargs or {}))


class RoleFrontEnd:
    """A front-end's role operations as methods: `server.pull()` is `server.serve("pull")`.

    Subclasses set `ops` (the core's table) and implement `serve(name, *args)`; one may
    also specialise `bind(name)`, the callable a method name stands for (built on first
    use and kept on the instance, so later calls are plain attribute reads)."""

    ops: Mapping[str, RoleOp] = {}

    def serve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def bind(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.serve(name, *args, **kwargs)
        return call

    def __getattr__(self, name: str) -> Any:
        ops = self.__dict__.get("ops") or type(self).__dict__.get("ops") or {}
        if name in ops:
            call = self.bind(name)
            call.__name__ = name
            self.__dict__[name] = call
            return call
        raise AttributeError(f"{type(self).__name__} has no {name!r} (role ops: {', '.join(ops) or 'none'})")


class Comm(Protocol):
    rank: int
    size: int

    def allreduce(self, buf: Any) -> Any:
        """Sum `buf` over all workers (rank order); returns the sum (a new array or a view
        of a buffer the comm owns, valid until the next call). Never modifies `buf`."""

    def barrier(self) -> None: ...

    def close(self) -> None: ...

    # Optional: `compressed_sum(buf, payload_bytes, gather)`, the same sum as `allreduce(buf)`
    # for an exchange of compressed gradients that stands for part of the parameter vector:
    # with `gather`, each worker's `buf` decodes a payload of `payload_bytes` that every worker
    # gathers (top-k pairs, sign bits, QSGD levels); without, `buf` itself is allreduced (random-k
    # values, PowerSGD's factors). Comms that charge time (the simulator, `Emulated`) charge a
    # ring allgather of the payloads, or an allreduce of `payload_bytes` (the simulator scales
    # both as it scales the parameter vector to a timing model's); the others have none, and
    # `compressed_sum` below carries it as their allreduce (the same sum).
    #
    # Optional: `allgather(payload)`: every worker's uint8 payload (all of one length), as a
    # list in rank order (this worker's own included); `allgather_limit` (optional) the most
    # bytes a payload may have. `gathered_sum` below uses it, else `compressed_sum`.


def neighbour_exchange(comm: Any, vec: Any, peers: list[int]) -> dict[int, Any]:
    """Peer-to-peer: send `vec` to each rank in `peers` and return what each of them sent
    (every worker of the group calls it at the same point, each with its own peers, and
    the peer relation is symmetric: gossip over an undirected graph).

    Each transport's comm does it as gossip does, moving len(peers) vectors per worker
    and nothing else (what a step's `bytes_sent` counts, and the cost model's `gossip`
    pattern charges):

    * threads (`threads.ThreadComm`) and shared memory (`shm.ShmComm`): each worker writes
      its own slot, meets the others, and reads only its peers' slots;
    * the Dask ring across hosts (`ring.RingComm`): a direct connection to each peer, one
      message each way per peer;
    * NCCL (`nccl.NcclComm`): one grouped set of ncclSend / ncclRecv, a pair per peer;
    * the simulator: point-to-point messages on the virtual clock; `Emulated`: their delay.

    A comm without its own (a third party's) falls back to the one collective every comm
    has: an allreduce in which each worker fills its own slot of a (P, n) buffer, i.e. an
    allgather: the right values, but P n floats moved instead of len(peers) n."""
    fn = getattr(comm, "neighbour_exchange", None)
    if fn is not None:
        return fn(vec, peers)
    import numpy as np
    n, p = vec.shape[0], comm.size
    slots = np.zeros(p * n, dtype=vec.dtype)
    slots[comm.rank * n:(comm.rank + 1) * n] = vec
    every = comm.allreduce(slots)
    return {j: np.array(every[j * n:(j + 1) * n], copy=True) for j in peers}


def compressed_sum(comm: Any, buf: Any, payload_bytes: float, gather: bool) -> Any:
    """The sum over workers of `buf` in a compressed exchange (see `Comm`): the comm's own
    `compressed_sum` where it has one (it charges the exchange's bytes), else its allreduce."""
    fn = getattr(comm, "compressed_sum", None)
    return fn(buf, payload_bytes, gather) if fn is not None else comm.allreduce(buf)


def can_allgather(comm: Any, nbytes: int) -> bool:
    """Whether `comm` has its own `allgather(payload)` of byte payloads of `nbytes` (its
    optional `allgather_limit` says the most bytes a payload may have: shared memory's
    slots). `Emulated` asks the comm it wraps."""
    if isinstance(comm, Emulated):
        return can_allgather(comm.inner, nbytes)
    if getattr(comm, "allgather", None) is None:
        return False
    limit = getattr(comm, "allgather_limit", None)
    return limit is None or nbytes <= limit


def gathered_sum(comm: Any, buf: Any, payload: Any, decode: Callable[[Any], Any]) -> Any:
    """The sum over workers of `buf` in a compressed exchange whose payloads are gathered
    (top-k, sign, QSGD): `payload` is this worker's encoded `buf` (a uint8 array, the same
    length on every worker), `decode` turns any worker's payload back into its `buf`.

    Where the comm has its own `allgather` (`can_allgather`), the payloads are really
    allgathered, so each worker receives the others' P - 1 payloads and nothing else
    (the bytes `ring_allgather_bytes` counts), and each decodes all P (its own too) and
    sums them in rank order: bitwise the thread transport's allreduce of the decoded
    vectors, which sums in rank order too (but for the sign of zeros). `decode` must
    return a fresh array. Each transport's comm does it so:

    * threads (`threads.ThreadComm`) and shared memory (`shm.ShmComm`): each worker
      writes its payload into its own slot, meets the others, reads theirs, and meets
      again (or, for a shared-memory pair, alternates slot sets) before a slot is reused;
    * the Dask ring across hosts (`ring.RingComm`): a ring allgather over its connection
      to the right neighbour, P - 1 payloads sent by each worker;
    * NCCL (`nccl.NcclComm`): one ncclAllGather of the byte buffers;
    * `Emulated`: the allgather's delay, then the inner comm's.

    A comm without one (the simulator, which charges the allgather on the virtual
    clock; a third party's) carries it as `compressed_sum`: an allreduce of the decoded
    vectors, the same sum."""
    if not can_allgather(comm, int(payload.nbytes)):
        return compressed_sum(comm, buf, payload.nbytes, True)
    total = None
    for part in comm.allgather(payload):  # rank order; its own decoded too (shared memory's
        vec = decode(part)                 # allgather reuses the slot `buf` may be)
        if total is None:
            total = vec
        else:
            total += vec
    return total


class Control(Protocol):
    def stop_requested(self) -> bool: ...

    def request_stop(self, reason: str) -> None: ...

    def aborted(self) -> bool: ...


class ThreadControl:
    """Stop/abort flags for workers running as threads in one process, and the step the
    client asked the next checkpoint at (`request_checkpoint`, `checkpoint_at`)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._abort = threading.Event()
        self.reason = ""
        self._checkpoint: int | None = None

    def request_checkpoint(self, step: int) -> None:
        """Client side: every worker saves its state before `step` (a wall-clock checkpoint)."""
        self._checkpoint = int(step)

    def checkpoint_at(self) -> int | None:
        return self._checkpoint

    def request_pause(self, at: dict) -> None:
        """Client side: an elastic run's loops pause at their first boundary at or after
        `at` ({"step": K}, or {"time": T} on a virtual clock) and send their states."""
        self._pause = dict(at)

    def pause_at(self) -> dict | None:
        return getattr(self, "_pause", None)

    def requests(self) -> tuple[int | None, dict | None]:
        """(the checkpoint step asked for, where to pause), both None before any ask."""
        return self._checkpoint, self.pause_at()

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def request_stop(self, reason: str = "stop requested") -> None:
        self.reason = self.reason or reason
        self._stop.set()

    def abort(self, reason: str) -> None:
        self.reason = reason
        self._abort.set()
        self._stop.set()

    def aborted(self) -> bool:
        return self._abort.is_set()


WORD_POLL_S = 1.0   # with a stop word, the slow control is polled this often (unless requests are wanted)


class ThrottledControl:
    """Polls a slow control (a scheduler round trip) every `interval` seconds.

    The first poll runs in the caller's thread; later ones on a daemon thread, so the
    training loop only reads a flag: a round trip (0.5 ms idle, tens of ms on a busy
    machine) never stalls a step, and never stalls a synchronous run's other workers.
    With a `word` (the run's stop word in shared memory, one host) a stop is seen at the
    next call instead of the next poll: the client sets it with the event, and so does a
    loop that asks to stop (`request_stop`), so the poll then only needs to catch what the
    word does not carry (a client gone, or a word the client could not reach) and runs
    every WORD_POLL_S. The client's checkpoint requests travel beside it in the segment
    (`barrier.set_shm_checkpoint`); only an elastic run's pause requests (`_wants`) bring
    the poll back to every `interval`.
    Each poll is a scheduler round trip handled by the worker's event loop on the
    training's cores: at 0.2 s they cost a two-worker teaching-size run a few percent
    (docs/benchmarks.md)."""

    def __init__(self, control: Any, interval: float = 0.2, background: bool = True, word: Any = None):
        self.control, self.interval, self.background = control, interval, background
        self.word = word      # optional: a stop word read at every call (`barrier.ShmStopWord`: one host)
        self._look = word.view if word is not None else None   # (read every step: one look, no call)
        self._next = 0.0
        self._stop = False
        self._checkpoint: int | None = None   # the last checkpoint step the client asked for, as polled
        self._pause: dict | None = None         # where the client asked an elastic run to pause, as polled
        self._wants = False                     # the loop asks for them (checkpoints or elastic): poll them too
        self._poller: threading.Thread | None = None
        self._closed = threading.Event()

    def stop_requested(self) -> bool:
        if self._stop:
            return True
        look = self._look
        if look is not None and look[0]:   # the word's memoryview: `ShmStopWord.is_set`, without the call
            self._stop = True
            return True
        if self._poller is not None:
            return self._stop
        self._first_poll()
        return self._stop

    def prime(self) -> None:
        """Take the first poll now (a scheduler round trip on Dask) and start the poller, so
        that the loop's first question reads a flag (`WorkerContext.start` calls it before
        the start barrier)."""
        if self._poller is None and not self._stop:
            self._first_poll()

    def checkpoint_at(self) -> int | None:
        """The step the client asked every worker to checkpoint before: read from the word
        where there is one (one host; the client writes it there too), else polled as stops
        are, once the loop has asked for it the first time."""
        look = self._look
        if look is not None:
            return look[1] or None
        self._wants = True
        if self._poller is None and not self._stop:
            self._first_poll()
        return self._checkpoint

    def pause_at(self) -> dict | None:
        """Where the client asked an elastic run's loops to pause (polled as `checkpoint_at`)."""
        self._wants = True
        if self._poller is None and not self._stop:
            self._first_poll()
        return self._pause

    def _requests(self) -> None:
        """One read of the client's requests (a scheduler round trip on Dask); None: no news."""
        if self._wants and hasattr(self.control, "requests"):
            checkpoint, pause = self.control.requests()
            self._checkpoint = checkpoint or self._checkpoint
            self._pause = pause or self._pause

    def _first_poll(self) -> None:
        now = time.perf_counter()
        if now >= self._next:
            self._next = now + self.interval
            self._stop = self.control.stop_requested()
            self._requests()
            if self.background and not self._stop:
                self._poller = threading.Thread(target=self._poll, name="workbench-stop-poll", daemon=True)
                self._poller.start()

    def _period(self) -> float:
        """Seconds to the next poll: `interval`, or with a stop word and no requests wanted
        at most every WORD_POLL_S."""
        if self.word is None or self._wants:
            return self.interval
        return max(self.interval, WORD_POLL_S)

    def _poll(self) -> None:
        while not self._closed.wait(self._period()):
            try:
                self._requests()
                if self.control.stop_requested():
                    self._stop = True
                    return
            except Exception:  # the client or scheduler is going away: the run ends anyway
                return

    def request_stop(self, reason: str) -> None:
        self._stop = True
        if self.word is not None:   # the other loops on this host see it at their next step
            self.word.set()
        self.control.request_stop(reason)

    def aborted(self) -> bool:
        return self.control.aborted()

    def close(self) -> None:
        """End the background poll and let go of the stop word (the loop is over)."""
        self._closed.set()
        word, self.word, self._look = self.word, None, None
        if word is not None:
            word.close()


CHUNK_ITEMSIZE = 4   # bytes of one parameter (float32) in cgdp's chunks of weights


class Emulated:
    """Network emulator: wraps a Comm or Server proxy, adding latency and a bandwidth cap.

    A message of n bytes costs `latency + 8 n / bandwidth`; an allreduce moves
    2 (P-1)/P of the buffer in and out per worker (a ring), in 2 (P-1) messages.
    The delay is spent sleeping, so it shows up as communication time, as on a real
    slow network. A server call costs its request (the arrays it sends) and then its
    reply (the arrays it returns).

    cgdp's master (a front-end with a `chunked` flag) is charged for what moves. A push is
    one way: its gradient chunk, (hi - lo) float32s, whether it travels as an argument or
    was written into shared memory's `slot` (a view, not a message); the algorithm does not
    wait for a reply. Returning weights chunk by chunk (`chunked` True: `weight_return`
    chunks), the fetch's array is a buffer the chunks were copied into, so that is not what
    is charged: each push's chunk of fresh weights, (hi - lo) float32s, is put on this
    worker's downlink at its push and travels while the worker goes on with its backward
    pass (messages on the downlink leave in order, each when the one before has landed);
    the fetch's reply is the step's outcome alone, queued behind them, and the fetch waits
    until it has landed. The flight starts at this worker's push, the earliest the master
    could have the chunk updated (the fetch also waits for the step, which the inner
    front-end does). `weight_return` whole: the fetch's reply is the whole vector, as any
    reply. `clock` and `sleep` are injectable (a test drives them).
    """

    def __init__(self, inner: Any, latency_ms: float, bandwidth_gbps: float, *,
                 clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep):
        self.inner = inner
        self.latency = latency_ms / 1e3
        self.bytes_per_s = bandwidth_gbps * 1e9 / 8 if bandwidth_gbps > 0 else float("inf")
        self.rank = getattr(inner, "rank", 0)
        self.size = getattr(inner, "size", 1)
        self.clock, self.sleep = clock, sleep
        chunked = getattr(inner, "chunked", None)                 # cgdp's master front-ends say how they return
        self.chunk_master = isinstance(chunked, bool)             # weights: chunk by chunk (True) or whole
        self.chunked = chunked is True
        self.landing = -float("inf")   # (chunked) when the last message on the downlink lands, by `clock`

    def cost(self, nbytes: float, messages: int = 1) -> float:
        """Seconds `messages` messages carrying `nbytes` in all take."""
        return messages * self.latency + nbytes / self.bytes_per_s

    def delay(self, nbytes: int, messages: int = 1) -> None:
        self.sleep(self.cost(nbytes, messages))

    def downlink(self, nbytes: float) -> None:
        """Put one message of `nbytes` on the downlink now (chunked): it lands once the
        messages before it have, plus its own cost."""
        self.landing = max(self.clock(), self.landing) + self.cost(nbytes)

    def buffer(self, m: int) -> Any:
        return self.inner.buffer(m)  # AttributeError if the inner comm has none

    def allreduce(self, buf: Any) -> Any:
        p = self.size
        if p > 1:
            self.delay(int(2 * (p - 1) / p * buf.nbytes), messages=2 * (p - 1))
        return self.inner.allreduce(buf)

    def neighbour_exchange(self, vec: Any, peers: list[int]) -> dict[int, Any]:
        """One message of the vector to each peer, carried by the inner comm."""
        if peers:
            self.delay(len(peers) * vec.nbytes, messages=len(peers))
        return neighbour_exchange(self.inner, vec, peers)

    def compressed_sum(self, buf: Any, payload_bytes: float, gather: bool) -> Any:
        """A ring allgather of the payloads (P - 1 messages) or a ring allreduce of
        `payload_bytes`, carried by the inner comm."""
        p = self.size
        if p > 1 and gather:
            self.delay(int(ring_allgather_bytes(p, payload_bytes)), messages=p - 1)
        elif p > 1:
            self.delay(int(ring_allreduce_bytes(p, payload_bytes)), messages=2 * (p - 1))
        return compressed_sum(self.inner, buf, payload_bytes, gather)

    def allgather(self, payload: Any) -> list[Any]:
        """A ring allgather's delay (P - 1 messages of the payload), carried by the inner
        comm's allgather (`gathered_sum` calls it only where the inner comm has one)."""
        p = self.size
        if p > 1:
            self.delay(int(ring_allgather_bytes(p, payload.nbytes)), messages=p - 1)
        return self.inner.allgather(payload)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name in ("close", "barrier"):
            return attr
        if self.chunk_master and name == "slot":
            return attr              # a view of shared memory to write the gradient into: the push sends it
        if self.chunk_master and name == "push":
            return self._chunk_push(attr)
        if self.chunked and name == "fetch":
            return self._chunk_fetch(attr)

        def call(*args: Any, **kwargs: Any) -> Any:
            nbytes = sum(getattr(a, "nbytes", 0) for a in args)
            self.delay(nbytes)                     # request
            out = attr(*args, **kwargs)
            back = out if isinstance(out, tuple) else (out,)
            self.delay(sum(getattr(a, "nbytes", 0) for a in back))  # reply
            return out
        return call

    def _chunk_push(self, push: Callable) -> Callable:
        def call(step: int, rank: int, lo: int, hi: int, *rest: Any, **kwargs: Any) -> Any:
            self.delay(CHUNK_ITEMSIZE * (hi - lo))   # request: the gradient chunk (an argument, or in the slot)
            out = push(step, rank, lo, hi, *rest, **kwargs)           # one way: no reply to wait for
            if self.chunked:
                self.downlink(CHUNK_ITEMSIZE * (hi - lo))             # its fresh weights, on their way back
            return out
        return call

    def _chunk_fetch(self, fetch: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.delay(0)                                            # request
            out = fetch(*args, **kwargs)
            self.downlink(0)                                         # reply: the outcome, behind the chunks
            self.sleep(max(0.0, self.landing - self.clock()))
            return out
        return call
