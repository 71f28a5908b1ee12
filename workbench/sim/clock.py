"""Virtual time: greenlet workers switched in virtual-time order by one driver.

Each virtual worker runs in its own greenlet (`VProc`) with its own clock `t`. Work it
does is *charged* (`charge(dt)`), not measured; reading its clock (`now()`) adds the
charge and, when another event is due earlier, yields to the driver until every event
before that moment has happened. Operations between workers (`sleep_until`, `block` /
`wake`, `at`) go through the driver's one heap, ordered by (virtual time, sequence
number), so the interleaving, and every result, depends only on virtual times: the
same inputs give the same run, bit for bit.

    sched = Scheduler()
    p = sched.spawn(work, name="0")      # work(proc) runs in a greenlet
    sched.run()                          # until every greenlet has ended

Deadlock (every live worker blocked, nothing scheduled but faults: `kill`s, which wake
nobody) throws `WorkerLost` into the blocked workers (a synchronous peer is gone) at that
moment: a run a fault has ended ends there, and a later fault never fires in it.

A worker may also be a generator (`Task`, `spawn_task`): the simulator's replays run
thousands of virtual workers' timing without a greenlet each. Where a greenlet worker
switches out, a task yields, having first arranged its own wake-up (`sleep`, or `blocked`
with a waker). Code written that way (`SimServerState.serve`) serves both: a greenlet
worker runs it through `VProc.follow`.
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from greenlet import greenlet

from ..comm.base import WorkerLost


class Killed(BaseException):
    """Thrown into a virtual worker to make it vanish (like a killed process): not an
    Exception, so the loop's handlers do not turn it into a record."""


class VProc:
    """One virtual worker: a greenlet and its clock."""

    __slots__ = ("sched", "name", "glet", "t", "pending", "blocked", "done", "wake_value")

    def __init__(self, sched: Scheduler, name: str, fn: Callable[[VProc], Any]):
        self.sched, self.name = sched, name
        self.glet = greenlet(lambda *_: fn(self), parent=sched.driver)
        self.t = 0.0              # virtual seconds
        self.pending = 0.0        # charged, not yet added to t
        self.blocked = False      # waiting for another worker (not in the heap)
        self.done = False
        self.wake_value: Any = None

    def charge(self, dt: float) -> None:
        """Book `dt` virtual seconds of this worker's own work (added at the next `now`)."""
        self.pending += dt

    def now(self) -> float:
        """This worker's virtual time, after every event due before it has happened."""
        if self.pending:
            self.t += self.pending
            self.pending = 0.0
            if self.sched.earlier_than(self.t):
                self.sleep_until(self.t)
        return self.t

    def sleep_until(self, t: float) -> Any:
        """Yield until virtual time `t` (>= now); returns what a `wake` handed in."""
        self.sched.schedule(max(t, self.t), self)
        return self._switch()

    def block(self) -> Any:
        """Yield until another worker (or an event) calls `wake(self, t, value)`."""
        self.blocked = True
        return self._switch()

    def _switch(self) -> Any:
        return self.sched.driver.switch()

    def follow(self, gen: Any) -> Any:
        """Run a generator written for tasks on this greenlet worker: at each yield the
        generator has arranged its wake-up, so the worker switches to the driver; what is
        thrown into the worker meanwhile is thrown into the generator. Returns its value."""
        throw: BaseException | None = None
        while True:
            try:
                if throw is None:
                    next(gen)
                else:
                    gen.throw(throw)
            except StopIteration as stop:
                return stop.value
            try:
                self._switch()
                throw = None
            except BaseException as exc:   # noqa: BLE001 - the generator's own handlers decide
                throw = exc


class Task:
    """One virtual worker written as a generator `fn(task)`: its clock `t`, and whether it
    waits for a waker (`blocked`). It yields where a greenlet worker would switch out,
    after `Scheduler.sleep` or setting `blocked`; the driver resumes it with `next`."""

    __slots__ = ("sched", "name", "gen", "t", "blocked", "done", "wake_value")

    def __init__(self, sched: Scheduler, name: str, fn: Callable[[Task], Any]):
        self.sched, self.name = sched, name
        self.gen = fn(self)
        self.t = 0.0
        self.blocked = False
        self.done = False
        self.wake_value: Any = None

    def now(self) -> float:
        """Its virtual time (a task books no pending charges)."""
        return self.t


class Scheduler:
    """The driver: one heap of (virtual time, sequence, worker or callback)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Any]] = []
        self.seq = itertools.count()
        self.procs: list[VProc | Task] = []
        self.driver: greenlet | None = None
        self.now = 0.0
        self.errors: dict[str, BaseException] = {}
        self.between: Callable[[], None] | None = None    # called between events (stop / abort requests)
        self.kills = 0        # the heap's entries that are `kill`s not yet due: they wake no blocked worker

    def spawn(self, fn: Callable[[VProc], Any], name: str) -> VProc:
        if self.driver is None:
            self.driver = greenlet.getcurrent()
        p = VProc(self, name, fn)
        self.procs.append(p)
        self.schedule(0.0, p)
        return p

    def spawn_task(self, fn: Callable[[Task], Any], name: str) -> Task:
        """A generator worker, started at virtual time 0 (after those spawned before it)."""
        task = Task(self, name, fn)
        self.procs.append(task)
        self.schedule(0.0, task)
        return task

    def sleep(self, proc: VProc | Task, t: float) -> bool:
        """`proc` is to go on at `t` (not before its clock). True: something is due by then,
        so it is scheduled and must yield to the driver; False: nothing is, so the driver
        would resume it next at once, and its clock simply moves to t."""
        if t < proc.t:
            t = proc.t
        heap = self.heap
        if heap and heap[0][0] <= t:
            heapq.heappush(heap, (t, next(self.seq), proc))
            return True
        proc.t = t
        return False

    def schedule(self, t: float, what: VProc | Task | Callable[[], None]) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), what))

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Run `fn` (in the driver) at virtual time `t`: deliveries that need no worker."""
        self.schedule(t, fn)

    def wake(self, proc: VProc, t: float, value: Any = None) -> None:
        """Resume a blocked worker at virtual time `t` with `value` (returned by its `block`)."""
        proc.blocked = False
        proc.wake_value = value
        proc.t = max(proc.t, t)
        self.schedule(proc.t, proc)

    def earlier_than(self, t: float) -> bool:
        return bool(self.heap) and self.heap[0][0] < t

    def run(self) -> None:
        """Switch workers in virtual-time order until every one has ended."""
        self.driver = greenlet.getcurrent()
        for p in self.procs:
            if p.__class__ is VProc:
                p.glet.parent = self.driver
        heap, pop, between, errors = self.heap, heapq.heappop, self.between, self.errors
        while True:
            if between is not None:
                between()
            if len(heap) == self.kills:   # nothing scheduled but faults (`kill`s), which wake nobody
                stuck = [p for p in self.procs if not p.done and p.blocked]
                if stuck:   # nobody will ever wake them: their peers are gone. Now, not at a later fault's
                    for p in stuck:   # time: the run ends here, and a fault after its end never fires in it
                        p.blocked = False
                        self._resume(p, throw=WorkerLost(f"{p.name}: a peer it waits for is gone (virtual "
                                                         f"time {self.now:.4g} s)"))
                    continue
                if not heap or all(p.done for p in self.procs):
                    return    # every worker has ended: a fault due later has nobody left to hit
            t, _, what = pop(heap)
            self.now = t
            kind = what.__class__
            if kind is Task:              # inline: a replay's tasks take tens of thousands of events
                if what.done or what.blocked:
                    continue
                if what.t < t:
                    what.t = t
                try:
                    next(what.gen)
                except StopIteration:
                    what.done = True
                except BaseException as exc:   # noqa: BLE001 - the replay decides what it means
                    errors[what.name] = exc
                    what.done = True
            elif kind is VProc:
                if what.done or what.blocked:
                    continue
                what.t = max(what.t, t)
                value, what.wake_value = what.wake_value, None
                self._resume(what, value=value)
            else:
                what()

    def _resume(self, p: VProc | Task, value: Any = None, throw: BaseException | None = None) -> None:
        if p.__class__ is Task:
            try:
                if throw is not None:
                    p.gen.throw(throw)
                else:
                    next(p.gen)
            except StopIteration:
                p.done = True
            except BaseException as exc:   # noqa: BLE001 - the replay decides what it means
                self.errors[p.name] = exc
                p.done = True
            return
        try:
            if throw is not None:
                p.glet.throw(throw)
            else:
                p.glet.switch(value)
        except BaseException as exc:   # noqa: BLE001 - the transport decides what it means
            self.errors[p.name] = exc
            p.done = True
        if p.glet.dead:
            p.done = True

    def kill(self, proc: VProc, t: float, on_killed: Callable[[VProc], None] | None = None) -> None:
        """Make `proc` vanish at virtual time `t`, whatever it is doing then (computing,
        waiting for a peer); `on_killed(proc)` runs in the driver right after."""
        def now() -> None:
            self.kills -= 1
            if proc.done:
                return
            proc.blocked = False
            self._resume(proc, throw=Killed(f"{proc.name} was killed at {t:g} s (virtual)"))
            if on_killed is not None:
                on_killed(proc)
        self.kills += 1
        self.at(t, now)
