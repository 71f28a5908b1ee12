"""The server roles on the virtual clock: a role's core (`comm.roles`) behind its service
queue (`SimServerState`) and the front-end each virtual worker sees (`SimServer`), served
from the role's table of operations like every transport's front-end. The server
lockstep (`sim.server`) replays its workers against the same state and the same `serve`.
cgdp's master, whose transfers go over each worker's own links, has its own (`sim.py`).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..comm.base import RoleFrontEnd, RoleOp, role_op
from .clock import Scheduler, Task, VProc
from .costs import SimCosts


class SimServerState:
    """A server role's core, its service queue and the workers waiting on its state."""

    def __init__(self, core: Any, costs: SimCosts, sched: Scheduler):
        self.core, self.costs, self.sched = core, costs, sched
        self.alpha, self.beta = costs.network.alpha, costs.network.beta   # a message's latency, s per byte
        self.free = 0.0                      # the server is busy until then
        # blocked until the state changes (deposits), with the condition each waits for
        self.waiting: list[tuple[VProc, Callable[[], bool]]] = []
        # blocked for a round-robin turn: rank -> (proc, how many changes had happened then)
        self.turns: dict[int, tuple[VProc, int]] = {}
        self.changes = 0
        self.last_change = 0.0

    def serve(self, proc: VProc | Task, in_bytes: float, out_bytes: float | Callable[[], float], service_s: float,
              op: Callable[[], Any], ready: Callable[[], bool] | None = None, turn: int | None = None) -> Any:
        """A request sent at the worker's now. The server's link and core are one queue,
        first come first served (after `ready()`, e.g. a round-robin turn: `turn` is then
        the rank, and `ready()` is `core.turn == turn`): it takes the request's bytes in,
        applies `op` once they are in, works `service_s`, sends the reply's bytes; the
        reply lands one latency later; returns what `op` returned.

        A generator (the one definition for both kinds of worker): it yields where the
        worker waits, having arranged its wake-up; a greenlet worker runs it through
        `VProc.follow` (`SimServer`), the server lockstep's tasks with `yield from`."""
        sched, beta = self.sched, self.beta
        if sched.sleep(proc, proc.now() + self.alpha):
            yield
        # Round-robin turns and other waits may be waited on together only when no change
        # can make both true: rank 0's wait for the final centre (`final`) holds once every
        # worker has retired, and a worker waiting for its turn has not retired.
        while ready is not None and not ready():
            proc.blocked = True
            if turn is None:
                self.waiting.append((proc, ready))
                yield
                continue
            self.turns[turn] = (proc, self.changes)
            try:
                yield
            except BaseException:          # killed or cancelled while waiting for its turn
                self.turns.pop(turn, None)
                proc.t = max(proc.t, self.last_change)   # every change so far woke it (see changed)
                raise
        start = max(proc.t, self.free)
        applied = start + in_bytes * beta
        n_out = out_bytes() if callable(out_bytes) else out_bytes
        self.free = done = applied + service_s + n_out * beta   # reserved in arrival order: FCFS
        if sched.sleep(proc, applied):
            yield
        result = op()
        self.changed(proc.t)
        if sched.sleep(proc, done + self.alpha):
            yield
        return result

    def charges(self, op: RoleOp, *args: Any, **kwargs: Any) -> tuple[float, Callable[[], float], float]:
        """What a call of `op` with these arguments costs, from the role's table: the bytes
        in, the reply's bytes (a function: the reply as it is when served, a partner's
        deposit say) and the server's work in seconds."""
        core, nbytes = self.core, self.costs.nbytes
        in_bytes = 0
        for m in op.sizes_in(*args, **kwargs):
            in_bytes += nbytes(m)

        def out_bytes() -> float:
            total = 0
            for m in op.sizes_out(core, *args, **kwargs):
                total += nbytes(m)
            return total
        service_s = 0.0
        if op.work is not None:
            passes, floats = op.work(core, *args, **kwargs)
            service_s = self.costs.host_update(floats, passes)
        return in_bytes, out_bytes, service_s

    def changed(self, t: float) -> None:
        """Wake the waiters at `t` to re-check their conditions.

        Performance, with the same run bit for bit: waking every waiter and letting each
        re-check in its own greenlet costs P greenlet switches per change, P^2 per
        round-robin cycle (most waiters find it is still not their turn and block
        again). Instead one driver event at `t` re-checks the waiters in wake order and
        switches only into those whose condition holds; the others are re-queued as
        their own loop would have done. Their wake-ups were consecutive entries of the
        heap at `t`, so nothing else could run between them, and the order of every
        check, resume and re-queue is unchanged.

        Round-robin turns go further (P checks per change, P^2 per cycle, at 1024
        workers a million per cycle): only the waiter whose rank has the turn can find
        its condition true, and the state does not change while the re-checks run (a
        resumed worker yields before its exchange), so one dictionary lookup finds it.
        The others' re-checks changed nothing but their clocks (each change's time, at
        most the current one: changes happen at the current virtual time, in order), which
        is applied when they leave the wait: resumed here, or killed."""
        self.last_change = t
        if self.turns:
            self.sched.schedule(t, partial(self._recheck_turn, t, self.changes))
        self.changes += 1
        waiting, self.waiting = self.waiting, []
        batch = []
        for p, ready in waiting:
            if p.done:
                continue
            p.blocked = False              # what Scheduler.wake does
            p.wake_value = None
            p.t = max(p.t, t)
            if p.t > t:                    # (not expected: waiters block at or before `t`)
                self.sched.schedule(p.t, p)
            else:
                batch.append((p, ready))
        if batch:
            self.sched.schedule(t, lambda: self._recheck(t, batch))

    def _recheck_turn(self, t: float, change: int) -> None:
        entry = self.turns.get(self.core.turn)
        if entry is None or entry[1] > change:    # nobody's turn, or it waits since after that change
            return
        p = entry[0]
        del self.turns[self.core.turn]
        if p.done:
            return
        p.blocked = False
        p.wake_value = None
        p.t = max(p.t, self.last_change)
        self.sched._resume(p)                     # its loop re-checks (true) and is served

    def _recheck(self, t: float, batch: list[tuple[VProc, Callable[[], bool]]]) -> None:
        for p, ready in batch:
            if p.done or p.blocked:        # what Scheduler.run skips
                continue
            p.t = max(p.t, t)
            if ready():
                self.sched._resume(p)      # its loop re-checks (true) and is served
            else:                          # what its loop would do: queue again and block
                p.blocked = True
                self.waiting.append((p, ready))


class SimServer(RoleFrontEnd):
    """The front-end one worker sees (ThreadServer's interface), on virtual time: any
    role's core, served from its table of operations (`comm.base.RoleOp`). A call is a
    request over the network carrying the op's arrays in, served in arrival order once its
    `ready` holds (a turn or a partner), costing the server the op's memory passes, with
    a reply of the op's arrays out; a notice (retire, depart) takes effect at once."""

    def __init__(self, state: SimServerState, proc: VProc):
        self.s, self.proc = state, proc
        self.costs = state.costs
        self.ops = type(state.core).OPS

    def serve(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, name)(*args, **kwargs)

    def bind(self, name: str) -> Any:
        """The op's call, built once from its table entry (`RoleFrontEnd.bind`)."""
        s, core, proc = self.s, self.s.core, self.proc
        op = role_op(core, name)
        method = getattr(core, op.method)
        if op.notice:
            def notice(*args: Any, **kwargs: Any) -> Any:
                out = method(*args, **kwargs)
                s.changed(proc.now())
                return out
            return notice
        ready, turn = op.ready, op.turn

        def call(*args: Any, **kwargs: Any) -> Any:
            in_bytes, out_bytes, service_s = s.charges(op, *args, **kwargs)
            return proc.follow(s.serve(proc, in_bytes, out_bytes, service_s, lambda: method(*args, **kwargs),
                                       ready=(lambda: ready(core, *args, **kwargs)) if ready is not None else None,
                                       turn=turn(*args, **kwargs) if turn is not None else None))
        return call
