"""The top-level calls: `run`, `load`, `sweep` (re-exported as `workbench.run` etc.)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import RunConfig
from .results import OnRecord, RunResult


def run(config: RunConfig | dict, cluster: Any = None, on_record: OnRecord | None = None,
        should_stop: Callable[[], bool] | None = None, progress: bool = True) -> RunResult:
    """Train one run and return its `RunResult`; writes the run directory if `config.out` is set.

    Args:
        config: a `RunConfig` (or a dict of its fields).
        cluster: a Dask `Client`, cluster, or scheduler address; default: a local cluster
            started (or reused) for this session. Ignored for `algorithm="sgd"`.
        on_record: called with each batch of streamed records (live plots).
        should_stop: polled by the client; returning True stops the run within a second.
        progress: draw a progress bar (epochs or steps, last loss, test accuracy): a
            widget in a notebook, text in a terminal. False for none.
    """
    if not isinstance(config, RunConfig):
        config = RunConfig.from_dict(dict(config))
    bar = None
    if progress:
        from .progress import RunProgress, bars_allowed, tee
        if bars_allowed():
            bar = RunProgress(config)
            on_record = tee(bar, on_record)
    result = None
    try:
        if config.algorithm == "sgd":
            from .reference import train_reference
            result = train_reference(config, on_record=on_record, should_stop=should_stop)
        else:
            from .engine import run as engine_run
            result = engine_run(config, cluster=cluster, on_record=on_record, should_stop=should_stop)
    finally:
        if bar is not None:
            bar.close(result.status if result is not None else "failed")
    from .provenance import git_state
    result.summary.update(git_state())  # which code produced it: commit and dirty flag, or None
    if config.out:
        save(result, config.out)
    return result


def save(result: RunResult, directory: str | Path) -> Path:
    """Write the run directory, with report.html when plotly is installed."""
    path = result.save(directory)
    try:
        from .ui.report import write_report
    except ImportError:  # the `lab` extra is not installed: the data files are what matter
        return path
    write_report(result, path / "report.html")
    return path


def load(directory: str | Path) -> RunResult:
    """Read a run directory."""
    return RunResult.load(directory)


def sweep(config: RunConfig | dict, workers: Any = (1, 2, 4), mode: str = "strong", **kwargs: Any) -> Any:
    """Strong or weak scaling sweep over worker counts: see `workbench.sweep.sweep`
    (`progress=False` silences its bar)."""
    from .sweep import sweep as _sweep
    return _sweep(config, workers=workers, mode=mode, **kwargs)
