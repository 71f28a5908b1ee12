"""The result of a run: `RunResult` (its tables, summary, and the run directory it
saves to and loads from) and `build_result`, which assembles it from a collector."""
from __future__ import annotations

import contextlib
import functools
import json
import math
import platform
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import learning, measure
from ..util.fileio import atomic_write
from .collect import Collector
from .records import EVAL_COLUMNS, EVENT_COLUMNS, RUN_FILES, STEP_COLUMNS, TOURNAMENT_COLUMNS
from .rundir import CLAIM, UncommittedRunError, claim_stage, replace_run_dir, uncommitted_message
from .store import STEP_TABLE, StepStore, _frame


class RunResult:
    """What a run produced: `summary` (dict), `steps`, `evals`, `tournaments` (DataFrames).

    A run's `steps` may be large (one row per worker per step): a result built from a run
    that streamed them to its run directory reads them back on first use (`store`)."""

    def __init__(self, summary: dict[str, Any], steps: pd.DataFrame | None = None, evals: pd.DataFrame | None = None,
                 tournaments: pd.DataFrame | None = None, params: Any = None, *, store: StepStore | None = None,
                 best_params: Any = None):
        self.summary = summary
        self._steps = steps
        self.store = store
        self.evals = evals if evals is not None else pd.DataFrame(columns=list(EVAL_COLUMNS[1:]))
        self.tournaments = (tournaments if tournaments is not None
                            else pd.DataFrame(columns=list(TOURNAMENT_COLUMNS[1:])))
        self.params = params  # final parameters (NumPy): a run directory's params.npy
        # the parameters at the lowest test loss of rank 0's evaluations (`summary["params_best"]`
        # says when): params_best.npy where they differ from the final ones
        self.best_params = best_params

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
        why = self.why
        return (f"RunResult(status={self.summary.get('status')!r}, algorithm={self.summary.get('algorithm')!r}, "
                f"steps={self.summary.get('steps')!r}{f', why={why!r}' if why else ''})")

    @property
    def why(self) -> str:
        """What ended a run that failed or diverged, in one line ("" otherwise): `why_ended`."""
        return why_ended(self.summary)

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
        if self.params is not None:   # the trained model: what wb.predict and wb.generate answer with
            atomic_write(d / "params.npy", params_bytes(self.params), private=private)
        if self.best_params is not None and not (self.params is not None and np.array_equal(self.best_params,
                                                                                            self.params)):
            atomic_write(d / "params_best.npy", params_bytes(self.best_params), private=private)
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
        for c in ("val_loss", "val_accuracy"):      # a run directory written before validation sets were scored
            if c not in evals.columns:
                evals[c] = np.nan
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
        params = _trained(d, "params.npy")
        best = _trained(d, "params_best.npy") if (d / "params_best.npy").exists() \
            else (params if summary.get("params_best") else None)   # the best were the final ones
        return cls(summary=summary, steps=steps, evals=evals, tournaments=tournaments, params=params,
                   best_params=best)


def params_bytes(params: np.ndarray) -> bytes:
    """A parameter vector (NumPy: the engine brings rank 0's to the host) as a `.npy` file's
    bytes, which any NumPy reads."""
    import io
    buf = io.BytesIO()
    np.save(buf, np.asarray(params), allow_pickle=False)
    return buf.getvalue()


def read_params(path: Path) -> np.ndarray:
    """A run directory's params.npy: one flat vector of floats (nothing in it runs code),
    mapped read-only from the file (loading a run costs no copy of its model)."""
    params = np.load(path, mmap_mode="r", allow_pickle=False)
    if params.ndim != 1 or params.dtype.kind != "f":
        raise ValueError(f"one flat vector of floats, got shape {params.shape} of {params.dtype}")
    return params


def _trained(d: Path, name: str) -> np.ndarray | None:
    """A run directory's parameter file, or None when there is none; one that cannot be read
    is a warning, not a failure (the run's records load without it)."""
    from ..config import ConfigError
    if not (d / name).exists():
        return None
    try:
        return _read_run_file(d, name, read_params)
    except ConfigError as exc:
        import warnings
        warnings.warn(f"{exc}; the run loads without its parameters", stacklevel=3)
        return None


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


def last_segment(events: list[dict]) -> list[dict]:
    """The events of a resumed run's last segment (and those no segment marks); all of them
    for a run never resumed.

    >>> [e["m"] for e in last_segment([{"m": 1, "segment": 0}, {"m": 2, "segment": 1}, {"m": 3}])]
    [2, 3]
    """
    last = max((e["segment"] for e in events if e.get("segment") is not None), default=None)
    return [e for e in events if e.get("segment") in (None, last)] if last is not None else list(events)


def why_ended(summary: dict[str, Any], traceback_at: str = "result.events") -> str:
    """What ended a run that failed or diverged, in one line ("" otherwise): the first
    failure of its last segment with the worker that met it (a model's error, a worker or
    the scheduler lost; its traceback, where there is one, is in the summary's events, which
    `traceback_at` names), or the divergence. `RunResult.why`, its repr, its progress bar and
    the dashboard's status line say it.

    >>> why_ended({"status": "failed", "events": [{"event": "failed", "worker": "1",
    ...     "message": "NameError: name 'x' is not defined\\nTraceback ..."}]})
    "worker 1: NameError: name 'x' is not defined (its traceback: result.events)"
    >>> why_ended({"status": "completed", "events": []})
    ''
    """
    status = summary.get("status")
    kinds = {"failed": ("failed", "worker_lost", "scheduler_lost"), "diverged": ("diverged",)}.get(status)
    if kinds is None:
        return ""
    for e in last_segment(summary.get("events") or []):
        if e.get("event") in kinds:
            text = str(e.get("message") or e["event"])
            first, _, rest = text.partition("\n")
            who = e.get("worker")
            if who is not None and not first.startswith(f"worker {who}"):
                first = f"worker {who}: {first}"
            return first + (f" (its traceback: {traceback_at})" if "Traceback" in rest else "")
    for rank, error in (summary.get("errors") or {}).items():   # a loop that never started
        first = str(error).partition("\n")[0]
        return first if first.startswith(f"worker {rank}") else f"worker {rank}: {first}"
    return ""


def build_result(config: dict[str, Any], collector: Collector, *, status: str, wall_time_s: float,
                 workers: list[dict[str, Any]], extra: dict[str, Any] | None = None,
                 params: Any = None, best: tuple[int, float, Any] | None = None) -> RunResult:
    """Assemble the `RunResult` and its summary from gathered records (`best`: rank 0's
    (steps run, loss, parameters) at its lowest validation loss, or test loss without a
    validation set, `WorkerContext.best`).

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
        **_best_loss(evals),
        **_validation(evals, last_eval),
        "params_best": {"steps": best[0], ("val_loss" if config.get("val_fraction") else "test_loss"): best[1]}
        if best is not None else None,
        "time_breakdown": {"compute_s": compute_s, "comm_s": comm_s, "wait_s": wait_s},
        "comm_fraction": steady.comm_fraction,   # over the steady state
        "per_worker": per_worker,
        "events": events,
        "versions": versions(),
    }
    summary.update(extra)
    if status in ("completed", "stopped"):   # it learned its training set by heart? (`learning.overfit_note`)
        summary["overfit_note"] = learning.overfit_note(config, evals, (summary.get("model") or {}).get("n_params"),
                                                        kept=summary["params_best"])
    if status in ("completed", "diverged"):   # ended as planned, and learned nothing? diverged? (`learning.note`)
        first, last = _first_and_last_loss(store)
        final = summary["final_train_loss"] if summary["final_train_loss"] is not None else last
        how = next((str(e.get("message") or "its loss became NaN or inf") for e in events if e.get("event") == "diverged"),
                   "its loss became NaN or inf") if status == "diverged" else None
        summary["learning_note"] = learning.note(config, summary["final_test_accuracy"], first, final, n_steps,
                                                 overfit=summary.get("overfit_note") is not None, diverged=how)
    if "run_id" not in summary:  # engine runs bring theirs; a run directory knows whose it is
        import uuid
        summary["run_id"] = uuid.uuid4().hex[:12]
    return RunResult(summary=summary, evals=evals, tournaments=tournaments, params=params, store=store,
                     best_params=best[2] if best is not None else None)


def _best_loss(evals: pd.DataFrame) -> dict[str, Any]:
    """`best_test_loss` and the step after which it was measured (`best_test_loss_step`, steps
    run), over the evaluations the final numbers come from (`learning.best_test_loss`)."""
    found = learning.best_test_loss(evals)
    if found is None:
        return {"best_test_loss": None, "best_test_loss_step": None}
    return {"best_test_loss": _num(found[1]["test_loss"]), "best_test_loss_step": int(found[1]["step"]) + 1}


def _validation(evals: pd.DataFrame, last_eval: Any) -> dict[str, Any]:
    """A run with a validation set (`val_fraction`): its final validation loss and accuracy,
    its lowest validation loss and when, and the test loss and accuracy there: the model the
    validation set chose, scored on rows no choice looked at. {} without one."""
    if last_eval is None or "val_loss" not in evals or not evals["val_loss"].notna().any():
        return {}
    out = {"final_val_loss": _num(last_eval["val_loss"]), "final_val_accuracy": _num(last_eval["val_accuracy"])}
    found = learning.lowest(evals, "val_loss")
    if found is not None:
        row = found[1]
        out.update({"best_val_loss": _num(row["val_loss"]), "best_val_loss_step": int(row["step"]) + 1,
                    "test_loss_at_best_val": _num(row["test_loss"]),
                    "test_accuracy_at_best_val": _num(row["test_accuracy"])})
    return out


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
