"""Run results: the record format, `RunResult`, and the run directory.

A run produces flat records with fixed keys (dask-ml style history entries); the client
gathers them into a `RunResult`. Step records are the bulk (one per worker per step,
thousands a second at teaching sizes): a worker keeps them in NumPy columns and hands
them over whole when its loop ends, and streams only a compact, binned summary while it
runs (in blocks of steps fixed by the plan, `LIVE_ROWS` of them over a run; sums of samples and seconds are kept, so live
totals and rates are exact). The client expands those batches into the same record
dicts for `on_record`. A run directory is the unit everyone shares:

    summary.json   status, config, workers, totals, final metrics, time breakdown, events
    steps.csv      one row per worker step        (STEP_COLUMNS)
    evals.csv      one row per evaluation          (EVAL_COLUMNS)
    tournaments.csv  LTFB only: one row per trainer per round (TOURNAMENT_COLUMNS)
    config.yaml    the RunConfig, loadable with RunConfig.from_yaml
    report.html    static figures (written by workbench.ui.report when plotly is present)

Files are written atomically (temp file + rename) and hold no pickles.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import platform
import re
import shutil
import struct
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import learning, measure
from ..util.fileio import RunDirError, atomic_write, exchange_dirs, private_opener  # noqa: F401  (RunDirError: re-exported)

STEP_COLUMNS = ("kind", "worker", "step", "epoch", "time", "loss", "lr", "samples",
                "compute_s", "comm_s", "wait_s", "staleness", "bytes_sent")
EVAL_COLUMNS = ("kind", "worker", "step", "epoch", "time", "train_loss", "test_loss", "test_accuracy")
EVENT_COLUMNS = ("kind", "time", "event", "worker", "message")
TOURNAMENT_COLUMNS = ("kind", "round", "step", "time", "trainer", "partner", "own_score",
                      "partner_score", "adopted", "lr", "lineage")
RUN_FILES = ("summary.json", "steps.csv", "evals.csv", "tournaments.csv", "config.yaml", "report.html")
STATUSES = ("running", "completed", "stopped", "diverged", "failed")

# A record is a flat dict whose "kind" says which table it belongs to.
Record = dict[str, Any]
OnRecord = Callable[[Any], None]   # called with a RecordBatch (iterating it gives record dicts)

# The per-step fields a worker logs (STEP_COLUMNS less kind and worker; epoch follows from step).
LOG_FIELDS = ("step", "time", "loss", "lr", "samples", "compute_s", "comm_s", "wait_s", "staleness", "bytes_sent")
# bytes_sent: bytes this worker put on the wire in the step's exchanges, counted as the algorithm's
#   exchange sends them (a ring allreduce or allgather, a message to a server; `comm.base`), not as
#   this machine's transport happens to move them; NaN where an algorithm does not count them.
LIVE_ROWS = 200     # step rows per live batch at most: enough for a plot, cheap to send and draw
_pack_row = struct.Struct(f"@{len(LOG_FIELDS)}d").pack_into   # one StepLog row, native float64s
_ROW_BYTES = 8 * len(LOG_FIELDS)


def step_record(worker: int, step: int, epoch: float, t: float, loss: float, lr: float,
                samples: int, compute_s: float, comm_s: float = 0.0, wait_s: float = 0.0,
                staleness: float = 0.0, bytes_sent: float = 0.0) -> Record:
    """One worker step (all keys of STEP_COLUMNS)."""
    return {"kind": "step", "worker": worker, "step": step, "epoch": epoch, "time": t,
            "loss": loss, "lr": lr, "samples": samples, "compute_s": compute_s,
            "comm_s": comm_s, "wait_s": wait_s, "staleness": staleness, "bytes_sent": bytes_sent}


def eval_record(worker: int | str, step: int, epoch: float, t: float, train_loss: float,
                test_loss: float, test_accuracy: float) -> Record:
    """One evaluation of a parameter vector (worker is a rank, "centre" or "server")."""
    return {"kind": "eval", "worker": str(worker), "step": step, "epoch": epoch, "time": t,
            "train_loss": train_loss, "test_loss": test_loss, "test_accuracy": test_accuracy}


def event_record(t: float, event: str, worker: Any = None, message: str = "") -> Record:
    """Something that happened once: worker lost, diverged, stopped, rebalanced, ..."""
    return {"kind": "event", "time": t, "event": event, "worker": None if worker is None else str(worker),
            "message": message}


def live_width(total_steps: int) -> int:
    """Steps per live bin for a run of `total_steps`: at most `LIVE_ROWS` bins over the
    whole run, so a live trace's points are never more than 1% of the run apart (or one
    step, for runs of up to 200 steps), however its batches are cut.

    >>> live_width(150), live_width(540), live_width(100_000)
    (1, 3, 500)
    """
    return max(1, math.ceil(int(total_steps) / LIVE_ROWS))


def bin_steps(columns: dict[str, np.ndarray], max_rows: int = LIVE_ROWS,
              width: int | None = None) -> dict[str, np.ndarray]:
    """At most about `max_rows` rows summarising consecutive step rows of one worker.

    Each bin keeps the sums of `samples`, `compute_s`, `comm_s`, `wait_s` and `bytes_sent` (so totals
    and rates over time stay exact), the means of `loss` and `staleness`, and the last
    row's `step`, `epoch`, `time` and `lr`.

    Without `width`, the rows are cut into `max_rows` bins of about equal count (up to
    `max_rows` rows come back unchanged). With `width`, bins are fixed blocks of steps
    (`step // width`), the same whichever rows a batch happens to hold: a live batch cut
    anywhere only splits one block in two, so the points a run streams do not depend on
    when its batches leave the worker (`live_width` picks the width from the plan). A batch
    spanning more than `max_rows + 1` blocks (a run longer than its plan) doubles the width
    until it fits.

    >>> cols = {"step": np.arange(4.0), "time": np.arange(1.0, 5.0), "loss": np.array([4.0, 2.0, 3.0, 1.0]),
    ...         "samples": np.full(4, 8.0)}
    >>> {k: v.tolist() for k, v in bin_steps(cols, 2).items()}
    {'step': [1.0, 3.0], 'time': [2.0, 4.0], 'loss': [3.0, 2.0], 'samples': [16.0, 16.0]}
    >>> tail = {k: v[1:] for k, v in cols.items()}          # steps 1..3 in blocks of 2: {1}, {2, 3}
    >>> bin_steps(tail, width=2)["step"].tolist(), bin_steps(tail, width=2)["loss"].tolist()
    ([1.0, 3.0], [2.0, 2.0])
    """
    n = len(columns["step"])
    if width is None:
        if n <= max_rows:
            return dict(columns)
        starts = (np.arange(max_rows) * n) // max_rows                # (bins,) first row of each bin
    else:
        step = np.asarray(columns["step"], dtype=np.int64)
        while True:
            block = step // width
            starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])   # (bins,) first row of each block
            if len(starts) <= max_rows + 1:
                break
            width *= 2
        if len(starts) == n:
            return dict(columns)
    last = np.append(starts[1:], n) - 1
    counts = np.diff(np.append(starts, n))
    out = {}
    for name, col in columns.items():
        if name in ("samples", "compute_s", "comm_s", "wait_s", "bytes_sent"):
            out[name] = np.add.reduceat(col, starts)
        elif name in ("loss", "staleness"):
            out[name] = np.add.reduceat(col, starts) / counts
        else:
            out[name] = col[last]
    return out


class StepLog:
    """One worker's step records as rows of a preallocated float64 buffer.

    `add` writes one row (LOG_FIELDS) in under a microsecond; the buffer doubles when
    full. `take` hands over the rows added since the last take (every row, as columns, for
    the client to stream to the run directory) and drops them, so a worker holds only the
    rows of its current live batch however long it runs; `columns` shows the rows not yet
    taken (what a loop's result still carries).

    >>> log = StepLog(capacity=2)
    >>> for k in range(3):
    ...     log.add(k, 0.1 * k, 1.0, 0.1, 32, 0.001, 0.0, 0.0, 0.0, 0.0)
    >>> log.n, log.columns(lambda s: s / 10)["epoch"].tolist()
    (3, [0.1, 0.2, 0.3])
    >>> log.take(lambda s: s / 10)["step"].tolist(), log.n, log.taken, log.take(lambda s: s)
    ([0.0, 1.0, 2.0], 0, 3, None)
    """

    def __init__(self, capacity: int = 4096):
        self._set_data(np.empty((max(2, capacity), len(LOG_FIELDS)), dtype=np.float64))   # (rows, fields)
        self.n = 0            # rows held (written since the last take)
        self.taken = 0        # rows handed over by `take`
        self.compute_total = 0.0   # compute_s of the rows taken (a loop's booked compute, for its usage)

    def _set_data(self, data: np.ndarray) -> None:
        self.data = data
        self._bytes = memoryview(data).cast("B")   # `add` packs a row straight into these bytes

    def add(self, step: int, t: float, loss: float, lr: float, samples: int, compute_s: float,
            comm_s: float, wait_s: float, staleness: float, bytes_sent: float = 0.0) -> None:
        n = self.n
        if n == self.data.shape[0]:
            grown = np.empty((2 * n, self.data.shape[1]), dtype=np.float64)
            grown[:n] = self.data
            self._set_data(grown)
        # One C call writes the row: ~0.2 us, where assigning a tuple to data[n] costs ~0.7.
        _pack_row(self._bytes, n * _ROW_BYTES, step, t, loss, lr, samples, compute_s, comm_s, wait_s, staleness,
                  bytes_sent)
        self.n = n + 1

    def __getstate__(self) -> dict:
        return {"data": self.data, "n": self.n, "taken": self.taken, "compute_total": self.compute_total}

    def __setstate__(self, state: dict) -> None:
        self._set_data(state["data"])
        self.n, self.taken, self.compute_total = state["n"], state["taken"], state["compute_total"]

    def columns(self, epoch_of: Callable[[Any], Any]) -> dict[str, np.ndarray]:
        """The rows not yet taken, one array per field (LOG_FIELDS and "epoch")."""
        cols = {name: self.data[:self.n, j].copy() for j, name in enumerate(LOG_FIELDS)}
        cols["epoch"] = np.asarray(epoch_of(cols["step"] + 1), dtype=np.float64)
        return cols

    def take(self, epoch_of: Callable[[Any], Any]) -> dict[str, np.ndarray] | None:
        """Every row since the last take, as `columns`, and forget them; None if there are none."""
        if self.n == 0:
            return None
        cols = self.columns(epoch_of)
        self.taken += self.n
        self.compute_total += float(cols["compute_s"].sum())
        self.n = 0
        return cols


# Step rows travel from a worker to the client as one bytes block: (rows, ROW_FIELDS) float64, row-major.
ROW_FIELDS = LOG_FIELDS + ("epoch",)


def pack_rows(columns: dict[str, np.ndarray] | None) -> dict[str, Any] | None:
    """A worker's step columns as {"n", "data"} (raw float64 bytes: exact, and cheap for
    msgpack, which carries Dask's live events).

    >>> cols = {f: np.arange(2.0) for f in ROW_FIELDS}
    >>> unpack_rows(pack_rows(cols))["epoch"].tolist()
    [0.0, 1.0]
    """
    if columns is None:
        return None
    block = np.empty((len(columns["step"]), len(ROW_FIELDS)), dtype=np.float64)
    for j, name in enumerate(ROW_FIELDS):
        block[:, j] = columns[name]
    return {"n": int(block.shape[0]), "data": block.tobytes()}


def unpack_rows(packed: dict[str, Any]) -> dict[str, np.ndarray]:
    """The columns `pack_rows` packed."""
    block = np.frombuffer(packed["data"], dtype=np.float64).reshape(int(packed["n"]), len(ROW_FIELDS))
    return {name: block[:, j] for j, name in enumerate(ROW_FIELDS)}


def step_records(worker: int, columns: dict[str, Any]) -> list[Record]:
    """Step record dicts (the keys of STEP_COLUMNS) from one worker's columns.

    >>> step_records(1, {"step": [0.0], "epoch": [0.5], "time": [0.1], "loss": [2.0], "lr": [0.1],
    ...                  "samples": [32.0], "compute_s": [0.01], "comm_s": [0.0], "wait_s": [0.0],
    ...                  "staleness": [0.0], "bytes_sent": [0.0]})[0]["samples"]
    32
    """
    names = [c for c in STEP_COLUMNS[2:] if c in columns]   # every one, from a worker's columns
    lists = [np.asarray(columns[c]).tolist() for c in names]
    ints = [c for c in ("step", "samples") if c in names]
    out = []
    for values in zip(*lists):
        rec = {"kind": "step", "worker": worker, **dict(zip(names, values))}
        for c in ints:
            rec[c] = int(rec[c])
        out.append(rec)
    return out


def live_columns(worker: int, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One worker's (binned) step columns as a `RecordBatch`'s steps: STEP_COLUMNS less
    kind, worker, step and samples as whole numbers."""
    n = len(columns["step"])
    out: dict[str, np.ndarray] = {"worker": np.full(n, int(worker), dtype=np.int64)}
    for name in STEP_COLUMNS[2:]:
        col = np.asarray(columns[name])
        out[name] = col.astype(np.int64) if name in ("step", "samples") else col
    return out


class RecordBatch:
    """One `on_record` batch, columnar: the step rows as columns (`steps`: STEP_COLUMNS less
    kind, each an array; the live rows binned by the collector) and the rare other records
    (`others`: eval, event and tournament dicts). `records()` is the same batch as record
    dicts, and iterating a batch yields them, for callers that want dicts.

    >>> b = RecordBatch({"worker": np.array([0, 1]), "step": np.array([3, 3]), "loss": np.array([0.5, 0.25])},
    ...                 [{"kind": "event", "event": "stopped"}])
    >>> len(b), b.n_steps, [r["kind"] for r in b], b.records()[1]["loss"]
    (3, 2, ['step', 'step', 'event'], 0.25)
    >>> b.columns("step", ("kind", "worker", "loss"))["loss"].tolist(), b.columns("eval", ("kind", "step"))["step"].tolist()
    ([0.5, 0.25], [])
    """

    __slots__ = ("steps", "others")

    def __init__(self, steps: dict[str, np.ndarray] | None = None, others: Iterable[Record] = ()):
        self.steps = steps if steps is not None and len(steps.get("step", ())) else {}
        self.others = list(others)

    @classmethod
    def join(cls, batches: Iterable[Any]) -> RecordBatch:
        """One batch of several (RecordBatches or lists of record dicts), in order."""
        steps: list[dict[str, np.ndarray]] = []
        others: list[Record] = []
        for b in batches:
            if not isinstance(b, RecordBatch):
                b = cls.of(b)
            if b.steps:
                steps.append(b.steps)
            others.extend(b.others)
        if not steps:
            return cls(None, others)
        names = [k for k in steps[0] if all(k in s for s in steps)]
        return cls({k: np.concatenate([np.asarray(s[k]) for s in steps]) for k in names}, others)

    @classmethod
    def of(cls, records: Iterable[Record]) -> RecordBatch:
        """A batch from record dicts (a RecordBatch comes back as it is)."""
        if isinstance(records, RecordBatch):
            return records
        records = list(records)
        steps = [r for r in records if r.get("kind") == "step"]
        cols = None
        if steps:
            names = [c for c in STEP_COLUMNS[1:] if c in steps[0]]
            cols = {c: np.asarray([r.get(c) for r in steps]) for c in names}
        return cls(cols, [r for r in records if r.get("kind") != "step"])

    @property
    def n_steps(self) -> int:
        return len(self.steps["step"]) if self.steps else 0

    def __len__(self) -> int:
        return self.n_steps + len(self.others)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self):
        return iter(self.records())

    def records(self) -> list[Record]:
        """The batch as record dicts: its steps (the keys of STEP_COLUMNS), then the others."""
        out: list[Record] = []
        if self.steps:
            worker = np.asarray(self.steps["worker"])
            for w in dict.fromkeys(worker.tolist()):
                mine = worker == w
                out.extend(step_records(int(w), {k: np.asarray(v)[mine] for k, v in self.steps.items() if k != "worker"}))
        return out + self.others

    def columns(self, kind: str, columns: Iterable[str]) -> dict[str, np.ndarray]:
        """The records of one kind as column arrays (`columns` less kind; a column the batch
        lacks is left out)."""
        names = [c for c in columns if c != "kind"]
        if kind == "step":
            if not self.steps:
                return {c: np.asarray([]) for c in names}
            return {c: np.asarray(self.steps[c]) for c in names if c in self.steps}
        rows = [r for r in self.others if r.get("kind") == kind]
        return {c: np.asarray([r.get(c) for r in rows]) for c in names}


def batch_columns(batch: Iterable[Record], kind: str, columns: Iterable[str]) -> dict[str, np.ndarray]:
    """`RecordBatch.columns` for a batch of either form (a RecordBatch, or record dicts).

    >>> batch_columns([{"kind": "step", "worker": 0, "loss": 1.5}, {"kind": "eval"}], "step", ("kind", "loss"))
    {'loss': array([1.5])}
    """
    if isinstance(batch, RecordBatch):
        return batch.columns(kind, columns)
    rows = [r for r in batch if r.get("kind") == kind]
    return {c: np.asarray([r.get(c) for r in rows]) for c in columns if c != "kind"}


class RunTally:
    """What a run's record stream has shown so far: the one accumulator behind every
    progress display (the progress bar, the dashboard's status line, the live figures'
    `LiveState`). Feed it each `on_record` batch (`add`).

    `steps_seen` is the highest step + 1, `epoch` the furthest epoch, `samples` the samples
    of the step records, `first_start` the record clock of the first step's start (the
    earliest start, by `measure.step_starts`, of the first batch's steps; the live
    figures' t = 0), `last_time`
    the newest step's end; `rates()` gives steps/s and samples/s over the last `window_s`
    of the records' own clock.

    >>> t = RunTally(window_s=10.0)
    >>> t.add([{"kind": "step", "worker": 0, "step": k, "epoch": (k + 1) / 4, "time": 0.5 + k, "samples": 8,
    ...         "compute_s": 0.5, "comm_s": 0.0, "wait_s": 0.0} for k in range(4)])
    >>> t.steps_seen, t.epoch, t.samples, t.first_start, t.last_time
    (4, 1.0, 32, 0.0, 3.5)
    >>> t.add([{"kind": "step", "worker": 0, "step": 4, "epoch": 1.25, "time": 4.5, "samples": 8}])
    >>> t.rates()
    (1.0, 8.0)
    """

    def __init__(self, window_s: float = 10.0):
        self.window_s = window_s
        self.steps_seen = 0
        self.epoch = 0.0
        self.samples = 0
        self.first_start: float | None = None
        self.last_time = 0.0
        self.loss: float | None = None          # the newest step's loss
        self.test_accuracy: float | None = None  # the newest evaluation's
        self._clock: list[tuple[float, int, int]] = []   # (record time, steps seen, samples) per batch

    def add(self, records: Iterable[Record]) -> None:
        if isinstance(records, RecordBatch):
            self._add_batch(records)
            return
        newest = None
        first: list[Record] = []     # the steps of the first batch with steps: first_start
        for r in records:
            kind = r.get("kind")
            if kind == "eval" and r.get("test_accuracy") is not None:
                self.test_accuracy = float(r["test_accuracy"])
                continue
            if kind != "step":
                continue
            self.samples += int(r.get("samples") or 0)
            step, t = int(r.get("step", 0)), float(r.get("time", 0.0))
            self.steps_seen = max(self.steps_seen, step + 1)
            self.epoch = max(self.epoch, float(r.get("epoch") or 0.0))
            if r.get("loss") is not None:
                self.loss = float(r["loss"])
            if self.first_start is None:
                first.append(r)
            if t >= self.last_time:
                self.last_time, newest = t, t
        if first:
            self.first_start = float(np.min(measure.step_starts({c: np.asarray([float(r.get(c) or 0.0) for r in first])
                                                                 for c in ("time", *measure.COMPONENTS)})))
        if newest is not None:
            self._clock.append((newest, self.steps_seen, self.samples))
            while len(self._clock) > 2 and newest - self._clock[1][0] >= self.window_s:
                self._clock.pop(0)

    def _add_batch(self, batch: RecordBatch) -> None:
        """`add` for a columnar batch: the same counts, without a dict per row."""
        for r in batch.others:
            if r.get("kind") == "eval" and r.get("test_accuracy") is not None:
                self.test_accuracy = float(r["test_accuracy"])
        s = batch.steps
        if not s:
            return
        self.samples += int(np.asarray(s["samples"]).astype(np.int64).sum()) if "samples" in s else 0
        self.steps_seen = max(self.steps_seen, int(np.max(s["step"])) + 1)
        if "epoch" in s:
            self.epoch = max(self.epoch, float(np.nanmax(np.asarray(s["epoch"], dtype=float))))
        if "loss" in s:
            self.loss = float(np.asarray(s["loss"])[-1])
        t = np.asarray(s["time"], dtype=float) if "time" in s else np.zeros(len(s["step"]))
        if self.first_start is None:
            self.first_start = float(np.min(measure.step_starts(
                {"time": t, **{c: np.asarray(s[c], dtype=float) for c in measure.COMPONENTS if c in s}})))
        newest = float(t.max())
        if newest >= self.last_time:
            self.last_time = newest
            self._clock.append((newest, self.steps_seen, self.samples))
            while len(self._clock) > 2 and newest - self._clock[1][0] >= self.window_s:
                self._clock.pop(0)

    def rates(self) -> tuple[float, float] | None:
        """(steps/s, samples/s) over the last `window_s` of the records' clock; None before
        two batches a tenth of a second apart have arrived."""
        if len(self._clock) < 2:
            return None
        (t0, s0, n0), (t1, s1, n1) = self._clock[0], self._clock[-1]
        if t1 - t0 < 0.1:
            return None
        return (s1 - s0) / (t1 - t0), (n1 - n0) / (t1 - t0)


STEP_TABLE = STEP_COLUMNS[1:]            # steps.csv's columns (worker, step, epoch, time, ...)
_INT_COLUMNS = ("worker", "step", "samples")
MERGE_ROWS = 1 << 16   # rows held back at most to write steps.csv in (step, worker) order (see StepStore)
WRITE_S = 0.25         # the store writes what it may at most this often (and at the end)
WRITE_ROWS = 1 << 14   # ... and at most this many rows a call before the end (the monitor stays responsive)
SPOOL = ".steps-spool"  # in a run directory while it is written: the step columns as raw float64


class StepStore:
    """Every step row of a run, kept where it is going: appended to the run directory's
    steps.csv while the run goes (with a directory), or, without one, to a private
    temporary spool (so a long run's memory stays flat either way).

    Rows arrive per worker in chunks (`add`), in each worker's own step order. steps.csv
    is in order of step, then worker, then time (the file a synchronous run writes is the
    same every time), so the store holds a worker's rows back until every worker still
    running has reached their step (`complete` says a worker will send no more) and then
    writes them: a merge window of about one live batch per worker. Workers that drift
    further apart (asynchronous workers of very different speeds) are written as they come
    once `MERGE_ROWS` rows are held: memory stays bounded whatever the run's length.

    Beside steps.csv the same columns go, as raw float64, to a spool folder (`SPOOL`),
    read back a chunk at a time for the summary's statistics (`chunks`) and whole for
    `frame`, exactly (a CSV read back may differ in a last digit); `drop_spool` removes
    it once the run directory is written. A store without a directory writes only that
    spool, in a folder of its own under the temporary directory (mode 0700), removed when
    the store is dropped or the process exits; a store that is pickled carries its rows
    in memory instead. Rows a write could not take (a full disk) stay in memory.

    >>> store = StepStore(size=2)
    >>> cols = lambda lo, hi: {**{f: np.zeros(hi - lo) for f in ROW_FIELDS}, "step": np.arange(lo, hi, dtype=float)}
    >>> store.add(0, cols(0, 3)); store.add(1, cols(0, 2)); store.write(force=True)
    >>> store.rows, store.held          # worker 1 has reached step 1: steps 0-1 written, worker 0's step 2 held
    (4, 1)
    >>> store.complete(0); store.complete(1); store.close(); store.frame()["step"].tolist()
    [0, 0, 1, 1, 2]
    """

    def __init__(self, directory: str | Path | None = None, size: int | None = None, private: bool = True):
        self.directory = None if directory is None else Path(directory)
        self.size = size
        self.private = private                             # files only this user can read (0600)
        self.pending: dict[int, list[np.ndarray]] = {}   # worker -> held (rows, STEP_TABLE) blocks
        self.held = 0                                      # rows held
        self.last_step: dict[int, float] = {}              # worker -> its highest step received
        self.done: set[int] = set()                        # workers that send no more rows
        self.memory: list[np.ndarray] = []                 # blocks kept here (no directory, or after an error)
        self.unwritten: list[np.ndarray] = []              # blocks in file order not yet safely on disk
        self.rows = 0                                      # rows in file order (written or kept)
        self.rows_on_disk = 0
        self.error: OSError | None = None                  # the write error that stopped the streaming
        self.closed = False
        self._files: dict[str, Any] = {}
        self._next_write = 0.0
        self._private: Path | None = None                   # the spool's folder without a directory
        self._cleanup: Any = None                           # its weakref.finalize

    @property
    def spool(self) -> Path | None:
        """The folder of the raw float64 columns (None before a store without a directory
        has written any)."""
        return self.directory / SPOOL if self.directory is not None else self._private

    @property
    def streaming(self) -> bool:
        return self.directory is not None

    def add(self, worker: int, columns: dict[str, Any]) -> None:
        """A chunk of `worker`'s rows (ROW_FIELDS columns; a "worker" column is ignored)."""
        n = len(columns["step"])
        if not n:
            return
        block = np.empty((n, len(STEP_TABLE)), dtype=np.float64)
        block[:, 0] = worker
        for j, name in enumerate(STEP_TABLE[1:], start=1):
            block[:, j] = columns[name]
        self.pending.setdefault(int(worker), []).append(block)
        self.held += n
        self.last_step[int(worker)] = max(self.last_step.get(int(worker), -math.inf), float(block[:, 1].max()))
        self.write()

    def complete(self, worker: int) -> None:
        """`worker` sends no more rows (its loop returned, or it was lost)."""
        self.done.add(int(worker))

    def write(self, force: bool = False, final: bool = False) -> None:
        """Write the rows every running worker has passed (all of them when `final`, or when
        more than MERGE_ROWS are held); at most every WRITE_S unless `force` or `final`."""
        now = time.perf_counter()
        if not (final or force or self.held >= MERGE_ROWS or now >= self._next_write):
            return
        self._next_write = now + WRITE_S
        if self.held:
            if final or self.held >= MERGE_ROWS:
                limit = math.inf
            else:
                workers = range(self.size) if self.size is not None else self.last_step
                running = [w for w in workers if w not in self.done]
                limit = min((self.last_step.get(w, -math.inf) for w in running), default=math.inf)
            if limit > -math.inf:
                self._release(limit)
        self._flush_unwritten(None if final else WRITE_ROWS)

    def _release(self, limit: float) -> None:
        out = []
        for worker in sorted(self.pending):
            blocks = self.pending[worker]
            rows = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
            ready = rows[:, 1] <= limit
            if ready.all():
                out.append(rows)
                del self.pending[worker]
            elif ready.any():
                out.append(rows[ready])
                self.pending[worker] = [rows[~ready]]
        if not out:
            return
        rows = out[0] if len(out) == 1 else np.concatenate(out)
        rows = rows[np.lexsort((rows[:, 3], rows[:, 0], rows[:, 1]))]   # by step, worker, time (stable)
        self.held -= len(rows)
        self.rows += len(rows)
        self.unwritten.append(rows)

    def _flush_unwritten(self, most: int | None = None) -> None:
        budget = math.inf if most is None else most
        while self.unwritten and budget > 0:
            rows = self.unwritten[0]
            if len(rows) > budget:        # the rest at the next call
                rows, self.unwritten[0] = rows[:int(budget)], rows[int(budget):]
                self.unwritten.insert(0, rows)
            budget -= len(rows)
            if self.error is not None:
                self.memory.append(rows)
            else:
                try:
                    self._append(rows)
                except OSError as exc:   # disk full, quota: keep the rest in memory, report at save
                    self.error = exc
                    self.memory.append(rows)
                else:
                    self.rows_on_disk += len(rows)
            self.unwritten.pop(0)

    def _open(self) -> None:
        if self.directory is None:
            self._private = Path(tempfile.mkdtemp(prefix="workbench-steps-"))   # 0700, ours alone
            self._cleanup = weakref.finalize(self, _remove_spool, self._private, os.getpid())
            self._files = {name: open(self._private / f"{name}.f64", "wb") for name in STEP_TABLE}
            return
        d = self.directory
        # A run directory claimed over an old run (overwrite): its commit marker goes first,
        # so the old summary never vouches for the new rows, then the old run's other files.
        (d / "summary.json").unlink(missing_ok=True)
        for name in RUN_FILES:
            (d / name).unlink(missing_ok=True)
        spool = d / SPOOL
        spool.mkdir(mode=0o700 if self.private else 0o777, exist_ok=True)
        opener = private_opener if self.private else None
        self._files = {name: open(spool / f"{name}.f64", "wb", opener=opener) for name in STEP_TABLE}
        self._files["csv"] = open(d / "steps.csv", "w", encoding="utf-8", newline="", opener=opener)
        self._files["csv"].write(",".join(STEP_TABLE) + "\n")

    def _append(self, rows: np.ndarray) -> None:
        """Rows onto steps.csv and the spool; a write cut short (a signal, a full disk) is
        undone, so the files never hold half a chunk."""
        if not self._files:
            self._open()
        files = self._files
        at = {name: f.tell() for name, f in files.items()}
        try:
            if "csv" in files:
                files["csv"].write(csv_rows(rows))
                files["csv"].flush()
            for j, name in enumerate(STEP_TABLE):
                files[name].write(np.ascontiguousarray(rows[:, j]).tobytes())
                files[name].flush()
        except BaseException:
            for name, f in files.items():
                with contextlib.suppress(OSError, ValueError):
                    f.seek(at[name])
                    f.truncate()
            raise

    def sync_before(self, step: int) -> int:
        """Every row of a step before `step` written to steps.csv, and steps.csv synced (a
        checkpoint of `step` vouches for them); returns its length in bytes then, which a
        resumed run reads up to (`read_step_rows`: the spool is a copy, left unsynced). The
        caller knows every worker has sent those rows (its state for `step` came after them)."""
        if self.closed or not self.streaming:
            return 0
        self._release(step - 1)
        self._flush_unwritten(None)
        if self.error is None:
            try:
                if not self._files:
                    self._open()
                csv = self._files["csv"]
                csv.flush()
                os.fsync(csv.fileno())
                for name in STEP_TABLE:   # the spool's writes reach the kernel (a kill -9 keeps them)
                    self._files[name].flush()
                return csv.tell()
            except OSError as exc:
                self.error = exc
        return 0

    def rewind(self, step: int) -> None:
        """Drop every row of a step `step` or later (an elastic run's round that runs again):
        the rows kept are written again, from the start (rare: a regroup)."""
        parts = list(self.chunks())
        rows = (np.column_stack([np.concatenate([p[n] for p in parts]) for n in STEP_TABLE]) if parts
                else np.empty((0, len(STEP_TABLE))))
        rows = rows[np.lexsort((rows[:, 3], rows[:, 0], rows[:, 1]))] if len(rows) else rows
        rows = rows[rows[:, 1] < step]
        for f in self._files.values():
            with contextlib.suppress(OSError):
                f.close()
        self._files = {}
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None
        self.pending, self.held, self.memory, self.unwritten = {}, 0, [], []
        self.last_step = {w: v for w, v in self.last_step.items() if v < step}
        self.done = set()
        self.resume(rows)

    def resume(self, rows: np.ndarray) -> None:
        """Start the run directory's steps.csv (and spool) over with `rows` ((n, STEP_TABLE),
        in file order): a resumed run's rows before its checkpoint; its new ones follow."""
        self._open()
        if len(rows):
            self._append(rows)
        self.rows = self.rows_on_disk = len(rows)

    def close(self) -> None:
        """Every row written, steps.csv on disk (fsync): what the commit needs. Idempotent."""
        if self.closed:
            return
        for w in list(self.pending):
            self.done.add(w)
        self.write(final=True)
        if self.streaming and self.error is None:
            try:
                if not self._files:
                    self._open()      # a run without a step still writes its (empty) steps.csv
                for f in self._files.values():
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                self.error = exc
        for f in self._files.values():
            with contextlib.suppress(OSError):
                f.close()
        self._files = {}
        self.closed = True

    def __getstate__(self) -> dict:
        """A store travels without its open files (a closed one has none left to use), and
        a private spool's rows travel in memory (the folder is this process's)."""
        state = dict(self.__dict__)
        state["_files"] = {}
        if self.directory is None:
            kept = [np.column_stack([c[name] for name in STEP_TABLE]) for c in self._disk_chunks(STEP_TABLE)]
            state.update(memory=kept + list(self.memory), rows_on_disk=0, _private=None, _cleanup=None)
        return state

    def saved_in(self, directory: str | Path) -> bool:
        """Whether steps.csv is already written, whole, in `directory`."""
        return (self.streaming and self.closed and self.error is None
                and Path(directory).resolve() == self.directory.resolve())

    def _spool_columns(self, names: Iterable[str], lo: int, hi: int) -> dict[str, np.ndarray]:
        spool = self.spool
        out = {}
        for name in names:
            with open(spool / f"{name}.f64", "rb") as f:
                f.seek(8 * lo)
                out[name] = np.fromfile(f, dtype=np.float64, count=hi - lo)
        return out

    def chunks(self, names: Iterable[str] = STEP_TABLE, rows: int = 1 << 20):
        """The rows in file order, `rows` at a time, as {column: float64 array} (before
        `close`, the rows still held for the merge come last)."""
        names = list(names)
        index = {name: j for j, name in enumerate(STEP_TABLE)}
        yield from self._disk_chunks(names, rows)
        held = [b for w in sorted(self.pending) for b in self.pending[w]]   # none once closed
        group: list[np.ndarray] = []
        size = 0
        for block in self.memory + self.unwritten + held + [None]:   # small blocks taken together
            if group and (block is None or size + len(block) > rows):
                joined = group[0] if len(group) == 1 else np.concatenate(group)
                yield {name: joined[:, index[name]] for name in names}
                group, size = [], 0
            if block is not None:
                group.append(block)
                size += len(block)

    def _disk_chunks(self, names: Iterable[str], rows: int = 1 << 20):
        """The rows written to disk, in file order, `rows` at a time."""
        names = list(names)
        if self.rows_on_disk and self.spool is not None and self.spool.is_dir():
            for lo in range(0, self.rows_on_disk, rows):
                yield self._spool_columns(names, lo, min(lo + rows, self.rows_on_disk))
        elif self.rows_on_disk and self.directory is not None:   # the spool is gone: steps.csv, a piece at a time
            for part in pd.read_csv(self.directory / "steps.csv", usecols=names, chunksize=rows):
                yield {name: part[name].to_numpy(dtype=np.float64) for name in names}
        elif self.rows_on_disk:
            raise RuntimeError(f"the run's step spool {self._private} is gone (removed by someone else?)")

    def frame(self) -> pd.DataFrame:
        """Every row as steps.csv holds it (int columns as ints)."""
        parts = list(self.chunks())
        if not parts:
            return _frame(np.empty((0, len(STEP_TABLE))))
        cols = {name: np.concatenate([p[name] for p in parts]) for name in STEP_TABLE}
        rows = np.column_stack([cols[name] for name in STEP_TABLE])
        if self.held:   # a view mid-run: the rows held for the merge, in their place
            rows = rows[np.lexsort((rows[:, 3], rows[:, 0], rows[:, 1]))]
        return _frame(rows)

    def drop_spool(self) -> None:
        """Remove the spool (steps.csv holds the same rows); later reads come from steps.csv."""
        if self.streaming and self.closed:
            shutil.rmtree(self.directory / SPOOL, ignore_errors=True)


def _remove_spool(folder: Path, owner: int) -> None:
    """A private spool's folder, removed by the process that made it (not a forked child)."""
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


_CSV_ROW = ",".join("%d" if name in _INT_COLUMNS else "%r" for name in STEP_TABLE) + os.linesep


def csv_rows(rows: np.ndarray) -> str:
    """(rows, STEP_TABLE) float64 -> steps.csv's lines, the same text as
    `_frame(rows).to_csv(index=False, header=False)` (shortest round-trip floats, worker/step/
    samples as integers, NaN as an empty field) at a third of its cost: pandas formats each
    float through NumPy's string conversion, this is one %-format over Python floats. A
    1,024-worker simulated run writes ~10^4 rows a second, so the writer's speed is the run's."""
    if not len(rows):
        return ""
    text = (_CSV_ROW * len(rows)) % tuple(rows.ravel().tolist())
    return text.replace(",nan", ",")   # the first field is the worker (an integer): a NaN is never first


def _frame(rows: np.ndarray) -> pd.DataFrame:
    """(rows, STEP_TABLE) float64 -> the step table's DataFrame (worker, step, samples as ints)."""
    df = pd.DataFrame({name: rows[:, j] for j, name in enumerate(STEP_TABLE)}, columns=list(STEP_TABLE))
    return df.astype({c: "int64" for c in _INT_COLUMNS})


class EvalTable:
    """A run's evaluation records, kept compact: one float64 row per evaluation and the
    worker's name as a code (a dict per evaluation costs ~0.7 KB; a long run evaluating
    every epoch makes hundreds of thousands).

    >>> t = EvalTable()
    >>> t.add(eval_record(0, 9, 1.0, 0.5, 0.3, 0.4, 0.9)); t.add(eval_record("centre", 19, 2.0, 1.0, 0.2, 0.3, None))
    >>> t.frame()[["worker", "step", "test_accuracy"]].values.tolist()
    [['0', 9, 0.9], ['centre', 19, nan]]
    """

    NUMBERS = ("step", "epoch", "time", "train_loss", "test_loss", "test_accuracy")

    def __init__(self) -> None:
        self.data = np.empty((64, len(self.NUMBERS)), dtype=np.float64)
        self.who: list[str] = []             # code -> worker name
        self._code: dict[str, int] = {}
        self.codes = np.empty(64, dtype=np.int32)
        self.n = 0

    def add(self, rec: Record) -> None:
        if self.n == len(self.codes):
            self.data = np.concatenate([self.data, np.empty_like(self.data)])
            self.codes = np.concatenate([self.codes, np.empty_like(self.codes)])
        worker = str(rec.get("worker"))
        code = self._code.get(worker)
        if code is None:
            code = self._code[worker] = len(self.who)
            self.who.append(worker)
        self.codes[self.n] = code
        self.data[self.n] = [math.nan if rec.get(k) is None else float(rec[k]) for k in self.NUMBERS]
        self.n += 1

    def frame(self) -> pd.DataFrame:
        """The evaluations as evals.csv holds them (EVAL_COLUMNS less kind)."""
        names = np.array(self.who, dtype=object)
        cols: dict[str, Any] = {"worker": names[self.codes[:self.n]] if self.n else np.array([], dtype=object)}
        cols.update({k: self.data[:self.n, j] for j, k in enumerate(self.NUMBERS)})
        df = pd.DataFrame(cols, columns=list(EVAL_COLUMNS[1:]))
        return df.astype({"step": "int64"})


class Collector:
    """Gathers a run's records; thread-safe enough for one writer.

    Records come three ways: as record dicts (`__call__`: evals, events), as a worker's
    live batch (`add_live`: every step row since its last batch, packed, plus its rare
    records), and as the rows a worker's loop still held when it ended (`add_steps`: a
    simulated worker's log up to its kill). Step rows go to the run's `StepStore`
    (steps.csv in the run directory while the run goes, when there is one); what is
    forwarded to `on_record` (the dashboard's live plots, the CLI's progress bar) is the
    steps binned in blocks of `width` steps (`bin_steps`, at most `LIVE_ROWS` blocks over a
    planned run) as record dicts, so the training loop never knows who is watching.
    A worker whose loop never returned (its process died) is represented by the rows it
    streamed.
    """

    def __init__(self, on_record: OnRecord | None = None, *, width: int | None = None, size: int | None = None,
                 directory: str | Path | None = None, private: bool = True):
        self.rows: dict[str, list[Record]] = {"event": [], "tournament": []}
        self.evals = EvalTable()
        self.on_record = on_record
        self.width = width
        self.store = StepStore(directory, size, private=private)
        self.started: dict[int, float] = {}                  # worker -> wall clock of its first step
        self.live_rows = 0                                   # step rows forwarded live

    def __call__(self, records: Iterable[Record]) -> None:
        batch = list(records)
        steps = [r for r in batch if r.get("kind") == "step"]
        for r in batch:
            if r.get("kind") != "step":
                self._keep(r)
        by_worker: dict[int, list[Record]] = {}
        for r in steps:
            by_worker.setdefault(int(r["worker"]), []).append(r)
        parts = []
        for worker, recs in by_worker.items():
            cols = {f: np.array([float(r.get(f, 0.0)) for r in recs]) for f in ROW_FIELDS}
            self.store.add(worker, cols)
            parts.append(live_columns(worker, cols))
        if self.on_record is not None and batch:
            steps = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else None
            self.on_record(RecordBatch(steps, [r for r in batch if r.get("kind") != "step"]))

    def add_live(self, payload: dict[str, Any]) -> None:
        """A worker's live batch: {"rank", "started" (wall clock of its step 0, or None),
        "rows" (`pack_rows` of its step rows since the last batch, or None), "records"
        (other dicts), "done"}. ("rank", not "worker": the scheduler stamps its own "worker"
        key, an address, on every dict logged through it.)"""
        worker = int(payload["rank"])
        if payload.get("started") is not None:
            self.started.setdefault(worker, float(payload["started"]))
        records = list(payload.get("records") or [])
        for r in records:
            self._keep(r)
        rows = payload.get("rows")
        live = None
        if rows is not None and int(rows["n"]):
            cols = unpack_rows(rows)
            self.store.add(worker, cols)
            live = live_columns(worker, bin_steps(cols, width=self.width))
            self.live_rows += len(live["step"])
        if payload.get("done"):
            self.store.complete(worker)
        batch = RecordBatch(live, records)
        if self.on_record is not None and batch:
            self.on_record(batch)

    def _keep(self, r: Record) -> None:
        if r["kind"] == "eval":
            self.evals.add(r)
        else:
            self.rows.setdefault(r["kind"], []).append(r)

    def add_steps(self, worker: int, columns: dict[str, np.ndarray] | None, complete: bool = True) -> None:
        """The rows `worker`'s loop still held when it ended (after every batch it sent);
        `complete`: it sends no more (a loop that returned still sends its last batch,
        marked done, which completes it)."""
        if columns is not None:
            self.store.add(int(worker), columns)
        if complete:
            self.store.complete(int(worker))

    def t_zero(self) -> float | None:
        """Wall clock of the run's first training step (None before any worker started)."""
        return min(self.started.values()) if self.started else None

    def records_before(self, step: int) -> dict[str, list[Record]]:
        """The evaluations and tournaments of the steps before `step`, and every event so
        far, as record dicts (what a checkpoint of `step` carries; `seed` takes them back)."""
        t = self.evals
        evals = [{"kind": "eval", "worker": t.who[code], **dict(zip(t.NUMBERS, map(_num_or_text, row.tolist())))}
                 for row, code in zip(t.data[:t.n], t.codes[:t.n].tolist()) if row[0] < step]
        return {"eval": evals,
                "event": [dict(r) for r in self.rows.get("event", [])],
                "tournament": [dict(r) for r in self.rows.get("tournament", []) if r.get("step", -1) < step]}

    def rewind(self, step: int, keep: Iterable[int] | None = None) -> None:
        """Forget every record of a step `step` or later (an elastic run's round that runs
        again, after a regroup); with `keep`, the workers still in the run (the others'
        rows are complete: the merge no longer waits for them)."""
        self.store.rewind(step)
        if keep is not None:
            gone = set(self.store.last_step) - set(keep)
            for w in gone:
                self.store.complete(w)
        t = self.evals
        kept = [i for i in range(t.n) if t.data[i, 0] < step]
        t.data[:len(kept)], t.codes[:len(kept)] = t.data[kept], t.codes[kept]
        t.n = len(kept)
        self.rows["tournament"] = [r for r in self.rows.get("tournament", []) if r.get("step", -1) < step]

    def seed(self, records: dict[str, list[Record]]) -> None:
        """Take up a checkpoint's records (`records_before`), before a resumed run's new ones."""
        for kind in ("eval", "event", "tournament"):
            for r in records.get(kind, []):
                self._keep({**r, "kind": kind})

    def table(self, kind: str, columns: tuple[str, ...]) -> pd.DataFrame:
        if kind == "step":
            self.store.write(force=True)
            return self.store.frame()[[c for c in columns if c != "kind"]]
        if kind == "eval":
            return self.evals.frame()[[c for c in columns if c != "kind"]]
        rows = self.rows.get(kind, [])
        df = pd.DataFrame(rows, columns=list(columns))
        return df.drop(columns="kind")


class RunResult:
    """What a run produced: `summary` (dict), `steps`, `evals`, `tournaments` (DataFrames).

    A run's `steps` may be large (one row per worker per step): a result built from a run
    that streamed them to its run directory reads them back on first use (`store`)."""

    def __init__(self, summary: dict[str, Any], steps: pd.DataFrame | None = None, evals: pd.DataFrame | None = None,
                 tournaments: pd.DataFrame | None = None, params: Any = None, *, store: StepStore | None = None):
        self.summary = summary
        self._steps = steps
        self.store = store
        self.evals = evals if evals is not None else pd.DataFrame(columns=list(EVAL_COLUMNS[1:]))
        self.tournaments = (tournaments if tournaments is not None
                            else pd.DataFrame(columns=list(TOURNAMENT_COLUMNS[1:])))
        self.params = params  # final parameters (NumPy), kept in memory only

    @property
    def steps(self) -> pd.DataFrame:
        if self._steps is None:
            self._steps = self.store.frame() if self.store is not None else _frame(np.empty((0, len(STEP_TABLE))))
        return self._steps

    @steps.setter
    def steps(self, value: pd.DataFrame) -> None:
        self._steps = value

    def forget_steps(self) -> None:
        """Drop the in-memory steps of a streamed run (read again from its files on use)."""
        if self.store is not None:
            self._steps = None

    def __repr__(self) -> str:
        return (f"RunResult(status={self.summary.get('status')!r}, algorithm={self.summary.get('algorithm')!r}, "
                f"steps={self.summary.get('steps')!r})")

    @property
    def status(self) -> str:
        return self.summary["status"]

    @property
    def events(self) -> list[dict]:
        return self.summary.get("events", [])

    def save(self, directory: str | Path, overwrite: bool = False) -> Path:
        """Write the run directory (atomically, file by file); returns its path.

        A run that streamed its steps to `directory` while it ran has its steps.csv there
        already (written and synced before this is called); otherwise it is written here.
        A directory that already holds another run (a summary.json of a different run)
        is refused with `FileExistsError` unless `overwrite`, which replaces that run
        whole: every run file the new one does not write (an old tournaments.csv, an old
        report) is removed, so the directory never mixes two runs. Other files are kept."""
        d = Path(directory)
        old = d / "summary.json"
        private = bool((self.summary.get("config") or {}).get("out_private", True))
        if old.exists() and not self._same_run(old):
            if not overwrite:
                raise FileExistsError(f"out: a directory that does not hold another run (pass overwrite=True, or "
                                      f"--overwrite, to replace it), got {str(d)!r}")
            # The committed run stays whole until this one is: written beside it, then swapped in.
            stage = claim_stage(d, private)
            try:
                self._write_files(stage, private, streamed=False)
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                raise
            return replace_run_dir(stage, d)
        if not d.exists():
            d.mkdir(parents=True, mode=0o700 if private else 0o777)
        streamed = self.store is not None and self.store.saved_in(d)
        if self.store is not None and self.store.error is not None and self.store.directory is not None \
                and Path(d).resolve() == self.store.directory.resolve():
            # The stream stopped on a write error: its steps.csv is incomplete, so it is never
            # committed; the rows it kept in memory are written whole in its place if the disk
            # now takes them (what could be kept is kept), then the error is raised.
            with contextlib.suppress(OSError):
                atomic_write(d / "steps.csv", self.steps.to_csv(index=False))
            raise self.store.error
        if overwrite:   # an uncommitted directory (or this run's own): no committed run to keep
            (d / "summary.json").unlink(missing_ok=True)     # the commit marker first
            for name in RUN_FILES:
                if (name != "tournaments.csv" or not len(self.tournaments)) and not (streamed and name == "steps.csv"):
                    (d / name).unlink(missing_ok=True)
        self._write_files(d, private, streamed)
        return d

    def _write_files(self, d: Path, private: bool, streamed: bool) -> None:
        """The run files into `d`; summary.json is the commit marker: written last, once the
        data files are safe, so a full disk or a signal mid-save leaves a directory that
        says it is uncommitted."""
        if not streamed:
            atomic_write(d / "steps.csv", self.steps.to_csv(index=False), private=private)
        atomic_write(d / "evals.csv", self.evals.to_csv(index=False), private=private)
        if len(self.tournaments):
            atomic_write(d / "tournaments.csv", self.tournaments.to_csv(index=False), private=private)
        import yaml  # local: results stays light to import
        atomic_write(d / "config.yaml", yaml.safe_dump(self.summary.get("config", {}), sort_keys=False),
                     private=private)
        atomic_write(d / "summary.json", json.dumps(_jsonable(self.summary), indent=2, allow_nan=False),
                     private=private, sync=True)
        (d / CLAIM).unlink(missing_ok=True)

    def _same_run(self, summary_path: Path) -> bool:
        """Whether `summary_path` is this run's own summary (saving again is fine)."""
        try:
            old = json.loads(summary_path.read_text())
        except (OSError, ValueError):
            return False
        mine = self.summary.get("run_id")
        if mine is not None:
            return old.get("run_id") == mine
        return old == json.loads(json.dumps(_jsonable(self.summary), allow_nan=False))

    @classmethod
    def load(cls, directory: str | Path) -> RunResult:
        """Read a run directory written by `save`; `UncommittedRunError` for one without
        its summary.json (a run still writing, or one stopped mid-save)."""
        d = Path(directory)
        if d.is_dir() and not (d / "summary.json").exists():
            raise UncommittedRunError(uncommitted_message(d))
        summary = _read_run_file(d, "summary.json", lambda p: json.loads(p.read_text()))
        if not isinstance(summary, dict):
            raise _broken(d, "summary.json", f"holds a JSON object (this one holds a {type(summary).__name__})")
        steps = _read_run_file(d, "steps.csv", pd.read_csv)
        evals = _read_run_file(d, "evals.csv", lambda p: pd.read_csv(p, dtype={"worker": str}))
        for name, table, columns in (("steps.csv", steps, STEP_COLUMNS), ("evals.csv", evals, EVAL_COLUMNS)):
            missing = [c for c in columns if c != "kind" and c not in table.columns]
            if missing:
                raise _broken(d, name, f"has the columns {', '.join(missing)} (missing)")
            numeric = [c for c in table.columns if c in ("step", "time", "loss", "samples", "compute_s")
                       and len(table) and not pd.api.types.is_numeric_dtype(table[c])]
            if numeric:
                raise _broken(d, name, f"holds numbers in {', '.join(numeric)}")
        tpath = d / "tournaments.csv"
        tournaments = (_read_run_file(d, "tournaments.csv", pd.read_csv) if tpath.exists()
                       else pd.DataFrame(columns=list(TOURNAMENT_COLUMNS[1:])))
        return cls(summary=summary, steps=steps, evals=evals, tournaments=tournaments)


def _broken(d: Path, name: str, what: str) -> Exception:
    from ..config import ConfigError
    return ConfigError("RUN_DIR", f"a run directory whose {name} {what}", str(d))


def _read_run_file(d: Path, name: str, read: Callable[[Path], Any]) -> Any:
    """One file of a run directory, or a one-line ConfigError naming it: missing, not a
    regular file (a FIFO would block the reader for good), or unreadable."""
    path = d / name
    if not path.exists():
        raise _broken(d, name, "exists (it is missing)")
    if not path.is_file():
        raise _broken(d, name, "is a regular file (it is not)")
    try:
        return read(path)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise _broken(d, name, f"can be read ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") \
            from None


CLAIM = ".workbench-claim"   # in a run directory from its claim until summary.json is written
CHECKPOINTS = "checkpoints"  # in a run directory: what a resumed run continues from (`workbench.checkpoint`)


class UncommittedRunError(FileNotFoundError):
    """A run directory without its summary.json: claimed by a run that has not finished
    writing it (still running, or stopped mid-save)."""


def uncommitted_message(d: Path) -> str:
    """What an uncommitted run directory holds, in one line."""
    claim = d / CLAIM
    who = ""
    if claim.exists():
        try:
            who = f", claimed by process {int(claim.read_text().strip())}"
        except (OSError, ValueError):
            who = ", claimed"
    kept = sorted(p.name for p in d.iterdir() if p.name in RUN_FILES)
    return (f"{d}: an uncommitted run directory (no summary.json{who}: a run still writing, or one stopped "
            f"mid-save); it holds {', '.join(kept) if kept else 'no run files'}")


def claim_run_dir(out: str | Path, overwrite: bool = False, private: bool = True) -> Path:
    """Claim `out` for one run, atomically, before it trains; returns the directory claimed.

    A new directory is made with `os.mkdir` (exactly one caller succeeds), mode 0700 when
    `private` (only this user; else as the umask says); an existing one that holds no run
    is claimed by creating its CLAIM marker exclusively. If either is taken (another run
    claimed it first, or it holds a run and `overwrite` is not set), the first free sibling
    `out-2`, `out-3`, ... is claimed instead, so two runs given the same directory (or the
    same default name in the same second) never collide. With `overwrite`, a directory
    holding a committed run is not touched: the new run is written beside it, in a staging
    directory (`claim_stage`, `.NAME.overwrite-PID-K`), which replaces it only once the new
    run commits (`replace_run_dir`); `final_dir` names where a claimed directory ends up.
    The marker stays until `RunResult.save` has written summary.json (the commit)."""
    base = Path(out)
    base.parent.mkdir(parents=True, exist_ok=True)
    path, k = base, 1
    while True:
        try:
            os.mkdir(path, 0o700 if private else 0o777)
            usable = True
        except FileExistsError:
            committed = (path / "summary.json").exists()
            if overwrite and k == 1 and committed and path.is_dir():
                return claim_stage(path, private)
            usable = path.is_dir() and ((overwrite and k == 1) or not committed)
        if usable and _take_claim(path, private):
            return path
        k += 1
        path = base.parent / f"{base.name}-{k}"


def _take_claim(path: Path, private: bool) -> bool:
    """Create `path`'s CLAIM marker exclusively, holding this process's id; False when
    another run holds it."""
    try:
        fd = os.open(path / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600 if private else 0o644)
    except FileExistsError:
        return False     # another run's claim
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


_STAGE = re.compile(r"\.(?P<name>.+)\.overwrite-[0-9]+-[0-9]+")


def claim_stage(final: str | Path, private: bool = True) -> Path:
    """A fresh staging directory beside `final` (`.NAME.overwrite-PID-K`, claimed) for a
    run that is to replace the committed run in `final` once it commits itself."""
    final = Path(final)
    k = 1
    while True:
        stage = final.parent / f".{final.name}.overwrite-{os.getpid()}-{k}"
        try:
            os.mkdir(stage, 0o700 if private else 0o777)
        except FileExistsError:
            k += 1
            continue
        _take_claim(stage, private)
        return stage


def final_dir(claimed: str | Path) -> Path:
    """Where a claimed run directory ends up: the run it replaces for a staging directory
    (`claim_stage`), else itself.

    >>> str(final_dir("runs/.a.overwrite-12-1")), str(final_dir("runs/a-2"))
    ('runs/a', 'runs/a-2')
    """
    p = Path(claimed)
    m = _STAGE.fullmatch(p.name)
    return p.parent / m.group("name") if m else p


def replace_run_dir(stage: str | Path, final: str | Path) -> Path:
    """Put the committed run in `stage` where `final` is, and remove the run `final` held.

    Files of `final` that are no run's (a user's notes) move into the new run first. Then
    the two directories are swapped in one step where the kernel offers it
    (`exchange_dirs`), so `final` always holds a committed run; elsewhere `final` is
    renamed aside first (a crash between the two renames leaves both runs, hidden beside
    it). Returns `final`."""
    stage, final = Path(stage), Path(final)
    ours = set(RUN_FILES) | {SPOOL, CLAIM, CHECKPOINTS}
    if final.is_dir():
        for entry in final.iterdir():
            if entry.name not in ours and not (stage / entry.name).exists():
                os.rename(entry, stage / entry.name)
    old = stage
    if not (final.exists() and exchange_dirs(stage, final)):
        old = final.parent / f".{final.name}.replaced-{os.getpid()}"
        if final.exists():
            os.rename(final, old)
        os.rename(stage, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def reclaim_run_dir(path: str | Path) -> Path:
    """Claim an uncommitted (or stopped) run directory again, to resume the run in it: its
    CLAIM marker names a process that is gone (or there is none). FileExistsError naming
    the process when a live one holds it (that run is still writing it)."""
    d = Path(path)
    claim = d / CLAIM
    try:
        pid = int(claim.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pass
        except PermissionError:
            raise FileExistsError(f"{d}: claimed by process {pid}, which is still running") from None
        else:
            raise FileExistsError(f"{d}: claimed by process {pid}, which is still running") from None
    claim.unlink(missing_ok=True)
    if not _take_claim(d, private=not (d.stat().st_mode & 0o077)):
        raise FileExistsError(f"{d}: claimed by another run as this one started")
    return d


def release_claim(path: str | Path) -> None:
    """A claimed directory whose run ended before saving: drop the claim, and the
    directory if nothing else is in it (a staging directory whole: the run it was to
    replace stays as it was)."""
    d = Path(path)
    if final_dir(d) != d:
        shutil.rmtree(d, ignore_errors=True)
        return
    (d / CLAIM).unlink(missing_ok=True)
    try:
        d.rmdir()
    except OSError:
        pass


def free_run_dir(parent: str | Path, name: str) -> Path:
    """`parent/name`, or `parent/name-2`, `-3`, ... : the first that holds no run yet (a
    second session writing into the same folder must not replace the first one's runs)."""
    parent = Path(parent)
    path, k = parent / name, 1
    while (path / "summary.json").exists():
        k += 1
        path = parent / f"{name}-{k}"
    return path


def build_result(config: dict[str, Any], collector: Collector, *, status: str, wall_time_s: float,
                 workers: list[dict[str, Any]], extra: dict[str, Any] | None = None,
                 params: Any = None) -> RunResult:
    """Assemble the `RunResult` and its summary from gathered records.

    The step rows are not gathered in memory: the collector's `StepStore` has written them
    (or holds them, without a run directory); the totals and the steady state are computed
    over its chunks, so a long run's summary costs one chunk of memory."""
    store = collector.store
    store.close()    # every row written and synced: the data is safe before anything vouches for it
    evals = collector.table("eval", EVAL_COLUMNS)
    if len(evals):   # in time order, whatever order the workers' live batches arrived in
        evals = evals.sort_values(["time", "worker"], kind="stable").reset_index(drop=True)
    tournaments = collector.table("tournament", TOURNAMENT_COLUMNS)
    if len(tournaments):
        tournaments = tournaments.sort_values(["time", "trainer"], kind="stable").reset_index(drop=True)
    events = collector.table("event", EVENT_COLUMNS).to_dict("records")
    totals = step_totals(store.chunks(("worker", "step", "time", "samples") + measure.COMPONENTS))
    samples = totals["samples"]
    compute_s, comm_s, wait_s = (totals[c] for c in measure.COMPONENTS)
    steady = measure.steady_chunks(lambda: store.chunks(("worker", "step", "time", "samples") + measure.COMPONENTS))
    last_eval = evals.iloc[-1] if len(evals) else None
    # A step of a synchronous run is one global step; asynchronous workers count their own.
    n_steps = totals["n_steps"]
    per_worker = []   # as Python lists, not iterrows: 1,024 virtual workers cost ~1 s that way
    pw = totals["per_worker"]
    cols = {c: pw[c].to_numpy(dtype=np.float64).tolist() for c in ("samples", "compute_s", "comm_s", "wait_s")}
    for worker, n, c, m, w in zip(pw.index.tolist(), *cols.values()):
        busy_w = c + m + w
        per_worker.append({"worker": int(worker), "samples": int(n),
                           "share": n / samples if samples else 0.0,
                           "compute_s": c, "comm_s": m, "wait_s": w,
                           "idle_fraction": w / busy_w if busy_w > 0 else 0.0})
    # The run's time identities (measure.timing): wall = start-up + training + teardown.
    # Cluster start, data loading and imports on cold workers are start-up, never training.
    extra = dict(extra or {})
    startup = extra.pop("startup_s", None)
    times = measure.timing(called=0.0, first_step_wall=startup, ended=wall_time_s, train_s=totals["train_s"])
    summary: dict[str, Any] = {
        "status": status,
        "algorithm": config.get("algorithm"),
        "config": config,
        "workers": workers,
        "workers_by_kind": workers_by_kind(workers),
        "steps": n_steps,
        "samples": samples,
        **times,
        "samples_per_s": steady.samples_per_s,     # steady throughput (measure.steady)
        "steady": steady.to_dict(),
        "final_train_loss": _num(last_eval["train_loss"]) if last_eval is not None else None,
        "final_test_loss": _num(last_eval["test_loss"]) if last_eval is not None else None,
        "final_test_accuracy": _num(last_eval["test_accuracy"]) if last_eval is not None else None,
        "best_test_accuracy": _num(evals["test_accuracy"].max()) if len(evals) else None,
        "time_breakdown": {"compute_s": compute_s, "comm_s": comm_s, "wait_s": wait_s},
        "comm_fraction": steady.comm_fraction,   # over the steady state
        "per_worker": per_worker,
        "events": events,
        "versions": versions(),
    }
    summary.update(extra)
    if status == "completed":   # ended as planned, and learned nothing? (`learning.note`)
        first, last = _first_and_last_loss(store)
        final = summary["final_train_loss"] if summary["final_train_loss"] is not None else last
        summary["learning_note"] = learning.note(config, summary["final_test_accuracy"], first, final, n_steps)
    if "run_id" not in summary:  # engine runs bring theirs; a run directory knows whose it is
        import uuid
        summary["run_id"] = uuid.uuid4().hex[:12]
    return RunResult(summary=summary, evals=evals, tournaments=tournaments, params=params, store=store)


def _first_and_last_loss(store: Any) -> tuple[float | None, float | None]:
    """The mean training loss of a run's first step and of its last (over the workers'
    rows of that step; None without rows)."""
    first = last = None
    for c in store.chunks(("step", "loss")):
        if not len(c["step"]):
            continue
        if first is None:
            first = float(np.mean(c["loss"][c["step"] == c["step"].min()]))
        last = float(np.mean(c["loss"][c["step"] == c["step"].max()]))
    return first, last


def step_totals(chunks: Iterable[dict[str, np.ndarray]]) -> dict[str, Any]:
    """What the summary adds up over a run's step rows, one chunk at a time: samples and
    booked seconds (in all and per worker), the steps (highest step + 1) and the training
    span's length (`measure.train_time`'s rule).

    >>> c = {"worker": np.array([0.0, 1.0, 0.0]), "step": np.array([0.0, 0.0, 1.0]), "time": np.array([1.0, 1.0, 2.0]),
    ...      "samples": np.full(3, 8.0), "compute_s": np.full(3, 1.0), "comm_s": np.zeros(3), "wait_s": np.zeros(3)}
    >>> t = step_totals([c])
    >>> t["samples"], t["n_steps"], t["train_s"], t["per_worker"]["samples"].tolist()
    (24, 2, 2.0, [16.0, 8.0])
    """
    sums = ["samples", *measure.COMPONENTS]
    per_worker = pd.DataFrame(columns=sums, dtype=float)
    first, last, top, any_rows = math.inf, -math.inf, -1, False
    for c in chunks:
        if not len(c["step"]):
            continue
        any_rows = True
        part = pd.DataFrame({name: c[name] for name in sums}).groupby(c["worker"].astype(np.int64)).sum()
        per_worker = part if per_worker.empty else per_worker.add(part, fill_value=0.0)
        starts = c["time"] - (c["compute_s"] + c["comm_s"] + c["wait_s"])
        first, last = min(first, float(starts.min())), max(last, float(c["time"].max()))
        top = max(top, int(c["step"].max()))
    per_worker = per_worker.sort_index()
    return {"samples": int(per_worker["samples"].sum()) if any_rows else 0,
            **{name: float(per_worker[name].sum()) if any_rows else 0.0 for name in measure.COMPONENTS},
            "n_steps": top + 1 if any_rows else 0,
            "train_s": max(last - first, 0.0) if any_rows else 0.0,
            "per_worker": per_worker}


def workers_by_kind(workers: list[dict]) -> str:
    """The compute workers counted by kind and device, GPUs first: what the summary, the
    CLI's status line and the report header say a run ran on.

    >>> workers_by_kind([{"kind": "gpu", "device": "k80"}] * 8 + [{"kind": "cpu", "device": "core"}] * 2)
    '8 GPU (k80) + 2 CPU (core)'
    >>> workers_by_kind([{"kind": "cpu"}])
    '1 CPU'
    """
    counts: dict[tuple[str, str | None], int] = {}
    for w in workers:
        key = (str(w.get("kind", "cpu")), w.get("device"))
        counts[key] = counts.get(key, 0) + 1
    order = sorted(counts, key=lambda k: (k[0] != "gpu", k[0], str(k[1])))
    return " + ".join(f"{counts[k]} {k[0].upper()}" + (f" ({k[1]})" if k[1] else "") for k in order) or "none"


def steady_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The steady rows of `steps`: `workbench.measure.steady_steps` (kept here for old imports)."""
    return measure.steady_steps(steps)


def versions() -> dict[str, str]:
    """Versions of the interpreter and the libraries that shape results (looked up once
    per process: finding cupy's distribution reads every installed package's metadata,
    seconds on a busy machine, and a stop's save must not wait for it)."""
    return dict(_versions())


@functools.lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str], ...]:
    from importlib.util import find_spec

    from .. import __version__
    out = {"python": platform.python_version(), "workbench": __version__}  # distribution: parallel-workbench
    for name in ("numpy", "dask", "distributed", "pandas", "cupy"):
        if name == "cupy" and find_spec("cupy") is None:   # not installed: no need to look through them all
            continue
        try:
            from importlib.metadata import version
            out[name] = version(name if name != "cupy" else _cupy_dist())
        except Exception:  # not installed: leave it out
            continue
    return tuple(out.items())


def _cupy_dist() -> str:
    from importlib.metadata import distributions
    for dist in distributions():
        name = dist.metadata.get("Name", "")
        if name.startswith("cupy"):
            return name
    raise LookupError("cupy")


def _num_or_text(x: Any) -> Any:
    """A table cell as JSON keeps it: numbers as Python numbers (NaN as None), text as text."""
    if isinstance(x, str):
        return x
    if hasattr(x, "item"):
        x = x.item()
    return None if isinstance(x, float) and not math.isfinite(x) else x


def read_step_rows(directory: str | Path, nbytes: int | None = None) -> np.ndarray:
    """The step rows of a run directory's steps.csv, (n, STEP_TABLE) float64 in file order,
    exactly as they were written (its floats are shortest round-trip text); `nbytes`: only
    its first bytes (what a checkpoint synced: a killed run may have cut a later line short)."""
    path = Path(directory) / "steps.csv"
    if not path.is_file():
        return np.empty((0, len(STEP_TABLE)))
    with open(path, "rb") as f:
        text = f.read() if nbytes is None else f.read(nbytes)
    if text.count(b"\n") < 2:
        return np.empty((0, len(STEP_TABLE)))
    frame = pd.read_csv(io.BytesIO(text))   # shortest round-trip text: read back to the same floats
    return frame[list(STEP_TABLE)].to_numpy(dtype=np.float64)


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _jsonable(obj: Any) -> Any:
    """NaN/inf -> None, numpy scalars -> Python, so summary.json is strict JSON."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def now() -> float:
    """Monotonic clock used for every `time` column."""
    return time.perf_counter()
