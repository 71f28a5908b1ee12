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

from .base import RoleFrontEnd, check_wait, role_op, serve_now
from .roles import make_core

ABORT_POLL_S = 0.5


class ServerActor:
    """Any server role's core (`roles.make_core`) as a Dask actor, served from the core's
    table of operations (`base.RoleOp`): first come, first served by the event loop; a call
    that waits (a round-robin turn, an LTFB partner) waits on a condition, which a call
    that changes state notifies."""

    def __init__(self, role: str, options: dict, params: np.ndarray, size: int = 1):
        self.core = make_core(role, options, params, size)
        self._turn: asyncio.Condition | None = None

    def _cond(self) -> asyncio.Condition:
        if self._turn is None:  # created on the worker's loop, at first use
            self._turn = asyncio.Condition()
        return self._turn

    async def serve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        core = self.core
        op = role_op(core, name)
        if op.ready is None and not op.changes:
            return serve_now(core, op, args, kwargs)
        cond = self._cond()
        async with cond:
            if op.ready is not None:
                await cond.wait_for(lambda: op.ready(core, *args, **kwargs))
            out = serve_now(core, op, args, kwargs)
            if op.changes:
                cond.notify_all()
            return out


class ActorCall:
    """Blocking calls on an actor from a worker thread, timed out to notice aborts."""

    def __init__(self, actor: Any, control: Any = None):
        self.actor, self.control = actor, control

    def call(self, method: str, *args: Any) -> Any:
        """A call that ends only with its answer or an abort (cgdp's fetch: a sync step)."""
        return self.wait(getattr(self.actor, method)(*args), method, on_stop=False)

    def wait(self, fut: Any, what: str, on_stop: bool) -> Any:
        """The call's result; waits that end on a stop too (turns, partners): `on_stop`."""
        while True:
            try:
                return fut.result(timeout=ABORT_POLL_S)
            except TimeoutError:
                check_wait(self.control, what, on_stop=on_stop)


class ActorServerProxy(RoleFrontEnd, ActorCall):
    """The worker-side server for a `ServerActor`: the role's ops as methods (`ops`: the
    table of the core the actor holds, handed over by the transport)."""

    def __init__(self, actor: Any, control: Any = None, ops: Any = None):
        ActorCall.__init__(self, actor, control)
        self.ops = ops if ops is not None else {}

    def serve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        op = self.ops.get(name)
        return self.wait(self.actor.serve(name, *args, **kwargs), name, on_stop=op is not None and op.waits)


class ChunkMasterProxy(ActorCall):
    """Worker side of cgdp's master, a `ServerActor` holding a `roles.ChunkMaster` (on a CPU
    worker if there is one, so chunk sums and updates run while the devices are still in
    their backward pass). Pushes are fire-and-forget (checked before the fetch). With
    `weight_return` chunks, each push of a chunk also asks for that chunk's fresh weights
    at once (`chunk`, which the actor answers as soon as the chunk is updated), so the
    copies back travel while this worker is still in its backward pass, and the fetch
    only gathers them and the step's outcome; whole: the fetch waits for the step and
    brings the whole vector."""

    def __init__(self, actor: Any, control: Any = None, weight_return: str = "whole"):
        super().__init__(actor, control)
        self.sent: list[Any] = []
        self.chunked = weight_return == "chunks"
        self.coming: list[tuple[int, int, Any]] = []
        self.boxes: list[np.ndarray] = []

    def push(self, step, rank, lo, hi, *rest: Any) -> None:
        self.sent.append(self.actor.serve("push", step, rank, lo, hi, *rest))
        if self.chunked:
            self.coming.append((lo, hi, self.actor.serve("chunk", step, lo, hi)))

    def wait_sent(self) -> None:
        for fut in self.sent:
            fut.result()
        self.sent = []

    def fetch(self, step: int, rank: int | None = None):
        if not self.chunked:
            return self.wait(self.actor.serve("fetch", step), "chunk master fetch", on_stop=False)
        outcome = self.actor.serve("outcome", step)
        coming, self.coming = self.coming, []
        if not self.boxes:                        # two buffers, used in turn (the step's parity)
            n = max(hi for _, hi, _ in coming)
            self.boxes = [np.empty(n, np.float32), np.empty(n, np.float32)]
        box = self.boxes[step % 2]
        for lo, hi, fut in coming:                # already here but for the last ones
            box[lo:hi] = self.wait(fut, "chunk master chunk", on_stop=False)
        loss, stop, chunking, times = self.wait(outcome, "chunk master fetch", on_stop=False)
        return box, loss, stop, chunking, times

    def history(self) -> list[int]:
        return self.call("serve", "history")

    def snapshot(self) -> dict[str, Any]:
        return self.call("serve", "snapshot")

    def restore(self, state: dict[str, Any]) -> None:
        self.call("serve", "restore", state)



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
        self._checkpoint_var().set(0)   # no checkpoint asked for yet (a worker's read answers at once)

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
        for v in (var, self._checkpoint_var()):
            try:
                v.delete()
            except Exception:
                pass

    def forget(self, size: int = 0, topics: tuple[str, ...] = (), variables: bool = False) -> None:
        """Once the run's loops are over, remove from the scheduler what the run made there
        (the client at its end; worker 0 after its client vanished). Best effort: never raises.

        With Dask's own calls: the stop and abort Events and each rank's start Event (`size`
        of them; `barrier.EventStartBarrier`) are cleared, which deletes an Event nobody
        waits on; the lease and checkpoint Variables are deleted with `variables` (the client's
        `end_lease` has deleted its own: a second delete would log again). Dask has no call that
        deletes an event-log topic (the run's records, `topics`, and the ones Dask itself
        logs a Variable's deletion to, `variable-<name>`), so those are dropped from the
        scheduler's broker directly (`_drop_topics`), where it has the layout known here."""
        from distributed import Event, Variable
        names = [f"workbench-{kind}-{self.run_id}" for kind in ("stop", "abort")] + \
            [f"workbench-start-{self.run_id}-{rank}" for rank in range(size)]
        held = [f"workbench-lease-{self.run_id}", f"workbench-checkpoint-{self.run_id}"]
        try:
            for name in names:
                Event(name, client=self.client).clear()
            for name in held if variables else ():
                Variable(name, client=self.client).delete()
            client = self.client
            if client is None:
                from distributed import get_client
                client = get_client()
            client.run_on_scheduler(_drop_topics([*topics, *(f"variable-{v}" for v in held)], held))
        except Exception:   # a scheduler gone or slow, one that refuses pickled calls: left there
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

    def client_vanished(self) -> bool:
        """Loop side, for a loop that ended failing: whether its client is gone. A peer that saw
        the lease lapse first aborts the exchange, and this loop fails on that without reading
        the lease itself, so nobody would clean up after the run. Reads it until it lapses (True)
        or the client renews it (False: about LEASE_REFRESH_S), at most LEASE_TIMEOUT_S and two
        reads more."""
        self._lease_next = 0.0
        if self.client_gone():
            return True
        first = self._lease_value
        deadline = time.monotonic() + LEASE_TIMEOUT_S + 2 * LEASE_CHECK_S
        while time.monotonic() < deadline:
            time.sleep(LEASE_CHECK_S / 2)
            self._lease_next = 0.0
            if self.client_gone():
                return True
            if self._lease_value != first:
                return False
        return self.lease_expired

    def _event(self, kind: str) -> Any:
        if kind not in self._events:
            from distributed import Event
            self._events[kind] = Event(f"workbench-{kind}-{self.run_id}", client=self.client)
        return self._events[kind]

    def stop_requested(self) -> bool:
        return self._event("stop").is_set() or (self.client is None and self.client_gone())

    def _checkpoint_var(self) -> Any:
        from distributed import Variable
        return Variable(f"workbench-checkpoint-{self.run_id}", client=self.client)

    def request_checkpoint(self, step: int) -> None:
        """Client side: every worker saves its state before `step` (a wall-clock checkpoint)."""
        self._checkpoint_var().set(int(step))

    def requests(self) -> tuple[int | None, dict | None]:
        """Loop side (polled by `ThrottledControl`): (the checkpoint step asked for, where to
        pause), in one read; None for either before any ask, or when the scheduler is slow."""
        try:
            got = self._checkpoint_var().get(timeout=LEASE_CHECK_S)
        except Exception:   # not set yet, or the scheduler is slow: no news
            return None, None
        if isinstance(got, dict):
            return int(got.get("checkpoint") or 0) or None, got.get("pause")
        return int(got) or None, None

    def checkpoint_at(self) -> int | None:
        return self.requests()[0]

    def pause_at(self) -> dict | None:
        return self.requests()[1]

    def request_pause(self, at: dict) -> None:
        """Client side: an elastic run's loops pause at their first boundary at or after `at`."""
        self._checkpoint_var().set({"checkpoint": 0, "pause": dict(at)})

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


def _drop_topics(topics: list[str], variables: list[str]) -> Any:
    """A function for `Client.run_on_scheduler`: removes the event-log `topics` from the
    scheduler's broker (`Scheduler._broker._topics`, distributed >= 2024; elsewhere nothing)
    once the `variables` are gone (their deletes travel on the client's batched stream,
    and a deletion logs to `variable-<name>`). Made here, inside a function, so that it is
    pickled by value: the scheduler need not have workbench installed."""
    async def drop(dask_scheduler: Any) -> int:
        import asyncio
        ext = dask_scheduler.extensions.get("variables")
        for _ in range(40):
            if ext is None or not any(v in getattr(ext, "variables", {}) for v in variables):
                break
            await asyncio.sleep(0.05)
        known = getattr(getattr(dask_scheduler, "_broker", None), "_topics", None)
        if not isinstance(known, dict):
            return 0
        return sum(known.pop(t, None) is not None for t in topics)
    return drop
