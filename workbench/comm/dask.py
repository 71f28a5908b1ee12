"""Dask front-ends: the server roles' cores (`roles`) as actors, and the run control as
Dask Events. (The portable allreduce is a ring over the workers' own connections: `ring`.)

Actor calls go worker-to-worker (under a millisecond here), never through the
scheduler's batched streams (8-25 ms). The actor methods are coroutines: they run on the
hosting worker's event loop, which stays free while that worker's own training loop
occupies its thread, and they can wait for each other (round-robin turns, LTFB
partners) without blocking it.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from .base import check_wait
from .roles import ChunkMaster, make_core

ABORT_POLL_S = 0.5


class ServerActor:
    """A server role's core (`roles.make_core`) as a Dask actor: FCFS by the event loop,
    round-robin turns and LTFB partners by a condition."""

    def __init__(self, role: str, options: dict, params: np.ndarray, size: int = 1):
        self.core = make_core(role, options, params, size)
        self._turn: asyncio.Condition | None = None

    def _cond(self) -> asyncio.Condition:
        if self._turn is None:  # created on the worker's loop, at first use
            self._turn = asyncio.Condition()
        return self._turn

    async def pull(self) -> tuple[int, np.ndarray]:
        return self.core.pull()

    async def push(self, grad: np.ndarray, lr: float, version: int):
        return self.core.push(grad, lr, version)

    async def elastic(self, x: np.ndarray, alpha: float, rank: int | None = None) -> np.ndarray:
        if rank is None:
            return self.core.exchange(x, alpha)
        cond = self._cond()
        async with cond:
            await cond.wait_for(lambda: self.core.my_turn(rank))
            d = self.core.exchange(x, alpha, rank)
            cond.notify_all()
            return d

    async def retire(self, rank: int) -> None:
        cond = self._cond()
        async with cond:
            self.core.advance_turn(retire=rank)
            cond.notify_all()

    async def centre(self) -> np.ndarray:
        return self.core.centre()

    async def deposit(self, rnd: Any, trainer: int, params: np.ndarray, state: np.ndarray | None = None,
                      meta: dict | None = None) -> None:
        cond = self._cond()
        async with cond:
            self.core.deposit(rnd, trainer, params, state, meta)
            cond.notify_all()

    async def collect(self, rnd: Any, trainer: int) -> Any:
        cond = self._cond()
        async with cond:
            await cond.wait_for(lambda: self.core.can_collect(rnd, trainer))
            return self.core.collect(rnd, trainer)

    async def depart(self, trainer: int) -> None:
        cond = self._cond()
        async with cond:
            self.core.depart(trainer)
            cond.notify_all()


class ActorCall:
    """Blocking calls on an actor from a worker thread, timed out to notice aborts."""

    def __init__(self, actor: Any, control: Any = None):
        self.actor, self.control = actor, control

    WAITS = ("elastic", "collect")   # calls that wait for a turn or a partner: they end on a stop too

    def call(self, method: str, *args: Any) -> Any:
        fut = getattr(self.actor, method)(*args)
        while True:
            try:
                return fut.result(timeout=ABORT_POLL_S)
            except TimeoutError:
                check_wait(self.control, method, on_stop=method in self.WAITS)


class ActorServerProxy(ActorCall):
    """The worker-side server for a `ServerActor`."""

    def pull(self):
        return self.call("pull")

    def push(self, grad: np.ndarray, lr: float, version: int):
        return self.call("push", grad, lr, version)

    def elastic(self, x: np.ndarray, alpha: float, rank: int | None = None):
        return self.call("elastic", x, alpha, rank)

    def retire(self, rank: int) -> None:
        return self.call("retire", rank)

    def centre(self) -> np.ndarray:
        return self.call("centre")

    def deposit(self, rnd: Any, trainer: int, params: np.ndarray, state: np.ndarray | None = None,
                meta: dict | None = None) -> None:
        return self.call("deposit", rnd, trainer, params, state, meta)

    def collect(self, rnd: Any, trainer: int) -> Any:
        return self.call("collect", rnd, trainer)

    def depart(self, trainer: int) -> None:
        return self.call("depart", trainer)


class ChunkMasterActor:
    """cgdp's master (`roles.ChunkMaster`) as a Dask actor: coroutines on the hosting
    worker's event loop, so chunk sums and updates run while the devices are still in
    their backward pass."""

    def __init__(self, **kwargs: Any):
        self.core = ChunkMaster(**kwargs)
        self.completed = -1
        self._cond: asyncio.Condition | None = None

    def _c(self) -> asyncio.Condition:
        if self._cond is None:  # made on the worker's loop, at first use
            self._cond = asyncio.Condition()
        return self._cond

    async def push(self, step, rank, lo, hi, grad, lr, loss_w=0.0, stop=False, compute_s=None) -> None:
        if self.core.add(step, rank, lo, hi, grad, lr, loss_w, stop, compute_s):
            cond = self._c()
            async with cond:
                self.completed = step
                cond.notify_all()

    async def fetch(self, step: int):
        cond = self._c()
        async with cond:
            await cond.wait_for(lambda: self.completed >= step)
        return self.core.result()

    async def history(self) -> list[int]:
        return list(self.core.chunk_history)


class ChunkMasterProxy(ActorCall):
    """Worker side of ChunkMasterActor: pushes are fire-and-forget (checked before the
    fetch), fetches block, polling for an aborted run."""

    def __init__(self, actor: Any, control: Any = None):
        super().__init__(actor, control)
        self.sent: list[Any] = []

    def push(self, *args: Any) -> None:
        self.sent.append(self.actor.push(*args))

    def wait_sent(self) -> None:
        for fut in self.sent:
            fut.result()
        self.sent = []

    def fetch(self, step: int):
        return self.call("fetch", step)

    def history(self) -> list[int]:
        return self.call("history")


LEASE_REFRESH_S = 1.0   # the client renews its lease this often (from its own thread)
LEASE_CHECK_S = 1.0     # a loop reads the lease at most this often
LEASE_TIMEOUT_S = 5.0   # a lease not renewed for this long means the client is gone


class EventControl:
    """Stop/abort requests as two Dask Events, shared by the client and every loop, and
    the client's lease: a counter in a Dask Variable that the client renews every
    LEASE_REFRESH_S. A loop whose client stopped renewing (killed, its machine gone)
    for LEASE_TIMEOUT_S, by the loop's own clock, sees a stop and an abort: loops on an
    external cluster end with their client instead of training on for nobody.

    Each check is a scheduler round trip; loops wrap this in `ThrottledControl`.
    """

    def __init__(self, run_id: str, client: Any = None):
        self.run_id, self.client = run_id, client  # client None: the worker's own
        self._events: dict[str, Any] = {}
        self._lease_value: Any = None
        self._lease_seen = time.monotonic()
        self._lease_next = 0.0
        self.lease_expired = False
        self._renewing: Any = None

    def _lease(self) -> Any:
        from distributed import Variable
        return Variable(f"workbench-lease-{self.run_id}", client=self.client)

    def start_lease(self) -> None:
        """Client side: take the lease now, then renew it from a daemon thread until `end_lease`."""
        import threading
        var, stop = self._lease(), threading.Event()
        var.set(0)

        def renew() -> None:
            count = 0
            while not stop.wait(LEASE_REFRESH_S):
                count += 1
                try:
                    var.set(count)
                except Exception:  # scheduler gone: the run's monitor reports that
                    if stop.is_set():
                        return
        thread = threading.Thread(target=renew, name=f"workbench-lease-{self.run_id}", daemon=True)
        thread.start()
        self._renewing = (stop, thread, var)

    def end_lease(self, scheduler_alive: bool = True) -> None:
        """Client side: stop renewing and drop the lease's Variable (not waiting on a
        scheduler that is gone)."""
        if self._renewing is None:
            return
        stop, thread, var = self._renewing
        self._renewing = None
        stop.set()
        if not scheduler_alive:
            return
        thread.join(timeout=LEASE_REFRESH_S + 1)
        try:
            var.delete()
        except Exception:
            pass

    def client_gone(self) -> bool:
        """Loop side: whether the client's lease lapsed (checked at most every LEASE_CHECK_S)."""
        now = time.monotonic()
        if self.lease_expired or now < self._lease_next:
            return self.lease_expired
        self._lease_next = now + LEASE_CHECK_S
        try:
            value = self._lease().get(timeout=LEASE_CHECK_S)
        except Exception:  # not set yet, or the scheduler is slow: no news
            value = self._lease_value
        if value != self._lease_value:
            self._lease_value, self._lease_seen = value, now
        elif now - self._lease_seen > LEASE_TIMEOUT_S:
            self.lease_expired = True
        return self.lease_expired

    def _event(self, kind: str) -> Any:
        if kind not in self._events:
            from distributed import Event
            self._events[kind] = Event(f"workbench-{kind}-{self.run_id}", client=self.client)
        return self._events[kind]

    def stop_requested(self) -> bool:
        return self._event("stop").is_set() or (self.client is None and self.client_gone())

    def request_stop(self, reason: str = "") -> None:
        self._event("stop").set()

    def abort(self, reason: str = "") -> None:
        self._event("abort").set()
        self._event("stop").set()

    def aborted(self) -> bool:
        now = time.perf_counter()
        # aborted() is asked from inside waits; cache briefly to spare the scheduler.
        if now - getattr(self, "_abort_checked", 0.0) < ABORT_POLL_S / 2:
            return getattr(self, "_abort_value", False)
        self._abort_checked = now
        self._abort_value = self._event("abort").is_set() or (self.client is None and self.client_gone())
        return self._abort_value
