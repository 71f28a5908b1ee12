"""Run results: the record format, `RunResult`, and the run directory.

A run streams flat records with fixed keys (dask-ml style history entries); the client
gathers them into a `RunResult`. A run directory is the unit everyone shares:

    summary.json   status, config, workers, totals, final metrics, time breakdown, events
    steps.csv      one row per worker step        (STEP_COLUMNS)
    evals.csv      one row per evaluation          (EVAL_COLUMNS)
    tournaments.csv  LTFB only: one row per trainer per round (TOURNAMENT_COLUMNS)
    config.yaml    the RunConfig, loadable with RunConfig.from_yaml
    report.html    static figures (written by workbench.ui.report when plotly is present)

Files are written atomically (temp file + rename) and hold no pickles.
"""
from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd

from .fileio import atomic_write

STEP_COLUMNS = ("kind", "worker", "step", "epoch", "time", "loss", "lr", "samples",
                "compute_s", "comm_s", "wait_s", "staleness")
EVAL_COLUMNS = ("kind", "worker", "step", "epoch", "time", "train_loss", "test_loss", "test_accuracy")
EVENT_COLUMNS = ("kind", "time", "event", "worker", "message")
TOURNAMENT_COLUMNS = ("kind", "round", "step", "time", "trainer", "partner", "own_score",
                      "partner_score", "adopted", "lr", "lineage")
STATUSES = ("running", "completed", "stopped", "diverged", "failed")

# A record is a flat dict whose "kind" says which table it belongs to.
Record = dict[str, Any]
OnRecord = Callable[[list[Record]], None]


def step_record(worker: int, step: int, epoch: float, t: float, loss: float, lr: float,
                samples: int, compute_s: float, comm_s: float = 0.0, wait_s: float = 0.0,
                staleness: float = 0.0) -> Record:
    """One worker step (all keys of STEP_COLUMNS)."""
    return {"kind": "step", "worker": worker, "step": step, "epoch": epoch, "time": t,
            "loss": loss, "lr": lr, "samples": samples, "compute_s": compute_s,
            "comm_s": comm_s, "wait_s": wait_s, "staleness": staleness}


def eval_record(worker: int | str, step: int, epoch: float, t: float, train_loss: float,
                test_loss: float, test_accuracy: float) -> Record:
    """One evaluation of a parameter vector (worker is a rank, "centre" or "server")."""
    return {"kind": "eval", "worker": str(worker), "step": step, "epoch": epoch, "time": t,
            "train_loss": train_loss, "test_loss": test_loss, "test_accuracy": test_accuracy}


def event_record(t: float, event: str, worker: Any = None, message: str = "") -> Record:
    """Something that happened once: worker lost, diverged, stopped, rebalanced, ..."""
    return {"kind": "event", "time": t, "event": event, "worker": None if worker is None else str(worker),
            "message": message}


class Collector:
    """Gathers streamed records into tables; thread-safe enough for one writer.

    Also forwards every batch to `on_record` (the dashboard's live plots), so the
    training loop never knows who is watching.
    """

    def __init__(self, on_record: OnRecord | None = None):
        self.rows: dict[str, list[Record]] = {"step": [], "eval": [], "event": [], "tournament": []}
        self.on_record = on_record

    def __call__(self, records: Iterable[Record]) -> None:
        batch = list(records)
        for r in batch:
            self.rows.setdefault(r["kind"], []).append(r)
        if self.on_record is not None and batch:
            self.on_record(batch)

    def table(self, kind: str, columns: tuple[str, ...]) -> pd.DataFrame:
        rows = self.rows.get(kind, [])
        df = pd.DataFrame(rows, columns=list(columns))
        return df.drop(columns="kind")


@dataclass
class RunResult:
    """What a run produced: `summary` (dict), `steps`, `evals`, `tournaments` (DataFrames)."""

    summary: dict[str, Any]
    steps: pd.DataFrame
    evals: pd.DataFrame
    tournaments: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(TOURNAMENT_COLUMNS[1:])))
    params: Any = None  # final parameters (NumPy), kept in memory only

    @property
    def status(self) -> str:
        return self.summary["status"]

    @property
    def events(self) -> list[dict]:
        return self.summary.get("events", [])

    def save(self, directory: str | Path) -> Path:
        """Write the run directory (atomically, file by file); returns its path."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / "summary.json", json.dumps(_jsonable(self.summary), indent=2, allow_nan=False))
        atomic_write(d / "steps.csv", self.steps.to_csv(index=False))
        atomic_write(d / "evals.csv", self.evals.to_csv(index=False))
        if len(self.tournaments):
            atomic_write(d / "tournaments.csv", self.tournaments.to_csv(index=False))
        import yaml  # local: results stays light to import
        atomic_write(d / "config.yaml", yaml.safe_dump(self.summary.get("config", {}), sort_keys=False))
        return d

    @classmethod
    def load(cls, directory: str | Path) -> "RunResult":
        """Read a run directory written by `save`."""
        d = Path(directory)
        summary = json.loads((d / "summary.json").read_text())
        steps = pd.read_csv(d / "steps.csv")
        evals = pd.read_csv(d / "evals.csv", dtype={"worker": str})
        tpath = d / "tournaments.csv"
        tournaments = pd.read_csv(tpath) if tpath.exists() else pd.DataFrame(columns=list(TOURNAMENT_COLUMNS[1:]))
        return cls(summary=summary, steps=steps, evals=evals, tournaments=tournaments)


def build_result(config: dict[str, Any], collector: Collector, *, status: str, wall_time_s: float,
                 workers: list[dict[str, Any]], extra: dict[str, Any] | None = None,
                 params: Any = None) -> RunResult:
    """Assemble the `RunResult` and its summary from gathered records."""
    steps = collector.table("step", STEP_COLUMNS)
    evals = collector.table("eval", EVAL_COLUMNS)
    tournaments = collector.table("tournament", TOURNAMENT_COLUMNS)
    events = collector.table("event", EVENT_COLUMNS).to_dict("records")
    samples = int(steps["samples"].sum()) if len(steps) else 0
    compute_s = float(steps["compute_s"].sum()) if len(steps) else 0.0
    comm_s = float(steps["comm_s"].sum()) if len(steps) else 0.0
    wait_s = float(steps["wait_s"].sum()) if len(steps) else 0.0
    busy = compute_s + comm_s + wait_s
    last_eval = evals.iloc[-1] if len(evals) else None
    # A step of a synchronous run is one global step; asynchronous workers count their own.
    n_steps = int(steps["step"].max()) + 1 if len(steps) else 0
    per_worker = []
    if len(steps):
        grouped = steps.groupby("worker")[["samples", "compute_s", "comm_s", "wait_s"]].sum()
        for worker, row in grouped.iterrows():
            busy_w = row.compute_s + row.comm_s + row.wait_s
            per_worker.append({"worker": worker, "samples": int(row.samples),
                               "share": float(row.samples / samples) if samples else 0.0,
                               "compute_s": float(row.compute_s), "comm_s": float(row.comm_s),
                               "wait_s": float(row.wait_s),
                               "idle_fraction": float(row.wait_s / busy_w) if busy_w > 0 else 0.0})
    # Throughput over the training itself: from the first step's start to the last step's
    # end. Cluster start, data loading and imports on cold workers are `startup_s`.
    if len(steps):
        first_start = float((steps["time"] - steps["compute_s"] - steps["comm_s"] - steps["wait_s"]).min())
        train_s = max(float(steps["time"].max()) - first_start, 1e-9)
    else:
        first_start, train_s = 0.0, 0.0
    summary: dict[str, Any] = {
        "status": status,
        "algorithm": config.get("algorithm"),
        "config": config,
        "workers": workers,
        "steps": n_steps,
        "samples": samples,
        "wall_time_s": wall_time_s,
        "startup_s": max(first_start, 0.0),
        "train_time_s": train_s,
        "samples_per_s": samples / train_s if train_s > 0 else 0.0,
        "final_train_loss": _num(last_eval["train_loss"]) if last_eval is not None else None,
        "final_test_loss": _num(last_eval["test_loss"]) if last_eval is not None else None,
        "final_test_accuracy": _num(last_eval["test_accuracy"]) if last_eval is not None else None,
        "best_test_accuracy": _num(evals["test_accuracy"].max()) if len(evals) else None,
        "time_breakdown": {"compute_s": compute_s, "comm_s": comm_s, "wait_s": wait_s},
        "comm_fraction": (comm_s + wait_s) / busy if busy > 0 else 0.0,
        "per_worker": per_worker,
        "events": events,
        "versions": versions(),
    }
    summary.update(extra or {})
    return RunResult(summary=summary, steps=steps, evals=evals, tournaments=tournaments, params=params)


def versions() -> dict[str, str]:
    """Versions of the interpreter and the libraries that shape results."""
    from . import __version__
    out = {"python": platform.python_version(), "workbench": __version__}  # distribution: parallel-workbench
    for name in ("numpy", "dask", "distributed", "pandas", "cupy"):
        try:
            from importlib.metadata import version
            out[name] = version(name if name != "cupy" else _cupy_dist())
        except Exception:  # not installed: leave it out
            continue
    return out


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


def now() -> float:
    """Monotonic clock used for every `time` column."""
    return time.perf_counter()
