"""The record formats: the tables' columns, one record per step, evaluation or event,
the worker's step log (`StepLog`) and the columnar batches that carry records to the
client (`RecordBatch`, `RunTally`)."""
from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import measure

STEP_COLUMNS = ("kind", "worker", "step", "epoch", "time", "loss", "lr", "samples",
                "compute_s", "comm_s", "wait_s", "staleness", "bytes_sent")
EVAL_COLUMNS = ("kind", "worker", "step", "epoch", "time", "train_loss", "test_loss", "test_accuracy", "val_loss",
                "val_accuracy")   # (the validation set's: NaN without one, `val_fraction`)
EVENT_COLUMNS = ("kind", "time", "event", "worker", "message")
TOURNAMENT_COLUMNS = ("kind", "round", "step", "time", "trainer", "partner", "own_score",
                      "partner_score", "adopted", "lr", "lineage")
RUN_FILES = ("summary.json", "steps.csv", "evals.csv", "tournaments.csv", "config.yaml", "params.npy", "params_best.npy",
             "report.html")
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
                test_loss: float, test_accuracy: float, val_loss: float | None = None,
                val_accuracy: float | None = None) -> Record:
    """One evaluation of a parameter vector (worker is a rank, "centre" or "server"); the
    validation set's scores None without one."""
    return {"kind": "eval", "worker": str(worker), "step": step, "epoch": epoch, "time": t,
            "train_loss": train_loss, "test_loss": test_loss, "test_accuracy": test_accuracy,
            "val_loss": val_loss, "val_accuracy": val_accuracy}


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
        self._newest_taken: tuple[float, float] | None = None   # (step, time) of the last row taken

    def _set_data(self, data: np.ndarray) -> None:
        self.data = data
        self._bytes = memoryview(data).cast("B")   # `add` packs a row straight into these bytes
        self._rows = data.shape[0]                  # (its capacity, read at every row)

    def add(self, step: int, t: float, loss: float, lr: float, samples: int, compute_s: float,
            comm_s: float, wait_s: float, staleness: float, bytes_sent: float = 0.0) -> None:
        n = self.n
        if n == self._rows:
            grown = np.empty((2 * n, self.data.shape[1]), dtype=np.float64)
            grown[:n] = self.data
            self._set_data(grown)
        # One C call writes the row: ~0.2 us, where assigning a tuple to data[n] costs ~0.7.
        _pack_row(self._bytes, n * _ROW_BYTES, step, t, loss, lr, samples, compute_s, comm_s, wait_s, staleness,
                  bytes_sent)
        self.n = n + 1

    def __getstate__(self) -> dict:
        return {"data": self.data, "n": self.n, "taken": self.taken, "compute_total": self.compute_total,
                "newest_taken": self._newest_taken}

    def __setstate__(self, state: dict) -> None:
        self._set_data(state["data"])
        self.n, self.taken, self.compute_total = state["n"], state["taken"], state["compute_total"]
        self._newest_taken = state.get("newest_taken")

    def newest(self) -> tuple[float, float] | None:
        """(step, time) of the newest row booked, taken since or not; None before the first.

        >>> log = StepLog()
        >>> log.newest(), log.add(4, 0.5, 1.0, 0.1, 32, 0.001, 0.0, 0.0, 0.0), log.newest()
        (None, None, (4.0, 0.5))
        >>> _ = log.take(lambda s: s); log.newest()
        (4.0, 0.5)
        """
        if self.n:
            return float(self.data[self.n - 1, 0]), float(self.data[self.n - 1, 1])
        return self._newest_taken

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
        self._newest_taken = float(cols["step"][-1]), float(cols["time"][-1])
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
    block = row_block(columns)
    return {"n": int(block.shape[0]), "data": block.tobytes()}


def row_block(columns: dict[str, np.ndarray]) -> np.ndarray:
    """A worker's step columns as one (rows, ROW_FIELDS) float64 block, row-major (the
    bytes `pack_rows` sends, the rows a ring to the client holds: `comm.rowring`)."""
    block = np.empty((len(columns["step"]), len(ROW_FIELDS)), dtype=np.float64)
    for j, name in enumerate(ROW_FIELDS):
        block[:, j] = columns[name]
    return block


def unpack_rows(packed: dict[str, Any]) -> dict[str, np.ndarray]:
    """The columns `pack_rows` packed (its "data" bytes, or a `row_block` itself)."""
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
    of the records' own clock: the samples of the steps that ended in it, up to the time
    every working worker's rows have reached (so a worker whose rows arrive late is not
    counted twice nor missed; a worker silent for a whole window, lost or done, no longer
    holds it back). The same rule as the steady throughput (`measure.steady`: samples of
    the steps inside a window over its length), on a trailing window.

    >>> t = RunTally(window_s=10.0)
    >>> t.add([{"kind": "step", "worker": 0, "step": k, "epoch": (k + 1) / 4, "time": 0.5 + k, "samples": 8,
    ...         "compute_s": 0.5, "comm_s": 0.0, "wait_s": 0.0} for k in range(4)])
    >>> t.steps_seen, t.epoch, t.samples, t.first_start, t.last_time
    (4, 1.0, 32, 0.0, 3.5)
    >>> t.add([{"kind": "step", "worker": 0, "step": 4, "epoch": 1.25, "time": 4.5, "samples": 8}])
    >>> [round(r, 2) for r in t.rates()]     # 5 steps of 8 samples from 0 to 4.5 s
    [1.11, 8.89]
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
        self._newest: dict[int, float] = {}      # each worker's newest step end
        self._recent: list[tuple[np.ndarray, np.ndarray]] = []   # (end times, samples) of the last windows

    def add(self, records: Iterable[Record]) -> None:
        if isinstance(records, RecordBatch):
            self._add_batch(records)
            return
        first: list[Record] = []     # the steps of the first batch with steps: first_start
        ends: list[tuple[int, float, int]] = []
        for r in records:
            kind = r.get("kind")
            if kind == "eval" and r.get("test_accuracy") is not None:
                self.test_accuracy = float(r["test_accuracy"])
                continue
            if kind != "step":
                continue
            self.samples += int(r.get("samples") or 0)
            step, t = int(r.get("step", 0)), float(r.get("time", 0.0))
            ends.append((int(r.get("worker") or 0), t, int(r.get("samples") or 0)))
            self.steps_seen = max(self.steps_seen, step + 1)
            self.epoch = max(self.epoch, float(r.get("epoch") or 0.0))
            if r.get("loss") is not None:
                self.loss = float(r["loss"])
            if self.first_start is None:
                first.append(r)
            self.last_time = max(self.last_time, t)
        if first:
            self.first_start = float(np.min(measure.step_starts({c: np.asarray([float(r.get(c) or 0.0) for r in first])
                                                                 for c in ("time", *measure.COMPONENTS)})))
        if ends:
            w, t, n = (np.asarray(c) for c in zip(*ends))
            self._note(w, t.astype(float), n)

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
        self.last_time = max(self.last_time, float(t.max()))
        samples = np.asarray(s["samples"]) if "samples" in s else np.zeros(len(t), dtype=np.int64)
        self._note(np.asarray(s["worker"]) if "worker" in s else np.zeros(len(t), dtype=np.int64), t, samples)

    def _note(self, workers: np.ndarray, ends: np.ndarray, samples: np.ndarray) -> None:
        """Keep the step ends and samples the rate's window may still need."""
        for w in np.unique(workers).tolist():
            self._newest[w] = max(self._newest.get(w, -math.inf), float(ends[workers == w].max()))
        self._recent.append((ends, samples.astype(np.int64)))
        keep_after = max(self._newest.values()) - 2 * self.window_s   # the window's end lags by under one window
        while self._recent and float(self._recent[0][0].max()) < keep_after:
            self._recent.pop(0)

    def rates(self) -> tuple[float, float] | None:
        """(steps/s, samples/s) over the last `window_s` of the records' clock (the class's
        rule); None until the rows every working worker has sent span a tenth of a second.
        Steps/s is the samples' rate over the run's samples per step so far."""
        if not self._newest or self.first_start is None:
            return None
        top = max(self._newest.values())
        end = min(t for t in self._newest.values() if t >= top - self.window_s)
        start = max(end - self.window_s, self.first_start)
        if end - start < 0.1:
            return None
        inside = sum(int(n[(t > start) & (t <= end)].sum()) for t, n in self._recent)
        samples_per_s = inside / (end - start)
        return samples_per_s * self.steps_seen / max(self.samples, 1), samples_per_s


def _num_or_text(x: Any) -> Any:
    """A table cell as JSON keeps it: numbers as Python numbers (NaN as None), text as text."""
    if isinstance(x, str):
        return x
    if hasattr(x, "item"):
        x = x.item()
    return None if isinstance(x, float) and not math.isfinite(x) else x
