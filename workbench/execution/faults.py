"""Faults made on purpose, for lessons and tests: a worker killed mid-run, a whole run killed.

`KillWorker` is an `on_record` that ends one Dask worker's process once a run has passed a
step (as a crashed machine would: no goodbye); a worker started by a nanny (the local
cluster's) is replaced by a fresh process, which joins the cluster under a new address,
so an elastic run takes it in. `run_and_kill` starts `python -m workbench run` in a
process group of its own and kills the whole group with SIGKILL once the run has written
some checkpoints: the state a `kill -9` leaves, for `wb.resume` to continue from.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..config import RunConfig


def _exit_now() -> None:
    os._exit(1)   # the worker process ends at once, as a crash would (its nanny, if any, starts another)


class KillWorker:
    """An `on_record` for `workbench.run`: once the run's records reach `step`, the process of
    the Dask worker at `index` (of the cluster's workers, as a run's ranks are chosen) ends.

    Args:
        client: the cluster's Dask client (`workbench.client()` for the session's).
        step: the step after which the worker is killed (its records show it).
        index: which worker, in `execution.cluster.workers_of` order.
        then: another `on_record` to pass every batch on to (a progress bar, a figure).
    """

    def __init__(self, client: Any, step: int, index: int = 1, then: Any = None):
        from .cluster import workers_of
        self.client, self.step, self.then = client, step, then
        self.address = workers_of(client)[index]["address"]
        self.killed_at: float | None = None   # wall clock of the kill
        self._lock = threading.Lock()

    def __call__(self, batch: Any) -> None:
        if self.then is not None:
            self.then(batch)
        steps = batch.columns("step", ("step",))["step"] if batch.n_steps else ()
        if len(steps) and float(max(steps)) >= self.step:
            with self._lock:
                if self.killed_at is None:
                    self.killed_at = time.time()
                    threading.Thread(target=self._kill, daemon=True).start()   # never on the records' thread

    def _kill(self) -> None:
        try:
            self.client.run(_exit_now, workers=[self.address])   # answers never: the worker is gone
        except Exception:   # noqa: BLE001 - the worker is gone either way
            pass


def run_and_kill(config: RunConfig, checkpoints: int = 2, timeout: float = 600.0) -> Path:
    """Run `config` with the command line (`python -m workbench run --config ...`) in a
    process group of its own, and kill the whole group with SIGKILL once the run directory
    holds `checkpoints` checkpoints; returns the run directory (uncommitted: no summary.json)."""
    from ..checkpoint import listed
    if not config.out:
        raise ValueError("out: a run directory for the run to leave its checkpoints in, got None")
    out = Path(config.out)
    folder = Path(tempfile.mkdtemp(prefix="workbench-kill-"))
    config.to_yaml(folder / "config.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "run", "--config", str(folder / "config.yaml"),
                             "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while len(listed(out)) < checkpoints:
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended (exit {proc.returncode}) before {checkpoints} checkpoints")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {checkpoints} checkpoints in {timeout:g} s")
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
    return out
