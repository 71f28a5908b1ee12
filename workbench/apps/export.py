"""Run directories to the tools people already open: TensorBoard event files.

`export_tensorboard(run_dirs, logdir)` writes one subfolder of `logdir` per run, so
`tensorboard --logdir LOGDIR` overlays them. Scalars, against the global step:

- `train/loss` (mean over the workers that reached the step) and `train/lr`;
  `train/loss_worker<w>` per worker when there are several;
- `eval/test_accuracy`, `eval/test_loss`, `eval/train_loss`, and `eval/val_accuracy`,
  `eval/val_loss` with a validation set (LTFB: `eval/<trainer>/...`);
- `time/compute_s`, `time/comm_s`, `time/wait_s` per step (mean over workers);
- `summary/samples_per_s`, `summary/final_test_accuracy`, `summary/comm_fraction` at step 0;

and the run's config.yaml and status as text. Wall times are the run's own: its records'
`time` counts from its first training step, which began `startup_s` after the run did (the
run ended `wall_time_s` after its start, when summary.json was written), so TensorBoard's
"relative" axis is the training time and its "wall" axis the hour each step ran. A simulated
run's times are virtual seconds, laid from that same start; its status text says so.
Needs tensorboardX (`pip install 'parallel-workbench[tensorboard]'`, about 0.5 MB).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ..measure import COMPONENTS
from ..results.result import RunResult

__all__ = ["export_tensorboard"]


def _writer_class():
    try:
        from tensorboardX import SummaryWriter
    except ImportError as exc:
        from ..util.extras import missing_extra
        raise missing_extra("export --tensorboard", exc) from None
    return SummaryWriter


def _folder_name(run_dir: Path, used: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_dir.resolve().name) or "run"
    name, k = base, 2
    while name in used:
        name, k = f"{base}-{k}", k + 1
    used.add(name)
    return name


def _start_time(run_dir: Path, result: RunResult) -> float:
    """When the run's first training step began (its records' `time` 0), as a Unix time: when
    summary.json was written, less the wall time, plus the start-up before that step."""
    wall = float(result.summary.get("wall_time_s") or 0.0)
    startup = float(result.summary.get("startup_s") or 0.0)
    return os.path.getmtime(run_dir / "summary.json") - wall + startup


def _write_run(writer, result: RunResult, t0: float) -> None:
    steps, evals = result.steps, result.evals
    if len(steps):
        by_step = steps.groupby("step", sort=True)
        mean = by_step[["loss", "time", "compute_s", "comm_s", "wait_s"]].mean()
        lr = by_step["lr"].first()
        for step, row in mean.iterrows():
            wall = t0 + float(row["time"])
            if np.isfinite(row["loss"]):
                writer.add_scalar("train/loss", float(row["loss"]), int(step), walltime=wall)
            writer.add_scalar("train/lr", float(lr[step]), int(step), walltime=wall)
            for c in COMPONENTS:
                writer.add_scalar(f"time/{c}", float(row[c]), int(step), walltime=wall)
        if steps["worker"].nunique() > 1:
            for w, rows in steps.groupby("worker"):
                for r in rows.itertuples(index=False):
                    if np.isfinite(r.loss):
                        writer.add_scalar(f"train/loss_worker{w}", float(r.loss), int(r.step), walltime=t0 + r.time)
    if len(evals):
        names = evals["worker"].astype(str)
        several = names.nunique() > 1
        for name, rows in evals.groupby(names):
            prefix = f"eval/{name}/" if several else "eval/"
            for r in rows.itertuples(index=False):
                for c in ("test_accuracy", "test_loss", "train_loss", "val_accuracy", "val_loss"):
                    v = getattr(r, c, None)      # (the validation set's: NaN without one, skipped)
                    if v is not None and pd.notna(v) and np.isfinite(v):
                        writer.add_scalar(prefix + c, float(v), int(r.step), walltime=t0 + r.time)
    s = result.summary
    for key in ("samples_per_s", "final_test_accuracy", "comm_fraction"):
        if isinstance(s.get(key), (int, float)):
            writer.add_scalar(f"summary/{key}", float(s[key]), 0, walltime=t0)
    import yaml
    config_text = yaml.safe_dump(s.get("config") or {}, sort_keys=False)
    writer.add_text("config", "```\n" + config_text + "```", 0, walltime=t0)
    virtual = "; simulated: its times are virtual seconds" if s.get("simulated") else ""
    writer.add_text("status", f"{s.get('status')} ({s.get('algorithm')}, {s.get('steps')} steps){virtual}", 0,
                    walltime=t0)


def export_tensorboard(run_dirs: Iterable[str | os.PathLike], logdir: str | os.PathLike) -> list[Path]:
    """Write each run directory as TensorBoard event files under `logdir/<run name>/`.

    Args:
        run_dirs: run directories written by `RunResult.save` (or `wb.run(out=...)`).
        logdir: the folder to write into (created); open it with `tensorboard --logdir`.
    Returns:
        The folder written for each run, in order.
    Raises:
        ImportError: tensorboardX is not installed (says what to install).
    """
    SummaryWriter = _writer_class()
    out, used = [], set()
    root = Path(logdir)
    root.mkdir(parents=True, exist_ok=True)
    used.update(p.name for p in root.iterdir())   # never mix two runs' events in one folder
    for d in map(Path, run_dirs):
        result = RunResult.load(d)
        folder = root / _folder_name(d, used)
        writer = SummaryWriter(logdir=str(folder))
        try:
            _write_run(writer, result, _start_time(d, result))
        finally:
            writer.close()
        out.append(folder)
    return out
