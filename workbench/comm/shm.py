"""Shared memory between worker processes on one host: allreduce and shared buffers.

Segments are created once per run by one worker (`create_segment`) and attached by name
by the others. The allreduce is a two-phase reduce-scatter/all-gather over a (P, n)
slot array: each worker writes its buffer into its row, then sums its own column block
across rows in rank order (deterministic), then everyone copies the whole sum; a pair of
workers with a small buffer takes a one-meeting path over two alternating slot sets (`ShmComm`).

Synchronisation uses one int64 flag per worker (its phase counter) and spin-then-sleep
waits. The writes a flag publishes are ordered before it on x86-64 (total store order);
on weaker memory models this relies on the interpreter's own barriers between bytecodes.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..util.private import PrivateDirError, forget_segment, open_private, record_segment, sweep_stale
from .base import RoleFrontEnd, WorkerLost, check_wait, role_op, serve_now

SPIN_S = 0.005             # spin (yielding the core) this long before sleeping, where every worker has a core
SPIN_SHARED_S = 0.0005     # ... and this long where workers outnumber the cores (see `spin_budget`)
SLEEP_S = 50e-6            # sleep between polls once spinning did not pay
ABORT_POLL_S = 0.5         # how often a blocked wait checks whether the run was aborted


def spin_budget(workers: int) -> float:
    """Seconds a wait spins before it sleeps, for `workers` processes meeting on this host.

    A partner is usually microseconds away. When it is not, it was descheduled for a
    moment (the client, the scheduler or a worker's event loop took its core). A waiter
    that has gone to sleep by then wakes late, and its core is the one the intruder took
    next, so every such moment grows: with the run's client and Dask beside two teaching-size
    workers on two cores, the time above the median in steps longer than 250 us was 10-11%
    of all of it with 0.5 ms of spinning and 5-8% with 5 ms (docs/benchmarks.md). Spinning
    yields the core but, under the kernel's fair scheduler, still takes a waiter's share of
    it, so where the workers outnumber the cores (Binder: two on one) a wait spins
    SPIN_SHARED_S only."""
    from ..util.machine import usable_cores
    return SPIN_S if workers <= usable_cores() else SPIN_SHARED_S


def wait_until(ready: Callable[[], bool], control: Any, what: str, spin_s: float = SPIN_SHARED_S) -> None:
    """Spin (yielding the core) for `spin_s`, then sleep, until `ready()` (`spin_budget`).
    Every ABORT_POLL_S, once sleeping, an aborted run (`control.aborted()`) ends the wait
    with WorkerLost naming `what`."""
    clock = time.perf_counter
    start = clock()
    spin_end, deadline = start + spin_s, start + ABORT_POLL_S
    while not ready():
        now = clock()
        if now < spin_end:
            os.sched_yield()
        else:
            time.sleep(SLEEP_S)
            if now > deadline:
                deadline = now + ABORT_POLL_S
                if control is not None and control.aborted():
                    raise WorkerLost(f"{what} aborted: a peer is gone")


def with_flock(lockfile: Any, fn: Callable[[], Any]) -> Any:
    """`fn()` while holding an exclusive lock on `lockfile` (one host's processes take turns)."""
    fd = lockfile.fileno()
    _flock(fd, _LOCK_EX)
    try:
        return fn()
    finally:
        _flock(fd, _LOCK_UN)


try:   # POSIX only; the shared-memory paths are offered only where it exists (platforms.shm_supported)
    from fcntl import LOCK_EX as _LOCK_EX
    from fcntl import LOCK_UN as _LOCK_UN
    from fcntl import flock as _flock
except ImportError:  # pragma: no cover - Windows
    _LOCK_EX = _LOCK_UN = 0
    _flock = None

SWEEP_EVERY_S = 10.0       # a process sweeps dead runs' leftovers at most this often
_last_sweep = [-SWEEP_EVERY_S]


def create_segment(name: str, nbytes: int) -> str:
    """Create a zeroed shared-memory segment (kept alive by this process); returns its name.

    Created exclusively, mode 0600 (Python's SharedMemory), and recorded in this user's
    private directory with this process's pid; first, the leftovers of runs whose creator
    is gone are swept (`util.private.sweep_stale`)."""
    if time.monotonic() - _last_sweep[0] > SWEEP_EVERY_S:
        _last_sweep[0] = time.monotonic()
        sweep_stale()
    shm = shared_memory.SharedMemory(name=name, create=True, size=max(nbytes, 8))
    np.frombuffer(shm.buf, dtype=np.uint8)[:] = 0
    _OWNED[name] = shm
    record_segment(shm.name)
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
        forget_segment(name)


def attach(name: str) -> shared_memory.SharedMemory:
    """Attach to an existing segment.

    Python < 3.13 registers attachments with the resource tracker too. Worker processes
    spawned by one nanny share their parent's tracker, whose registry is a set, so the
    creator's `unlink` clears the one entry; unregistering here as well would make the
    tracker complain at unlink. Segments are per run, so a tracker that cleans up at exit
    is harmless."""
    if name in _OWNED:
        return _OWNED[name]
    shm = shared_memory.SharedMemory(name=name)
    owner = os.fstat(shm._fd).st_uid if getattr(shm, "_fd", -1) >= 0 else os.getuid()
    if owner != os.getuid():   # a segment planted under our name by another user: never use it
        shm.close()
        raise PrivateDirError(f"shared-memory segment {name}: one created by uid {os.getuid()}, got uid {owner}")
    return shm


def attach_untracked(name: str) -> shared_memory.SharedMemory:
    """`attach`, leaving this process's resource tracker out of it: for a reader that
    never frees the segment and whose tracker may not be its creator's (the client of a
    cluster started elsewhere reading the workers' rings of step rows). A registered
    attach there was reported at the client's exit as "leaked" segments the workers had
    freed already (6 lines of warnings a run). Python >= 3.13: `track=False`; before, the
    registration is skipped for this one attach."""
    import sys
    if name in _OWNED:   # this process made it (and keeps it): as `attach`
        return _OWNED[name]
    if sys.version_info >= (3, 13):
        shm = shared_memory.SharedMemory(name=name, track=False)
    else:
        from multiprocessing import resource_tracker
        with _UNTRACKED:   # (shared_memory calls resource_tracker.register by attribute)
            register = resource_tracker.register
            resource_tracker.register = _no_register
            try:
                shm = shared_memory.SharedMemory(name=name)
            finally:
                resource_tracker.register = register
    owner = os.fstat(shm._fd).st_uid if getattr(shm, "_fd", -1) >= 0 else os.getuid()
    if owner != os.getuid():   # as `attach`: another user's segment under our name is never used
        shm.close()
        raise PrivateDirError(f"shared-memory segment {name}: one created by uid {os.getuid()}, got uid {owner}")
    return shm


def _no_register(name: str, rtype: str) -> None:
    return None


_UNTRACKED = threading.Lock()
_OWNED: dict[str, shared_memory.SharedMemory] = {}


def detach(shm: shared_memory.SharedMemory) -> None:
    """Drop this process's mapping of a segment, unless this process created it (the
    creator keeps it until `unlink_segment`). Views into it must be gone first."""
    if shm.name not in _OWNED:
        shm.close()


PAIR_MAX = 16384   # elements: the largest capacity for which two workers take the one-meeting path


def pair_path(size: int, n: int) -> bool:
    """Whether an allreduce of capacity n among `size` workers takes the pair path
    (decided from the segment's shape, so every rank decides alike)."""
    return size == 2 and n <= PAIR_MAX


def allreduce_meetings(size: int, n: int) -> int:
    """Barrier meetings (`ShmComm._arrive`: every worker waits for every other) one allreduce
    of capacity n among `size` workers takes: 1 on the pair path, 2 on the general one
    (reduce-scatter, then all-gather), whatever P; 0 alone (nobody to wait for). The cost
    model charges each meeting as one latency (`costmodel.allreduce_terms(..., "shm")`).

    >>> allreduce_meetings(2, 9_616), allreduce_meetings(2, 100_000), allreduce_meetings(4, 100), allreduce_meetings(1, 9)
    (1, 2, 2, 0)
    """
    if size < 2:
        return 0
    return 1 if pair_path(size, n) else 2


def solo_copies(size: int) -> int:
    """Copies of the buffer one allreduce makes in a group of one worker: 1 (the general
    path's sum of its one row is a copy of its slot into the shared total; the engine and
    `ShmComm` skip nothing at size 1; a contribution not written in the slot, `buffer`, as
    sync_sgd's is, is copied in first: one more), and none beyond `allreduce_meetings` and the vector's
    bytes for a larger group. Nobody to meet, so it costs a pass through host memory, not a
    latency: the simulator charges it so (`sim.costs.SimCosts.allreduce_s`), the link's cost
    model leaves it out.

    >>> solo_copies(1), solo_copies(2)
    (1, 0)
    """
    return 1 if size == 1 else 0


def allreduce_nbytes(size: int, n: int, dtype: Any = np.float32) -> int:
    """Bytes of the segment an allreduce of `n` elements among `size` workers needs."""
    itemsize = np.dtype(dtype).itemsize
    arrays = 4 if pair_path(size, n) else size + 1   # a pair: two sets of two slots; else P slots and the total
    return 64 + 8 * size + itemsize * n * arrays


class ShmComm:
    """Allreduce among the processes of one host through one shared segment.

    `n` is the capacity: any buffer of up to n elements can be reduced.

    Two workers with a small capacity (up to PAIR_MAX elements: the teaching models that
    the 2-core laptop, Binder and lab machines run) take a shorter path: two sets of slots
    used in turn, each worker writes its buffer into its slot of this call's set, meets the
    other once, and adds the two slots itself (in rank order: both get bitwise the same sum,
    and the same as the general path's). One meeting per call instead of two, and no shared
    total. In `bench` at the teaching size (9,610 floats) the exchange took 0.008-0.015 ms
    (4 runs) against 0.009-0.024 ms, median 0.020, with two meetings (5 runs). For larger
    buffers each worker reading the whole of the other's slot costs more than it saves
    (536k floats, the update's read included: ~390 against ~270 us in a tight loop), so
    they keep the general path. Reusing a set is safe: a worker writes set s again two
    calls later, which it reaches only after the other has arrived at the call in between,
    i.e. after the other finished reading set s. With more workers, every one summing every
    slot would move (P-1) n elements per worker per call, so they keep the
    reduce-scatter/all-gather too."""

    def __init__(self, name: str, rank: int, size: int, n: int, control: Any = None,
                 dtype: Any = np.float32):
        self.rank, self.size, self.n, self.control = rank, size, n, control
        self.shm = attach(name)
        buf = self.shm.buf
        self.flags = np.ndarray((size,), dtype=np.int64, buffer=buf, offset=64)
        # The same flags as a memoryview of int64: reading them costs ~50 ns a look, where
        # a NumPy reduction costs ~1 us, and every allreduce looks at least once.
        self._flag_view = memoryview(self.flags)    # exported by NumPy, not by the segment
        off = 64 + 8 * size
        itemsize = np.dtype(dtype).itemsize
        self.pair = pair_path(size, n)
        if self.pair:
            self.slots = np.ndarray((2, size, n), dtype=dtype, buffer=buf, offset=off)   # (set, rank, n)
            self.total = None
            self._set = 0        # the slot set of this rank's next call (both ranks alternate alike)
        else:
            self.slots = np.ndarray((size, n), dtype=dtype, buffer=buf, offset=off)        # (P, n)
            self.total = np.ndarray((n,), dtype=dtype, buffer=buf, offset=off + itemsize * n * size)
        self.dtype = np.dtype(dtype)
        self.phase = int(self.flags[rank])
        self.spin_s = spin_budget(size)
        self._views: dict[int, tuple] = {}   # m -> this rank's views for an allreduce of m elements

    def _views_for(self, m: int) -> tuple:
        """The views an allreduce of m elements uses, cut once per buffer length, not every
        call (a step at teaching sizes is ~0.1 ms; each slice costs ~0.2 us).

        General path: (my slot's first m, my column block in every row in rank order, my
        block of the total, the total's first m). Pair: (a private buffer of m for
        `buffer`, per set (my slot, rank 0's, rank 1's) first m, a private array of m for
        the sum)."""
        views = self._views.get(m)
        if views is None:
            if m > self.n:
                raise ValueError(f"buf: at most {self.n} elements for this segment, got {m}")
            if self.pair:
                views = (np.zeros(m, dtype=self.dtype), [(s[self.rank, :m], s[0, :m], s[1, :m]) for s in self.slots],
                         np.empty(m, dtype=self.dtype))
            else:
                lo, hi = self.rank * m // self.size, (self.rank + 1) * m // self.size  # my column block
                views = (self.slots[self.rank, :m], [self.slots[r, lo:hi] for r in range(self.size)],
                         self.total[lo:hi], self.total[:m])
            self._views[m] = views
        return views

    def buffer(self, m: int) -> np.ndarray:
        """An array of m elements to write the contribution into: this rank's slot (the
        general path then skips the copy in), or, for a pair, whose slot alternates, a
        private buffer that `allreduce` copies into this call's slot."""
        return self._views_for(m)[0]

    def allreduce(self, buf: Any) -> np.ndarray:
        """The sum, as an array this rank must not hold past its next call: a view of the
        shared total (no peer can start overwriting it before this rank arrives again),
        or, for a pair, this rank's own sum buffer."""
        m = buf.shape[0]
        if self.pair:
            _, sets, out = self._views_for(m)
            mine, first, second = sets[self._set]
            self._set ^= 1
            np.copyto(mine, buf)
            self._arrive()
            return np.add(first, second, out=out)
        mine, rows, block, total = self._views_for(m)
        if buf is not mine and not (buf.ctypes.data == mine.ctypes.data and buf.strides == mine.strides):
            mine[...] = buf
        self._arrive()
        np.copyto(block, rows[0])
        for row in rows[1:]:  # rank order: the same sum on every run
            np.add(block, row, out=block)
        self._arrive()
        return total

    def neighbour_exchange(self, vec: Any, peers: list[int]) -> dict[int, np.ndarray]:
        """Gossip's peer-to-peer exchange (`base.neighbour_exchange`) through the same slots
        as the allreduce: this rank writes its vector into its own slot, meets the others,
        and copies only its peers' slots (len(peers) n floats read, nothing summed). The
        general path then meets once more, so no slot is rewritten before every peer has
        read it; a pair uses its alternating slot sets (one meeting, as its allreduce)."""
        m = vec.shape[0]
        if m > self.n:
            raise ValueError(f"vec: at most {self.n} elements for this segment, got {m}")
        if self.pair:
            s = self._set
            self._set ^= 1
            np.copyto(self.slots[s, self.rank, :m], vec)
            self._arrive()
            return {j: self.slots[s, j, :m].copy() for j in peers}
        np.copyto(self.slots[self.rank, :m], vec)
        self._arrive()
        got = {j: self.slots[j, :m].copy() for j in peers}
        self._arrive()
        return got

    @property
    def allgather_limit(self) -> int:
        """The most bytes of one payload `allgather` carries: one slot (capacity n elements)."""
        return self.n * self.dtype.itemsize

    def allgather(self, payload: Any) -> list[np.ndarray]:
        """Every worker's byte payload in rank order (`base.gathered_sum`), through the same
        slots as the allreduce seen as bytes: this rank writes its payload into its own
        slot, meets the others, and copies the P - 1 others' (nothing summed). The general
        path meets once more before a slot is reused; a pair alternates its slot sets, as
        its allreduce does (one meeting)."""
        payload = np.ascontiguousarray(payload, dtype=np.uint8)
        m = payload.shape[0]
        if m > self.allgather_limit:
            raise ValueError(f"payload: at most {self.allgather_limit} bytes for this segment, got {m}")
        if self.pair:
            s = self._set
            self._set ^= 1
            slots = self.slots[s]
        else:
            slots = self.slots
        mine = slots[self.rank].view(np.uint8)
        mine[:m] = payload
        self._arrive()
        got = [payload if j == self.rank else slots[j].view(np.uint8)[:m].copy() for j in range(self.size)]
        if not self.pair:
            self._arrive()
        return got

    def barrier(self) -> None:
        self._arrive()

    def _arrive(self) -> None:
        self.phase = phase = self.phase + 1
        flags = self._flag_view
        flags[self.rank] = phase
        if min(flags) < phase:
            wait_until(lambda: min(flags) >= phase, self.control, "allreduce", self.spin_s)

    def close(self) -> None:
        del self._flag_view, self.flags, self.slots, self.total, self._views
        detach(self.shm)


class SharedArray:
    """A float array in a shared segment that every worker on the host reads and writes
    without locks: Hogwild's parameters, or the EASGD centre in hogwild_easgd."""

    def __init__(self, name: str, n: int, dtype: Any = np.float32):
        self.shm = attach(name)
        self.array = np.ndarray((n,), dtype=dtype, buffer=self.shm.buf, offset=0)

    def close(self) -> None:
        del self.array
        detach(self.shm)


# ------------------------------------------------------------------ parameter server
HEADER = 8              # int64 slots before the arrays (roles.ParameterServer uses the first few)
MAX_RANKS = 1024        # int8 "retired" flags, one per rank


def _opt_spec(n: int, momentum: Any) -> list[tuple[str, tuple[int, ...], str]]:
    """The optimiser state arrays of a segment: `momentum` is a bool (a velocity or none,
    plain SGD) or already the role's `roles.role_state_spec`."""
    if isinstance(momentum, (bool, int, float, np.bool_)):
        return [("velocity", (n,), "float")] if momentum else []
    return list(momentum)


def _spec_nbytes(spec: list[tuple[str, tuple[int, ...], str]]) -> int:
    return sum(8 * -(-int(np.prod(shape)) * (4 if kind == "float" else 8) // 8) for _, shape, kind in spec)


def _take_state(buf: Any, off: int, spec: list[tuple[str, tuple[int, ...], str]]) -> dict[str, Any]:
    """Views of the state arrays from byte `off` on, each starting on an 8-byte boundary."""
    out = {}
    for name, shape, kind in spec:
        dtype = np.float32 if kind == "float" else np.int64
        out[name] = np.ndarray(shape, dtype=dtype, buffer=buf, offset=off)
        off += 8 * -(-out[name].nbytes // 8)
    return out


def server_nbytes(n: int, momentum: Any) -> int:
    """Bytes of a shared parameter-server segment for n float32 parameters (`momentum`:
    as `_opt_spec` reads it)."""
    return 8 * HEADER + MAX_RANKS + 8 * -(-4 * n // 8) + _spec_nbytes(_opt_spec(n, momentum))


def _server_views(buf: Any, n: int, size: int, momentum: Any) -> dict[str, Any]:
    from .roles import N_HEADER
    x_at = 8 * HEADER + MAX_RANKS
    return {"header": np.ndarray((N_HEADER,), dtype=np.int64, buffer=buf, offset=0),
            "retired": np.ndarray((size,), dtype=np.int8, buffer=buf, offset=8 * HEADER),
            "x": np.ndarray((n,), dtype=np.float32, buffer=buf, offset=x_at),
            **_take_state(buf, x_at + 8 * -(-4 * n // 8), _opt_spec(n, momentum))}


class ShmServer(RoleFrontEnd):
    """The `parameter_server` / `elastic_centre` role in shared memory, for workers on one host.

    The role's core (`roles.ParameterServer`) runs in every worker on state arrays that
    are views of one segment (parameters, velocity, version, turn, retired flags); a
    kernel file lock (`fcntl.flock`, dropped by the kernel if its holder dies) serialises
    the calls: first come, first served, like the actor, without a round trip through
    another process's event loop. Round-robin EASGD waits for its turn by polling.
    """

    def __init__(self, segment: str, lock_path: str, n: int, size: int, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0, control: Any = None,
                 optimizer: Any = None, layout: Any = None):
        from .roles import ParameterServer, role_state_spec

        if size > MAX_RANKS:
            raise ValueError(f"size: at most {MAX_RANKS} workers share a server segment, got {size}")
        self.shm = attach(segment)
        spec = role_state_spec(n, momentum, nesterov, weight_decay, optimizer, layout)
        self.core = ParameterServer(None, size, momentum, nesterov, weight_decay, optimizer=optimizer, layout=layout,
                                    state=_server_views(self.shm.buf, n, size, spec))
        self.ops = type(self.core).OPS
        self.control = control
        self.lockfile = open_private(lock_path)
        _SERVERS[segment] = self

    def _locked(self, fn: Callable[[], Any]) -> Any:
        return with_flock(self.lockfile, fn)

    def serve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Any op of the core's table (`base.RoleOp`) under the file lock; one that waits
        (a round-robin turn) tries under the lock and sleeps between tries (no condition
        spans processes)."""
        core = self.core
        op = role_op(core, name)
        if name == "push" and core.plain:
            return self._push_plain(*args, **kwargs)
        if op.ready is None:
            return self._locked(lambda: serve_now(core, op, args, kwargs))
        missed = object()

        def attempt() -> Any:
            return serve_now(core, op, args, kwargs) if op.ready(core, *args, **kwargs) else missed
        deadline = time.perf_counter() + ABORT_POLL_S
        while (out := self._locked(attempt)) is missed:
            time.sleep(SLEEP_S)  # not our turn yet (round-robin)
            if time.perf_counter() > deadline:
                deadline = time.perf_counter() + ABORT_POLL_S
                check_wait(self.control, op.what)   # aborted, or a stop asked: never spin for good
        return out

    def _push_plain(self, grad: np.ndarray, lr: float, version: int) -> tuple[int, np.ndarray, int]:
        # Plain SGD: `lr g` is computed before the lock (in this worker's own scratch), so
        # the lock is held only for `x -= lr g` and the copy back. A shorter hold is fewer
        # peers blocked, and fewer holders descheduled mid-update on a busy machine.
        core = self.core
        step = core.scaled(grad, lr)
        fd = self.lockfile.fileno()
        _flock(fd, _LOCK_EX)
        try:
            return core.push_scaled(step, version)
        finally:
            _flock(fd, _LOCK_UN)

    def close(self) -> None:
        if _SERVERS.get(self.shm.name) is self:
            del _SERVERS[self.shm.name]
        self.lockfile.close()
        self.core = None
        detach(self.shm)


_SERVERS: dict[str, ShmServer] = {}   # this process's live servers by segment (a lost peer is retired through one)


def live_server(segment: str) -> ShmServer | None:
    """This process's open ShmServer on `segment`, if any: retiring a lost rank through it
    needs no new attach (the dead creator's segment name may be gone already)."""
    return _SERVERS.get(segment)


def create_server_segment(name: str, params: np.ndarray, momentum: Any) -> str:
    """Create and fill a ShmServer segment (runs on one worker of the host); `momentum`:
    a velocity or not (plain SGD), or the role's `roles.role_state_spec`."""
    seg = create_segment(name, server_nbytes(params.shape[0], momentum))
    _server_views(_OWNED[seg].buf, params.shape[0], 0, momentum)["x"][:] = params
    return seg


# ------------------------------------------------------------------ AD-PSGD's table of models
LOG_CAP = 65536   # averages whose (rank, peer, step) the shared log keeps (the first ones; 1.5 MiB)


def table_nbytes(n: int, size: int) -> int:
    """Bytes of a shared `pairwise` table: a header, P rows of n float32, the log."""
    return 8 * HEADER + 8 * -(-4 * n * size // 8) + 8 * 3 * LOG_CAP


def _table_views(buf: Any, n: int, size: int) -> dict[str, Any]:
    rows_at = 8 * HEADER
    return {"header": np.ndarray((HEADER,), dtype=np.int64, buffer=buf, offset=0),
            "x": np.ndarray((size, n), dtype=np.float32, buffer=buf, offset=rows_at),
            "log": np.ndarray((LOG_CAP, 3), dtype=np.int64, buffer=buf, offset=rows_at + 8 * -(-4 * n * size // 8))}


class SharedLog:
    """The table's log of averages in a segment: `append` under the table's lock; reads
    as the list of (rank, peer, step) it kept (the first LOG_CAP; `count` counts all)."""

    def __init__(self, header: np.ndarray, rows: np.ndarray):
        self.header, self.rows = header, rows

    @property
    def count(self) -> int:
        return int(self.header[0])

    def append(self, entry: tuple[int, int, int]) -> None:
        k = int(self.header[0])
        if k < LOG_CAP:
            self.rows[k] = entry
        self.header[0] = k + 1

    def __len__(self) -> int:
        return min(self.count, LOG_CAP)

    def __iter__(self):
        return iter([tuple(int(v) for v in row) for row in self.rows[:len(self)]])

    def __eq__(self, other: Any) -> bool:
        return list(self) == list(other)


def create_table_segment(name: str, params: np.ndarray, size: int) -> str:
    """Create a shared `pairwise` table with every row at `params` (runs on one worker)."""
    seg = create_segment(name, table_nbytes(params.shape[0], size))
    _table_views(_OWNED[seg].buf, params.shape[0], size)["x"][:] = params
    return seg


class ShmModelTable(RoleFrontEnd):
    """The `pairwise` role (AD-PSGD's `roles.ModelTable`) in shared memory, for workers on
    one host: the P rows and the log live in one segment, every worker holds a core over
    those views, and the host's kernel file lock (as `ShmServer`) makes each call atomic:
    an average reads and writes two rows with no other worker in between. Like the other
    front-ends it serialises all averages (one lock), the stated simplification of
    `algorithms.gossip`."""

    def __init__(self, segment: str, lock_path: str, n: int, size: int, control: Any = None):
        from .roles import ModelTable
        self.shm = attach(segment)
        v = _table_views(self.shm.buf, n, size)
        self.core = ModelTable(None, size, x=v["x"], log=SharedLog(v["header"], v["log"]))
        self.ops = type(self.core).OPS
        self.control = control
        self.lockfile = open_private(lock_path)

    def serve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        op = role_op(self.core, name)
        return with_flock(self.lockfile, lambda: serve_now(self.core, op, args, kwargs))

    def close(self) -> None:
        self.lockfile.close()
        self.core = None
        detach(self.shm)


# ------------------------------------------------------------------ cgdp's master
# Segment layout: int64 header | int64 arrivals per chunk | float64 outcome | float32 arrays
M_COMPLETED, M_STOP, M_FINAL_DONE, M_HEADER = 0, 1, 2, 8          # header slots
F_LAST_DONE, F_STEP_S, F_LOSS, F_STOP, N_FLOATS = 0, 1, 2, 3, 4   # then times[P], loss_w[P], compute_s[P]


def master_nbytes(n: int, size: int, n_layers: int, momentum: Any, chunked: bool = False) -> int:
    """Bytes of a shared-memory chunk master: n parameters, P workers (`momentum`: as
    `_opt_spec` reads it; `chunked`: with two weight buffers per worker, for the per-chunk
    weight return)."""
    return (8 * (M_HEADER + n_layers) + 8 * (N_FLOATS + 3 * size) + 8 * -(-4 * n // 8)
            + _spec_nbytes(_opt_spec(n, momentum)) + 4 * n * size * (3 if chunked else 1))


def create_master_segment(name: str, params: np.ndarray, size: int, n_layers: int, momentum: Any,
                          chunked: bool = False) -> str:
    """Create and fill a ShmChunkMaster segment (runs on one worker of the host)."""
    seg = create_segment(name, master_nbytes(params.shape[0], size, n_layers, momentum, chunked))
    views = _master_views(_OWNED[seg].buf, params.shape[0], size, n_layers, momentum, chunked)
    views["x"][:] = params
    views["header"][[M_COMPLETED, M_STOP]] = -1
    views["floats"][F_LAST_DONE] = time.perf_counter()   # CLOCK_MONOTONIC: one clock for the host
    return seg


def _master_views(buf: Any, n: int, size: int, n_layers: int, momentum: Any, chunked: bool = False) -> dict[str, Any]:
    off = 0

    def take(shape: tuple, dtype: Any) -> np.ndarray:
        nonlocal off
        a = np.ndarray(shape, dtype=dtype, buffer=buf, offset=off)
        off += a.nbytes
        return a
    v = {"header": take((M_HEADER,), np.int64), "arrivals": take((n_layers,), np.int64),
         "floats": take((N_FLOATS + 3 * size,), np.float64), "x": take((n,), np.float32)}
    off = 8 * -(-off // 8)
    v["state"] = _take_state(buf, off, _opt_spec(n, momentum))
    off += _spec_nbytes(_opt_spec(n, momentum))
    v["slots"] = take((size, n), np.float32)                     # (P, n): each worker's weighted chunks
    if chunked:                                                  # (2, P, n): each worker's fresh weights,
        v["boxes"] = take((2, size, n), np.float32)              # two buffers used in turn (step parity)
    return v


class ShmChunkMaster:
    """The `cgdp_master` role in shared memory, for workers on one host: no master process.

    The master weights, the velocity and one slot row per worker live in one segment;
    every worker holds a `roles.ChunkMaster` core over those arrays. A worker writes its
    weighted chunk into its row and counts itself in under a kernel file lock (as
    `ShmServer`). The worker that completes a chunk has the core sum the rows in rank
    order and update that chunk, while the others go on with their backward pass: the
    aggregation still overlaps with the remaining backward work, as in the paper. The
    final chunk (the first layers, every worker's last push) has no backward work left to
    hide behind, so all workers complete it together, each reducing its own column block,
    like the shared-memory allreduce; the last to finish publishes the step's outcome
    (loss summed in rank order, stop flag, compute times, the step's duration by `clock`).
    Every worker's core keeps its own `ChunkTuner`, fed the same durations, so all agree on
    the next step's chunking without a message.

    Why nothing is overwritten too early: a worker pushes its final chunk only after
    completing any chunk it had to, so the step is whole once every block of the final
    chunk is done; and a worker's next pushes follow its fetch, so no chunk of step s+1
    can complete (changing weights or outcome) before every worker has fetched step s.

    `weight_return` chunks: the segment also holds two weight buffers per worker, used in
    turn (the step's parity; a worker still reads this step's weights of a chunk after
    pushing it). The worker that completes a chunk copies its fresh weights into every
    worker's buffer at once, while the others go on with their backward pass; each
    worker copies its own block of the final chunk into every buffer. The fetch then
    hands over this worker's buffer (a view of the segment) without copying; whole:
    the fetch copies the whole vector once the step is complete.
    """

    def __init__(self, segment: str, lock_path: str, rank: int, size: int, groups: list[tuple[int, int]],
                 chunk_layers: int | str, n: int, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, control: Any = None, clock: Callable[[], float] = time.perf_counter,
                 optimizer: Any = None, layout: Any = None, weight_return: str = "whole"):
        from .roles import ChunkMaster, role_state_spec
        self.shm = attach(segment)
        self.rank, self.size, self.control, self.clock = rank, size, control, clock
        spec = role_state_spec(n, momentum, nesterov, weight_decay, optimizer, layout)
        self.chunked = weight_return == "chunks"
        v = _master_views(self.shm.buf, n, size, len(groups), spec, self.chunked)
        self.header, self.arrivals, self.floats, self.slots = v["header"], v["arrivals"], v["floats"], v["slots"]
        self.boxes = v.get("boxes")
        self.times, self.loss_w, self.compute_s = (self.floats[N_FLOATS + k * size:N_FLOATS + (k + 1) * size]
                                                   for k in range(3))
        self.core = ChunkMaster(None, size, groups, chunk_layers, momentum, nesterov, weight_decay, clock=clock,
                                optimizer=optimizer, layout=layout, state={"x": v["x"], **v["state"]})
        self.fetched = np.empty(n, np.float32)  # this worker's copy of the fresh weights
        self._chunking()
        self.lockfile = open_private(lock_path)

    def _chunking(self) -> None:
        from .roles import chunk_bounds
        self.index = {c: i for i, c in enumerate(chunk_bounds(self.core.groups, self.core.tuner.current))}

    def _locked(self, fn: Callable[[], Any]) -> Any:
        return with_flock(self.lockfile, fn)

    def _reduce(self, step: int, lo: int, hi: int, lr: float) -> None:
        """Every worker's rows of [lo, hi), summed in rank order, update the master there;
        with the per-chunk return, the fresh [lo, hi) goes into every worker's buffer."""
        self.core.reduce_chunk([self.slots[r, lo:hi] for r in range(self.size)], lo, hi, lr)
        if self.chunked:
            fresh, boxes = self.core.x[lo:hi], self.boxes[step % 2]
            for r in range(self.size):
                np.copyto(boxes[r, lo:hi], fresh)

    def push(self, step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
        i = self.index[(lo, hi)]
        final = i == len(self.index) - 1
        if grad is not None:                 # None: already written through `slot`
            self.slots[rank, lo:hi] = grad
        if compute_s is not None:            # the worker's last chunk carries its loss and time
            self.loss_w[rank], self.compute_s[rank] = loss_w, compute_s
        if stop:                             # rank 0's first chunk: before any chunk can complete
            self.header[M_STOP] = step

        def arrive() -> bool:
            self.arrivals[i] += 1
            if final or self.arrivals[i] < self.size:
                return False
            self.arrivals[i] = 0             # complete: the next arrival is next step's
            return True
        if self._locked(arrive):
            self._reduce(step, lo, hi, lr)   # this worker completes the chunk
        if not final:
            return
        wait_until(lambda: self.arrivals[i] == self.size, self.control, "cgdp master")
        a, b = self.core.opt.blocks(lo, hi, self.size)[self.rank]   # whole layers for a layer-wise rule
        if b > a:
            self._reduce(step, a, b, lr)                               # my block of the final chunk

        def block_done() -> bool:
            self.header[M_FINAL_DONE] += 1
            if self.header[M_FINAL_DONE] < self.size:
                return False
            self.header[M_FINAL_DONE] = self.arrivals[i] = 0
            return True
        if self._locked(block_done):         # the step is whole: publish it
            loss = 0.0
            for q in range(self.size):       # rank order
                loss += float(self.loss_w[q])
            now = self.clock()
            f = self.floats
            f[F_LOSS], f[F_STOP] = loss, float(self.header[M_STOP] == step)
            f[F_STEP_S], f[F_LAST_DONE] = now - f[F_LAST_DONE], now
            self.times[:] = self.compute_s
            self.header[M_COMPLETED] = step  # written last

    def slot(self, rank: int, lo: int, hi: int) -> np.ndarray:
        """Where `rank`'s weighted gradient of [lo, hi) goes: write it there, push None."""
        return self.slots[rank, lo:hi]

    def wait_sent(self) -> None:
        pass  # pushes are complete when they return

    def fetch(self, step: int, rank: int | None = None):
        """The fresh weights (in a buffer of this worker's, overwritten by the next fetch but one), the
        step's loss and stop flag, the next step's chunking and every worker's compute time."""
        wait_until(lambda: self.header[M_COMPLETED] >= step, self.control, "cgdp master")
        f, core = self.floats, self.core
        if self.chunked:                     # every chunk is in my buffer already
            x = self.boxes[step % 2, self.rank]
        else:
            np.copyto(self.fetched, core.x)
            x = self.fetched
        loss, stop, times = float(f[F_LOSS]), bool(f[F_STOP]), [float(t) for t in self.times]
        used = core.tuner.current
        core.chunk_history.append(used)
        if core.tuner.observe(float(f[F_STEP_S])) != used:
            self._chunking()
        return x, loss, stop, core.tuner.current, times

    def history(self) -> list[int]:
        return list(self.core.chunk_history)

    # checkpoints: the weights and the rule's state are the segment's (rank 0 reads and puts
    # them back, as every server role's); each worker's core keeps its own tuner and history
    def snapshot(self) -> dict[str, np.ndarray]:
        return self.core.snapshot()

    def restore(self, state: dict[str, Any]) -> None:
        self.core.restore(state)
        self._chunking()

    def own_state(self) -> dict[str, np.ndarray]:
        """This worker's part: its core's chunk tuner and the chunk sizes used so far."""
        return {"tuner": self.core.tuner.state(), "history": np.array(self.core.chunk_history, np.int64)}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.core.tuner.load_state(state["tuner"])
        self.core.chunk_history = [int(c) for c in np.asarray(state["history"]).reshape(-1)]
        self._chunking()

    def close(self) -> None:
        self.lockfile.close()
        del self.header, self.arrivals, self.floats, self.slots, self.boxes, self.times, self.loss_w, self.compute_s
        self.core = None
        detach(self.shm)
