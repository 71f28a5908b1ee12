"""Progress bars for long work: a widget in a notebook, text in a terminal (`tqdm.auto`).

Bars live in the process that drives the work (the notebook kernel, the CLI), never in
Dask worker processes: a worker's stderr is the worker's log, and a bar there is noise.
`wb.run` and `wb.sweep` draw one by default (`progress=False` silences them); dataset
downloads draw one through pooch.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..config import RunConfig
from ..measure import LiveSteady
from ..results.records import RecordBatch, RunTally
from ..util.bars import bars_allowed

__all__ = ["bars_allowed", "RunProgress", "tee"]


def _tqdm() -> Any:
    from tqdm.auto import tqdm  # a widget under Jupyter (ipywidgets), text elsewhere
    return tqdm


class RunProgress:
    """One run's bar, fed from the record stream (`on_record`).

    Counts epochs (the records' `epoch`, reached by any worker) or, when the config sets
    `steps`, global steps; shows the last loss, once evaluated the test accuracy, and once
    the steady state is reached the steady samples/s so far (`workbench.measure.LiveSteady`:
    the summary's definition, warm-up excluded), recomputed at most once a second.
    """

    def __init__(self, config: RunConfig, desc: str | None = None, leave: bool = True):
        tqdm = _tqdm()
        self.by_steps = config.steps is not None
        total = config.steps if self.by_steps else config.epochs
        unit = "step" if self.by_steps else "epoch"
        fmt = ("{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} steps [{elapsed}<{remaining}{postfix}]"
               if self.by_steps else
               "{desc}: {percentage:3.0f}%|{bar}| {n:.2f}/{total:g} epochs [{elapsed}<{remaining}{postfix}]")
        self.bar = _bar(tqdm, total=total, desc=desc or config.algorithm, unit=unit, leave=leave,
                        bar_format=fmt, dynamic_ncols=True)
        self.done = 0.0
        self.postfix: dict[str, str] = {}
        self.tally = RunTally()
        self.steady = LiveSteady()

    def __call__(self, records: Iterable[dict]) -> None:
        if not isinstance(records, RecordBatch):   # on_record hands over columns; a caller may pass dicts
            records = list(records)
        t = self.tally
        acc_before = t.test_accuracy
        t.add(records)                 # the accumulator the dashboard's status line reads too
        reached = max(self.done, float(t.steps_seen if self.by_steps else t.epoch))
        if t.test_accuracy is not None and t.test_accuracy is not acc_before:
            self.postfix["acc"] = f"{t.test_accuracy:.3f}"
        has_steps = records.n_steps if isinstance(records, RecordBatch) else any(r.get("kind") == "step" for r in records)
        loss = t.loss if has_steps else None
        if loss is not None:
            self.postfix["loss"] = f"{loss:.4f}"
            self.steady.add(records)
            rate = self.steady.recent_rate()
            if rate is not None:
                self.postfix["samples/s"] = f"{rate:,.0f}"
        if reached > self.done:
            self.bar.update(min(reached, self.bar.total) - self.done)
            self.done = min(reached, self.bar.total)
        if self.postfix:
            self.bar.set_postfix(self.postfix, refresh=False)

    def close(self, status: str | None = None, samples_per_s: float | None = None, why: str = "") -> None:
        """End the bar. `samples_per_s`: the run's summary rate (steady, from every step record),
        shown in place of the live estimate, so the bar's last word is the run's own number;
        `why`: what ended a failed or diverged run (`RunResult.why`), after its status."""
        if samples_per_s is not None and samples_per_s == samples_per_s:
            self.postfix["samples/s"] = f"{samples_per_s:,.0f}"
            self.bar.set_postfix(self.postfix, refresh=False)
        if status is not None and status != "completed":
            self.postfix["status"] = f"{status} ({why})" if why else status
            self.bar.set_postfix(self.postfix, refresh=False)
        self.bar.close()

    def final_line(self) -> str:
        """The bar as one line of text (its state now)."""
        return str(self.bar)


def _is_widget_class(cls: Any) -> bool:
    """Whether `tqdm.auto` chose the notebook's widget bar (a kernel with ipywidgets)."""
    try:
        from tqdm.notebook import tqdm_notebook
    except ImportError:      # no ipywidgets: tqdm.auto draws text
        return False
    return isinstance(cls, type) and issubclass(cls, tqdm_notebook)


_SHOWN: dict[type, type] = {}


def _bar(tqdm: Any, **kwargs: Any) -> Any:
    """A bar of `tqdm` (tqdm.auto's choice); a notebook's widget bar is shown under a display
    id, and closing it rewrites that output's text to the bar's last state: an executed
    notebook (papermill, nbclient: no widget frontend) saved a widget bar as its text at
    creation, a frozen "0%", which the finished state now replaces. A frontend keeps drawing
    the widget, whose state says the same."""
    if not _is_widget_class(tqdm):
        return tqdm(**kwargs)
    if tqdm not in _SHOWN:
        class Shown(tqdm):
            def __init__(self, *args: Any, **kw: Any) -> None:
                from IPython.display import display
                super().__init__(*args, display=False, **kw)
                self.displayed = True
                self._handle = display(self.container, display_id=True)

            def close(self) -> None:
                handle, self._handle = getattr(self, "_handle", None), None
                line = str(self) if handle is not None else None
                super().close()
                if handle is not None:
                    handle.update({"application/vnd.jupyter.widget-view+json": {
                        "model_id": self.container.model_id, "version_major": 2, "version_minor": 0},
                        "text/plain": line}, raw=True)
        _SHOWN[tqdm] = Shown
    return _SHOWN[tqdm](**kwargs)


def tee(*callbacks: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One callback calling each given one in turn (None entries skipped; None if none).

    >>> seen = []
    >>> tee(seen.append, None, lambda r: seen.append(len(r)))(["a"])
    >>> seen
    [['a'], 1]
    """
    fns = [f for f in callbacks if f is not None]
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]

    def call(records: Any) -> None:
        for f in fns:
            f(records)
    return call


def sweep_bar(total: int, desc: str) -> Any:
    """The bar of a sweep: one tick per finished run."""
    return _bar(_tqdm(), total=total, desc=desc, unit="run", dynamic_ncols=True)
