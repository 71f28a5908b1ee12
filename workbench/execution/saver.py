"""The client's side of checkpoints: gather every worker's state for a step, then write it.

Workers send their state before a step (`WorkerContext.save_state`, through the same channel
as their step rows, so every row before that step has arrived when the state does); a
transport that keeps a large state where it was made (Dask: it would otherwise pass
through the scheduler's event log) sends a note, and the saver fetches it
(`Transport.fetch_state`). Once every worker still in the run has sent its state for a
step, the step rows before it are synced to steps.csv and the checkpoint is written
(`workbench.checkpoint.write`): the states, the records so far, the run's segments.

Where its loop ended, each worker of a stopped run sends its state once more (tagged
"stopped"; an asynchronous worker that had completed its plan, "ended"): once every worker
still in the run has, and one of them was stopped, the stop's checkpoint is written, each
worker at its own step (an asynchronous run's workers stop at different ones). A synchronous
run's workers all end after the step the stop was decided at, except LTFB's trainers, each
stopped by its own leader: when they ended at different steps no stop checkpoint is written
(the last periodic one stands). Nor is one written where rank 0's `early_stop` ended the
run (its state tagged "early_stopped"): the run completed. Held states are fetched only then: a run that completes
writes none.

A checkpoint that was due (every worker still in the run went past its step) and was not
written is *missed*, with why, on every transport alike (`Saver.missed`, the summary's
`checkpoints.missed` and `missed_why`): a worker that learned of a wall-clock checkpoint
after it had passed its step (`LATE`), a state its Dask worker had replaced by two newer
ones (or lost with it) before the client fetched it (`REPLACED`), a write that failed, and each one due after
checkpoints stopped on a failed write.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from .. import checkpoint as ckpt
from ..results.collect import Collector
from .transports.base import RunSetup, Transport

LEAD_S = 1.0      # a wall-clock checkpoint is asked this far ahead of the furthest step seen (at its rate)
LEAD_STEPS = 2    # ... and at least this many steps ahead

# Why a checkpoint that was due was not written (`Saver.missed`), the summary's words:
LATE = "a worker had passed its step when the request reached it"
REPLACED = ("a worker's state for it had left its worker when the client fetched it (replaced by two newer "
            "ones, or the worker lost)")
NEVER = "a worker's state for it never came"


class Saver:
    """Writes a run's checkpoints as the workers' states come in (on the monitor's thread)."""

    def __init__(self, setup: RunSetup, collector: Collector, directory: str | Path, transport: Transport,
                 t_called: float, prior: ckpt.Checkpoint | None = None):
        self.setup, self.collector, self.directory, self.transport = setup, collector, Path(directory), transport
        self.t_called = t_called
        self.prior = prior
        self.pending: dict[int, dict[int, dict]] = {}    # step -> rank -> its state batch
        self.ended: dict[int, dict] = {}                  # rank -> its batch where its loop ended (tagged)
        self.gone: set[int] = set()                       # lost workers: no state will come from them
        self.written: list[int] = []
        self.write_s = 0.0                                # seconds spent fetching and writing (the client's cost)
        self.failed: str | None = None                    # why checkpoints stopped (a full disk)
        self._asked_at: float | None = None               # wall-clock checkpoints: when the last was asked for
        self._seen: tuple[float | None, float] = (None, 0.0)   # (furthest step seen, when) at that moment
        self._target: int | None = None                   # the step it asked for
        self.missed: dict[int, str] = {}                  # step -> why its checkpoint, due, was not written
        self._why: dict[int, str] = {}                    # step -> what went wrong while gathering it

    def maybe_ask(self) -> None:
        """Wall-clock checkpoints (`checkpoint_every` in seconds): once that long has passed
        since the last, ask every worker for its state before a step they have not reached
        (the furthest step seen, plus LEAD_S of steps at the rate seen); a worker that
        learns of it too late sends none, and that checkpoint is dropped for the next."""
        wall = (self.setup.extra.get("checkpoint") or {}).get("wall")
        if wall is None:
            return
        now = time.perf_counter()
        seen = self.collector.store.last_step
        top = max(seen.values()) if seen else None
        if self._asked_at is None:
            self._asked_at = now
        if top is None:
            return
        top0, t0 = self._seen
        if top0 is None:                       # the first steps seen: the rate is measured from here
            self._seen = (top, now)
            return
        if now - self._asked_at < wall or now - t0 < 0.5 or (self._target is not None and top < self._target):
            return   # (the last one asked for is still ahead of every worker: it will come)
        rate = (top - top0) / (now - t0)
        target = int(top) + 1 + max(LEAD_STEPS, math.ceil(rate * LEAD_S))
        stale = [s for s in self.pending if s <= top]   # missed ones: a worker learned of it too late
        if self._target is not None and self._target not in self.written and self._target not in self.pending:
            stale.append(self._target)                  # (... every worker did: none sent a state for it)
        self._drop(stale, LATE)
        self.transport.request_checkpoint(target)
        self._asked_at, self._seen, self._target = now, (top, now), target

    def add(self, batch: dict) -> None:
        """One worker's state batch (or the note that its state waits on its worker)."""
        if self.failed is not None:
            if batch.get("tag") is None and int(batch["step"]) not in self.written:
                self.missed.setdefault(int(batch["step"]), f"checkpoints stopped: {self.failed}")
            return
        if batch.get("tag") in ("stopped", "ended", "early_stopped"):
            self.ended[int(batch["rank"])] = batch
            self._complete_end()
            return
        if batch.get("held"):
            t0 = time.perf_counter()
            state = self.transport.fetch_state(int(batch["rank"]), int(batch["step"]))
            self.write_s += time.perf_counter() - t0      # fetching it is part of what a checkpoint costs here
            if state is None:   # replaced by newer ones on the worker: a newer checkpoint completes instead
                self._why.setdefault(int(batch["step"]), REPLACED)
                return
            batch = {**batch, "state": state}
        step = int(batch["step"])
        self.pending.setdefault(step, {})[int(batch["rank"])] = batch
        self._complete(step)

    def lose(self, rank: int) -> None:
        """`rank` is gone: a step every other worker has sent is complete without it."""
        self.gone.add(rank)
        for step in sorted(self.pending):
            self._complete(step)
        self._complete_end()

    def _complete_end(self) -> None:
        """The stop's checkpoint, once every worker still in the run has said where it
        ended and one of them was stopped (each worker at its own step)."""
        got = self.ended
        if not got or not set(range(self.setup.size)) - self.gone <= set(got):
            return
        steps = {int(b["step"]) for b in got.values()}
        if not any(b.get("tag") == "stopped" for b in got.values()) or self.setup.spec.sync and len(steps) > 1 \
                or any(b.get("tag") == "early_stopped" for b in got.values()):
            # (rank 0's `early_stop` ended the run: it completed, a user's stop beside it too, and a
            # completed run writes no checkpoint of its end)
            # (a synchronous run whose workers ended at different steps: LTFB's trainers, each
            # stopped by its own leader, would meet at tournaments one of them has already had)
            self.ended = {}
            return
        states = {}
        t0 = time.perf_counter()
        for rank, batch in sorted(got.items()):
            if batch.get("held"):
                state = self.transport.fetch_state(rank, int(batch["step"]))
                if state is None:    # its worker is gone: no checkpoint of the stop (the last one stands)
                    self.ended = {}
                    return
                batch = {**batch, "state": state}
            states[rank] = batch
        self.ended = {}
        at = max(int(b["step"]) for b in states.values())
        self._drop([s for s in self.pending if s < at])
        self.pending.clear()
        try:
            self.write(at, states)
        except OSError as exc:
            self.failed = f"{exc.strerror or exc}"
            self.missed[at] = f"its write failed: {self.failed}"
        self.write_s += time.perf_counter() - t0

    def _complete(self, step: int) -> None:
        got = self.pending.get(step, {})
        if not got or not set(range(self.setup.size)) - self.gone <= set(got):
            return
        self._drop([s for s in self.pending if s < step])   # every worker went past them: due, and missed
        self.pending.pop(step, None)
        t0 = time.perf_counter()
        try:
            self.write(step, got)
        except OSError as exc:   # a full disk: the run goes on; its last checkpoint is the one before
            self.failed = f"{exc.strerror or exc}"
            self.missed[step] = f"its write failed: {self.failed}"
        self.write_s += time.perf_counter() - t0

    def _drop(self, steps: list[int], why: str | None = None) -> None:
        """Give up on the checkpoints of `steps`: each one every worker still in the run went
        past (or that a newer one superseded) is missed, with what went wrong gathering it,
        else `why`, else that a worker's state never came."""
        for s in sorted(set(steps)):
            self.pending.pop(s, None)
            if s in self.written or s in self.missed:
                continue
            self.missed[s] = self._why.pop(s, None) or why or NEVER

    def finish(self) -> None:
        """The run has ended: the checkpoints still gathered that every worker still in the run
        went past (its last step run is at least theirs) and that are not written are missed;
        one asked for beyond where a worker ended was never due."""
        seen = self.collector.store.last_step
        ranks = [r for r in range(self.setup.size) if r not in self.gone]
        reached = min((seen.get(r, -math.inf) for r in ranks), default=-math.inf)
        due = [s for s in {*self.pending, *self._why} if s <= reached]
        if self._target is not None and self._target <= reached and self._target not in self.pending:
            self._drop([self._target], LATE)
        self._drop(due, LATE if (self.setup.extra.get("checkpoint") or {}).get("wall") is not None else None)

    def write(self, step: int, states: dict[int, dict]) -> Path:
        """Sync the step rows before `step`, then write the checkpoint of `step`."""
        store = self.collector.store
        csv_bytes = store.sync_before(step)
        if store.error is not None:
            raise store.error
        config = self.setup.config
        ranks, workers, server = {}, {}, {}
        for rank, batch in sorted(states.items()):
            state = dict(batch["state"])
            for name in [k for k in state if k.startswith("server.")]:
                server[name.removeprefix("server.")] = state.pop(name)
            ranks[rank] = state
            workers[str(rank)] = {"step": int(batch["step"]), "time": float(batch["time"]),
                                  "clock": float(batch["clock"]), "t_start": batch.get("t_start")}
        now = time.time()
        t_zero = self.collector.t_zero()
        virtual = getattr(self.transport, "restores_clock", False)   # the simulator: virtual time, no start-up
        startup = (t_zero - self.t_called) if t_zero is not None and not virtual else 0.0
        trained = max(w["time"] for w in workers.values()) - (self.prior.rank_time(0) if self.prior else 0.0)
        segment = {"from_step": self.first_step, "to_step": step, "called": self.t_called, "startup_s": startup,
                   "wall_time_s": startup + max(trained, 0.0),   # up to its checkpoint: what it ran that counts
                   "run_id": self.setup.run_id}
        meta = {"run_id": self.setup.run_id, "algorithm": config.algorithm, "config": config.to_dict(),
                "size": self.setup.size, "kinds": self.setup.kinds, "workers": workers,
                "written": now, "segments": self.segments_before + [segment], "steps_csv_bytes": csv_bytes,
                "records": self.collector.records_before(step)}
        path = ckpt.write(self.directory, step, meta, ranks, server, keep=config.checkpoint_keep,
                          private=config.out_private)
        self.written.append(step)
        return path

    @property
    def first_step(self) -> int:
        return self.prior.step if self.prior is not None else 0

    @property
    def segments_before(self) -> list[dict]:
        """The segments before a resumed run's (each ended at the checkpoint the next went on
        from), each with how it ended (`engine.segment_history`)."""
        if self.prior is None:
            return []
        history = self.prior.history
        return [dict(seg) for seg in (history if history is not None else self.prior.meta.get("segments", []))]

    def summary(self) -> dict[str, Any]:
        """What the run's summary says of its checkpoints."""
        out: dict[str, Any] = {"every": self.setup.config.checkpoint_every, "written": len(self.written),
                               # (a resumed run that wrote none yet: the one it went on from, still there)
                               "last_step": self.written[-1] if self.written else (
                                   self.prior.step if self.prior is not None else None),
                               "write_s": self.write_s}
        if self.failed:
            out["stopped"] = f"checkpoints stopped: {self.failed}"
        out["missed"] = len(self.missed)   # due (every worker went past its step) and not written
        if self.missed:
            why: dict[str, int] = {}
            for step in sorted(self.missed):
                why[self.missed[step]] = why.get(self.missed[step], 0) + 1
            out["missed_why"] = why
            out["missed_steps"] = sorted(self.missed)[:20]   # (the first 20)
        return out
