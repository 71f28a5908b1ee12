"""Dask implementations: the parameter server as an actor, and the run control as Dask
Events. (The portable allreduce is a ring over the workers' own connections: `ring`.)

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

from .base import ServerCore, WorkerLost

ABORT_POLL_S = 0.5


class ServerActor:
    """A `ServerCore` as a Dask actor: FCFS by the event loop, round-robin by a condition."""

    def __init__(self, params: np.ndarray, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, size: int = 1):
        self.core = ServerCore(params, momentum, nesterov, weight_decay, size)
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
            return self.core.elastic(x, alpha)
        cond = self._cond()
        async with cond:
            await cond.wait_for(lambda: self.core.turn == rank)
            d = self.core.elastic(x, alpha)
            self.core.advance_turn()
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


class _ActorCall:
    """Blocking calls on an actor from a worker thread, timed out to notice aborts."""

    def __init__(self, actor: Any, control: Any = None):
        self.actor, self.control = actor, control

    def call(self, method: str, *args: Any) -> Any:
        fut = getattr(self.actor, method)(*args)
        while True:
            try:
                return fut.result(timeout=ABORT_POLL_S)
            except TimeoutError:
                if self.control is not None and self.control.aborted():
                    raise WorkerLost(f"{method} aborted: a peer is gone") from None


class ActorServerProxy(_ActorCall):
    """The worker-side `Server` for a `ServerActor`."""

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


class EventControl:
    """Stop/abort requests as two Dask Events, shared by the client and every loop.

    Each check is a scheduler round trip; loops wrap this in `ThrottledControl`.
    """

    def __init__(self, run_id: str, client: Any = None):
        self.run_id, self.client = run_id, client  # client None: the worker's own
        self._events: dict[str, Any] = {}

    def _event(self, kind: str) -> Any:
        if kind not in self._events:
            from distributed import Event
            self._events[kind] = Event(f"workbench-{kind}-{self.run_id}", client=self.client)
        return self._events[kind]

    def stop_requested(self) -> bool:
        return self._event("stop").is_set()

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
        self._abort_value = self._event("abort").is_set()
        return self._abort_value
