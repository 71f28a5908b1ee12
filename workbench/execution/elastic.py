"""Elastic membership: a synchronous run that loses a worker, or finds a new one, goes on.

`elastic: true` (the synchronous family: sync_sgd and its compressed form, local_sgd,
post_local_sgd, diloco; `AlgorithmSpec.elastic`) makes a change of membership a
regroup instead of the end of the run. The run's loops stop at a step every member can go
on from (a boundary: every step for sync_sgd, an average for the local family,
`Algorithm.boundary`), their states are gathered as for a checkpoint, and the engine
starts the loops again on the workers there now, from that step:

* a worker lost: the others' waits on it end (the collective is aborted), and each
  sends the state it kept at its last boundary (`run_loop` keeps one, in memory, for an
  elastic run); a round a worker was lost in runs again, so its rows are dropped;
* a worker joining (a Dask worker new to the cluster; in the simulator `join_worker`):
  the loops are asked to pause at a boundary ahead of every one of them (on a virtual
  clock: the first boundary at or after the joining time), and the newcomer starts from a
  member's state (`Algorithm.joiner_state`: what every worker holds alike; its own
  per-worker parts, such as an error-feedback memory, start empty).

The global batch stays `batch_size` whatever the number of workers: each regroup re-splits
it into the new workers' slices, weighted by size, so a step's gradient is still the
mean over the same B examples and the lr rule (`lr_scaling` of B against `base_batch`)
needs no change: sync_sgd's trajectory is single-process SGD's on batch B through every
change (tests). Every change is an event with its step (`worker_lost`, `worker_joined`,
`regrouped`); the summary lists the membership over the run (`membership`). A run fails
when fewer than `min_workers` (default 1) remain.

A worker's rows keep its identity across regroups: ranks are renumbered 0..P'-1 in each
run of the loops, and the records' `worker` is the worker's id, the rank it first had
(newcomers get the next free ids).
"""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..results.records import event_record
from .transports.base import RunSetup, Transport

JOIN_CHECK_S = 1.0   # how often the client looks for workers new to the cluster (a scheduler round trip)
LEAD_S = 1.0         # a pause is asked this far ahead of the furthest step seen (at its rate)
LEAD_STEPS = 2       # ... and at least this many steps ahead


@dataclass
class Joins:
    """An elastic run's watch for newcomers: on a real cluster, workers new to it (asked
    every JOIN_CHECK_S); in the simulator, the `join_worker` times still to come (the
    loops pause at the first boundary at or after the earliest, on the virtual clock)."""

    transport: Transport
    members: list[dict]                     # the workers of the loops now
    pending: dict[int, float] = field(default_factory=dict)   # simulated: worker id -> joining time
    asked: bool = False
    _next: float = 0.0
    _seen: tuple[float | None, float] = (None, 0.0)

    def start(self) -> None:
        """Before the loops start: a simulated join is asked for now (its time is known)."""
        if self.pending:
            self.transport.request_pause({"time": min(self.pending.values())})
            self.asked = True

    def watch(self, monitor: Any) -> None:
        """From the monitor's loop: once a newcomer is there, ask the loops to pause at a
        boundary ahead of every worker (the furthest step seen, plus LEAD_S of steps)."""
        if self.asked:
            return
        now = time.perf_counter()
        seen = monitor.collector.store.last_step
        top = max(seen.values()) if seen else None
        if top is not None and self._seen[0] is None:
            self._seen = (top, now)
        if now < self._next:
            return
        self._next = now + JOIN_CHECK_S
        if top is None or not self.transport.newcomers(self.members):
            return
        top0, t0 = self._seen
        rate = (top - top0) / (now - t0) if top0 is not None and now > t0 else 0.0
        self.transport.request_pause({"step": int(top) + 1 + max(LEAD_STEPS, math.ceil(rate * LEAD_S))})
        self.asked = True


def slices_text(batch_size: int, size: int) -> str:
    """How a global batch is shared out over `size` workers, in words.

    >>> slices_text(64, 3), slices_text(64, 2)
    ('slices of 21-22', 'slices of 32')
    """
    lo, hi = batch_size // size, -(-batch_size // size)
    return f"slices of {lo}" if lo == hi else f"slices of {lo}-{hi}"


def next_epoch(setup: RunSetup, transport: Transport, monitor: Any, ids: list[int], next_id: int,
               pending: dict[int, float], all_workers: list[dict] | None = None) -> tuple | None:
    """After loops that paused, or lost a worker, in an elastic run: the next run of the
    loops, or None when there is nothing to regroup from.

    Returns (transport, setup, ids, next_id, step, joined ids, regroup time): a fresh
    transport of the same kind on the workers there now (the survivors in their order,
    then the newcomers), its set-up with each rank's state (a survivor's own, a newcomer's
    from rank 0's `joiner_state`), and the step every rank goes on from."""
    states = monitor.regroup
    survivors = [r for r in range(setup.size) if r in states and r not in monitor.lost]
    if not survivors:
        return None
    step = min(int(states[r]["step"]) for r in survivors)
    if any(int(states[r]["step"]) != step for r in survivors):   # never expected: a rank paused late
        return None
    t_regroup = max(float(states[r]["time"]) for r in survivors)
    clock = max(float(states[r]["clock"]) for r in survivors)
    fresh = transport.again()
    kept = [setup.workers[r] for r in survivors]
    if all_workers is not None:   # simulated: the joiners whose time has come
        due = sorted(w for w, t in pending.items() if t <= clock)
        newcomers = [all_workers[w] for w in due]
        joined_ids = due
        for w in due:
            pending.pop(w)
    else:
        newcomers = transport.newcomers(kept)
        joined_ids = list(range(next_id, next_id + len(newcomers)))
        next_id += len(newcomers)
    workers = kept + newcomers
    fresh.use(workers)
    spec, config = setup.spec, setup.config
    size = len(workers)
    new = RunSetup(config=config, spec=spec, run_id=uuid.uuid4().hex[:12], workers=workers,
                   groups=spec.needs.rank_groups(config, size), n_params=setup.n_params, params0=setup.params0,
                   model=setup.model, extra=spec.needs.client_setup(config, size),
                   total_steps=setup.total_steps, schedule_text=setup.schedule_text)
    for key in ("checkpoint", "elastic"):
        if key in setup.extra:
            new.extra[key] = setup.extra[key]
    restored = getattr(fresh, "restores_clock", False)
    base = states[survivors[0]]["state"]

    def part(state: dict) -> dict:
        return {"step": step, "state": {k: v for k, v in state.items() if not k.endswith("t_free")},
                "time": t_regroup, "clock": clock, "t_start": states[survivors[0]].get("t_start"),
                "clock_restored": restored}
    new.resume = {i: part(states[r]["state"]) for i, r in enumerate(survivors)}
    for i in range(len(survivors), size):
        new.resume[i] = part(spec.cls.joiner_state(base))
    new_ids = [ids[r] for r in survivors] + joined_ids
    return fresh, new, new_ids, next_id, step, joined_ids, t_regroup


def regroup_events(collector: Any, t: float, step: int, before: list[int], after: list[int], joined: list[int],
                   workers: list[dict], batch_size: int) -> None:
    """The records of a regroup: each newcomer's `worker_joined`, then `regrouped`."""
    for wid, w in zip(after[len(after) - len(joined):], workers[len(workers) - len(joined):]):
        collector([event_record(t, "worker_joined", wid, f"worker {wid} ({w.get('name')}) joined at step {step}")])
    collector([event_record(t, "regrouped", None, (
        f"step {step}: {len(before)} -> {len(after)} workers (ids {before} -> {after}); the global batch of "
        f"{batch_size} re-split into {slices_text(batch_size, len(after))}; lr unchanged (its rule scales with the "
        "global batch, which is the same)"))])
