"""The step store: every step row of a run, appended to steps.csv as the run goes, with
its spool of raw float64 columns (`StepStore`), and reading steps.csv back."""
from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..util.fileio import private_opener
from .records import RUN_FILES, STEP_COLUMNS

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
    >>> from workbench.results.records import ROW_FIELDS
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
