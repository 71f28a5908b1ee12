"""Evaluation collection: the client's `Collector` gathers a run's record batches (the
step rows into a `StepStore`, the evaluations into an `EvalTable`, events and tournaments
as dicts)."""
from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .records import (
    EVAL_COLUMNS,
    ROW_FIELDS,
    OnRecord,
    Record,
    RecordBatch,
    _num_or_text,
    bin_steps,
    live_columns,
    unpack_rows,
)
from .store import StepStore


class EvalTable:
    """A run's evaluation records, kept compact: one float64 row per evaluation and the
    worker's name as a code (a dict per evaluation costs ~0.7 KB; a long run evaluating
    every epoch makes hundreds of thousands).

    >>> from workbench.results.records import eval_record
    >>> t = EvalTable()
    >>> t.add(eval_record(0, 9, 1.0, 0.5, 0.3, 0.4, 0.9)); t.add(eval_record("centre", 19, 2.0, 1.0, 0.2, 0.3, None))
    >>> t.frame()[["worker", "step", "test_accuracy"]].values.tolist()
    [['0', 9, 0.9], ['centre', 19, nan]]
    """

    NUMBERS = ("step", "epoch", "time", "train_loss", "test_loss", "test_accuracy", "val_loss", "val_accuracy")

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
