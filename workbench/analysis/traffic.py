"""What a run sent, beside what it learned: accuracy against bytes sent and against time.

The communication-efficient algorithms trade exchanges for accuracy; their lesson and
experiment plot each run's test accuracy against the bytes one worker had sent by then
(the step records' `bytes_sent`, summed) and against the run's clock. No plotly here:
the notebook draws the table.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

TRAFFIC_COLUMNS = ("run", "step", "time", "bytes_per_worker", "test_accuracy", "test_loss")


def bytes_per_worker(result: Any) -> float:
    """Bytes one worker sent over the whole run: the step records' `bytes_sent`, summed
    per worker, averaged over the workers (NaN for records that predate the column).

    >>> from workbench.results import RunResult
    >>> steps = pd.DataFrame({"worker": [0, 0, 1, 1], "step": [0, 1, 0, 1], "bytes_sent": [10.0, 0, 10, 0]})
    >>> bytes_per_worker(RunResult({}, steps, pd.DataFrame()))
    10.0
    """
    steps = result.steps
    if "bytes_sent" not in steps or not len(steps):
        return float("nan")
    return float(steps.groupby("worker")["bytes_sent"].sum().mean())


def traffic_table(results: Sequence[Any], labels: Sequence[str]) -> pd.DataFrame:
    """One row per evaluation of each run: its step, time, the bytes one worker had sent
    up to and including that step (mean over workers), and the scores.

    >>> from workbench.results import RunResult
    >>> steps = pd.DataFrame({"worker": [0, 0, 0], "step": [0, 1, 2], "bytes_sent": [5.0, 5.0, 5.0]})
    >>> evals = pd.DataFrame({"step": [1, 2], "time": [0.1, 0.2], "test_accuracy": [0.5, 0.6], "test_loss": [1.0, 0.9]})
    >>> traffic_table([RunResult({}, steps, evals)], ["a"])["bytes_per_worker"].tolist()
    [10.0, 15.0]
    """
    rows = []
    for result, label in zip(results, labels):
        steps, evals = result.steps, result.evals
        if not len(evals):
            continue
        per_step = steps.groupby("step")["bytes_sent"].mean() if "bytes_sent" in steps else pd.Series(dtype=float)
        cumulative = per_step.sort_index().cumsum()
        sent = np.interp(evals["step"].to_numpy(dtype=float), cumulative.index.to_numpy(dtype=float),
                         cumulative.to_numpy(dtype=float)) if len(cumulative) else np.full(len(evals), np.nan)
        for (_, e), b in zip(evals.iterrows(), sent):
            rows.append({"run": label, "step": int(e["step"]), "time": float(e["time"]), "bytes_per_worker": float(b),
                         "test_accuracy": float(e["test_accuracy"]), "test_loss": float(e["test_loss"])})
    return pd.DataFrame(rows, columns=list(TRAFFIC_COLUMNS))
