"""The interactive dashboard: a control for every knob, Run / Stop, live plots, scaling sweeps.

In a notebook, `Dashboard()` as a cell's value shows it. Without a frontend (papermill,
tests) the same object runs from code:

>>> import workbench as wb
>>> dash = Dashboard(cluster="threads", config=wb.RunConfig(algorithm="sync_sgd", steps=3))
>>> dash.run()
True
>>> dash.wait(60).status
'completed'

The only ipywidgets code of workbench. Every control is named after, and maps onto,
the `RunConfig` field of the same name (`CONTROL_FIELDS`), carries that field's
description as its tooltip (`config.field_help`, the text `--help` shows too), and sits
in the field's group (`config.FIELD_GROUPS`); an algorithm's or a dataset's own knobs
are shown only when they apply. The one field without a control, `out`, is named in
LEFT_TO_CODE. What the controls say is validated as a whole on every change, and a bad
combination shows its `ConfigError` text in the status line (never a traceback).

Threads: a run trains on a background thread (`workbench.run`), so the kernel stays
responsive and Stop works. Records arrive on the run's own thread, where `on_record`
only appends them to a buffer. A second thread wakes FLUSH_S times a second: it takes
the new records (a cheap count of steps, samples and their clock), rewrites the status
line (step, epoch, samples/s and an ETA from the rate over the last RATE_WINDOW_S of
the run's own clock), and redraws the live FigureWidgets when due: at least every
MAX_REDRAW_S, more often only while drawing costs under FLUSH_BUDGET of a core (CPU
time, which other processes on a busy machine do not inflate). Each redraw costs about
the same however long the run: workers stream at most `results.LIVE_ROWS` step blocks
each over a whole run, and a trace keeps at most `figures.LIVE_POINTS`. Widgets are never touched from the
training thread.

Before the first step a run shows its start-up as its own phase ("starting: cluster",
"starting: placing data ..."); its curves start at the first step (t = 0).

FigureWidgets inside ipywidgets containers need their whole state re-sent before they
are first shown (`plotly_widget.sync_widget`); the dashboard does that when it is displayed
and when the live plots appear at the first run. Once shown, a figure's edits wait
until its frontend can take them (`FigureSlot`).
"""
from __future__ import annotations

import dataclasses
import functools
import html
import math
import os
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import anywidget  # noqa: F401  (the live figures' widget, ui/plotly_widget.py)
    import ipywidgets as widgets
    import plotly  # noqa: F401
except ImportError as _exc:      # the lab extra: one line that says so, not a bare ModuleNotFoundError
    from ..util.extras import missing_extra
    raise missing_extra("the dashboard", _exc) from None
import pandas as pd

from .. import measure
from ..analysis.sweep import describe_calibration  # noqa: F401 - the scaling tab's sentences
from ..config import (
    GROUP_TITLES,
    SIM_FIELDS,
    ConfigError,
    RunConfig,
)
from ..problem import Problem
from ..results import RecordBatch, RunTally, free_run_dir
from ..util.blas import rule_text
from . import figdata
from . import figures as F
from .controls import (  # noqa: F401 - the control table, as the dashboard has always named it
    CONTROL_FIELDS,
    CONTROL_WIDTH,
    CONTROLS,
    DEPENDENTS,
    GPU_COUNTS,
    LEFT_TO_CODE,
    POWERS_OF_TWO,
    RELEVANT,
    AutoFloat,
    Control,
    Dependent,
    in_process,
    label_of,
    lr_follows,
    preview_n_train,
    sorted_options,
    tooltip_on_label,
    workers_of,
)
from .plotly_widget import Figures, FigureSlot
from .report import differing_config, lab_href, runs_html, summary_table  # noqa: F401 - the runs tab's table and links

STOP_PROMISE_S = 1.0     # Stop: "stopped" in the status line this soon (the tooltip's promise; dashbench times it)
FLUSH_S = 0.25           # the status line follows 4 times a second ...
MAX_REDRAW_S = 1.0       # ... every live figure redraws at least once a second ...
FLUSH_BUDGET = 0.03      # ... and more often only while drawing costs under ~3% of a core (CPU time)
RATE_WINDOW_S = 10.0     # the ETA: step rate over the last 10 s of the run's own clock
DEFAULT_ALGORITHM = "sync_sgd"   # the dashboard starts on a parallel algorithm (sgd is the reference)
# The first run a new user sees: long enough (5-15 s on 2 cores) for a curve in every panel;
# the RunConfig defaults alone (softmax, 5 epochs: 220 steps) were over in 0.1 s.
DEFAULT_RUN = {"algorithm": DEFAULT_ALGORITHM, "model": "mlp", "hidden": [512, 256], "epochs": 40.0}
PREVIEW_TITLE_CHARS = 46  # the lr preview's title (the schedule in words) wraps at this many characters:
                          # one line ran past its 340 px figure ("... gradual warmup 44 steps, constant over ...")
DEFAULT_SMOOTHING = 0.6  # EMA weight of the live train-loss line (TensorBoard's default)
KEEP_RUNS = 20           # a long session's loss plots keep this many runs' curves (older ones thinned and faded)


# ------------------------------------------------------------------------------ runs
class _Buffer:
    """Records handed over from the training thread; taking them is atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list = []

    def add(self, records: Any) -> None:
        """One `on_record` batch (a columnar `results.RecordBatch`), kept as it came."""
        with self._lock:
            self._items.append(records)

    def take(self) -> RecordBatch:
        """Every batch since the last take, as one columnar batch."""
        with self._lock:
            items, self._items = self._items, []
        return RecordBatch.join(items)


@dataclass
class _Run:
    """One run started from the dashboard, while it lasts."""

    index: int
    config: RunConfig
    total_steps: int
    live: figdata.LiveState
    buffer: _Buffer = field(default_factory=_Buffer)
    done: threading.Event = field(default_factory=threading.Event)
    t0: float = field(default_factory=time.monotonic)   # Run pressed
    phase: str = "starting"            # "starting: <what>" until the first step, then "running"
    pending: list = field(default_factory=list)          # record batches taken, not drawn yet
    lock: threading.Lock = field(default_factory=threading.Lock)   # pending: status thread -> draw thread
    tally: RunTally = field(default_factory=lambda: RunTally(window_s=RATE_WINDOW_S))   # steps, epoch, samples, rate
    first_seen: float | None = None    # monotonic time the first step arrived here
    redraws: int = 0
    redraw_log: list = field(default_factory=list)       # (start, end) of each timed redraw, monotonic
    plot_cpu_s: float = 0.0            # CPU time the flusher spent drawing this run
    result: Any = None
    error: BaseException | None = None
    ended: dict | None = None          # the run's summary once it is saved, before its records are here (simproc)
    changed: threading.Event = field(default_factory=threading.Event)   # done or ended: the status loop wakes

    def take(self) -> None:
        """Move the buffer's records to `pending` and count them (`results.RunTally`)."""
        records = self.buffer.take()
        if not records:
            return
        with self.lock:
            self.pending.append(records)
        self.tally.add(records)
        if self.first_seen is None and self.tally.first_start is not None:
            self.first_seen, self.phase = time.monotonic(), "running"

    def rates(self) -> tuple[float, float] | None:
        """(steps/s, samples/s) over the last RATE_WINDOW_S of the run's clock (`RunTally.rates`)."""
        return self.tally.rates()

    # the tally's counts, under the names the status line reads
    steps_seen = property(lambda self: self.tally.steps_seen)
    epoch = property(lambda self: self.tally.epoch)
    samples = property(lambda self: self.tally.samples)
    first_time = property(lambda self: self.tally.first_start)
    last_time = property(lambda self: self.tally.last_time)


class Dashboard:
    """Controls for every knob, Run / Stop, live plots, a runs table and a scaling tab.

    Args:
        cluster: passed to `workbench.run` (a Client, a cluster, an address, "threads";
            default: the session's local cluster, `workbench.client()`).
        config: the starting values (default `RunConfig(algorithm="sync_sgd")`).
        out: a folder; each run is then saved to out/run-<k>-<algorithm>.

    Usable without a frontend: `config`, `run()`, `stop()`, `wait(timeout)`,
    `sweep(workers, mode)`, `history`, `runs_table()`, `status_text`.
    """

    sim_in_child = True     # simulated runs in a child process (`simproc`); False: on a thread of the kernel

    def __init__(self, cluster: Any = None, config: RunConfig | None = None, out: str | os.PathLike | None = None):
        self.cluster = cluster
        self.out = None if out is None else Path(out)
        self._base = (config or RunConfig(**DEFAULT_RUN)).replace(out=None)
        self.history: list[Any] = []            # RunResults of this session, in order
        self.plot_errors: list[str] = []        # live-plot failures (shown in the status line too)
        self.report_errors: list[str] = []      # report.html failures (the status line says so)
        self.last_error: BaseException | None = None
        self.last_plot_cpu_s = 0.0              # CPU seconds the last run's live plots took
        self.last_redraws = 0                   # how often the last run's figures were redrawn
        self.last_redraw_log: list[tuple[float, float]] = []   # ... and when: (start, end), monotonic
        self.status_log: list[tuple[float, str]] = []   # (seconds since Run, status line) of the last run
        self.sweep_table = pd.DataFrame()
        self.status_text = ""
        self.dask_link: str | None = None
        self._stop = threading.Event()
        self._active: threading.Thread | None = None   # the flusher of a run, or a sweep's thread
        self._current: _Run | None = None
        self._last: Any = None
        self._runs_started = 0
        self._syncing = False
        self._displayed = False                          # the dashboard has been shown in a frontend
        self._shown_config: RunConfig | None = None     # the config the preview and status show
        self._sweep_results: list[Any] = []
        self._progress_kinds: set[bool] = set()         # simulated or not, of the runs in the progress plots
        self._time_axes: dict[str, bool | str] = {}     # live figure -> what its time axis says (mark_virtual)
        self.predicted: pd.DataFrame | None = None      # the last sweep's cost-model curves
        self.calibration: Any = None                    # ... and the calibration behind them
        self._sim_warmed = False                        # the simulation's fork server started (simproc.warm)
        self._labels: list[str] = []                    # the name of each run in `history` (legend, status, runs tab)
        self._previous: dict | None = None              # the last run's config: its successor's name says what changed
        self._off_axis: set[str] = set()                # runs kept off the loss axis's range (diverged, loss rose)
        self._build()

    # ------------------------------------------------------------------ widgets
    def _build(self) -> None:
        base = self._base
        self.controls: dict[str, Any] = {}
        groups: dict[str, list] = {g: [] for g in GROUP_TITLES}
        for c in CONTROLS:
            w = tooltip_on_label(c.make(c.from_field(getattr(base, c.field))))
            w.observe(self._on_change, names="value")
            self.controls[c.field] = w
            groups[c.group].append(w)
        left_out = "; ".join(f"<code>{k}</code>: {html.escape(v)}" for k, v in LEFT_TO_CODE.items())
        sections = []
        for g, ws in groups.items():
            if ws:
                sections.append(widgets.HTML(f"<b>{GROUP_TITLES[g]}</b>", layout=widgets.Layout(margin="6px 0 0 0")))
                sections.extend(ws)
        sections.append(widgets.HTML(f"<small>Hover a control for what it means. Left to code: {left_out}.</small>",
                                     layout=widgets.Layout(width=CONTROL_WIDTH)))

        self.run_button = widgets.Button(description="Run", button_style="success", icon="play",
                                         tooltip="train the controls' config; live plots follow")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True,
                                          tooltip=f"end the run: the status says stopped within about {STOP_PROMISE_S:g} s "
                                                  f"(more on a busy machine); it is kept as stopped")
        self.clear_button = widgets.Button(description="Clear plots", tooltip="forget earlier runs' curves")
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.clear_button.on_click(lambda _: self.clear())
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="240px"))
        self.status = widgets.HTML(value="")
        self.links = widgets.HTML(value="")
        self.smoothing = widgets.FloatSlider(value=DEFAULT_SMOOTHING, min=0.0, max=0.99, step=0.01,
                                             description="smoothing", readout_format=".2f",
                                             tooltip="exponential moving average of the train-loss line "
                                                     "(0: raw points only; the raw points stay, faded)",
                                             style={"description_width": "70px"},
                                             layout=widgets.Layout(width="330px", flex="0 0 auto"))
        self.smoothing.observe(self._on_smoothing, names="value")
        self.log_loss = widgets.Checkbox(value=True, description="log loss", indent=False,
                                         tooltip="the loss axis on a log scale (a warm-up spike flattens a linear one)",
                                         layout=widgets.Layout(width="100px", flex="0 0 auto"))
        self.log_loss.observe(self._on_log_loss, names="value")

        self._slots = {k: FigureSlot(F.live_base(k, workers_of(base) if k == "breakdown" else 1))
                       for k in figdata.FIGURE_KEYS}
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].fig.layout.height = 460
            F.set_loss_scale(self._slots[key].fig, self.log_loss.value)
        for key in ("throughput", "lr"):
            self._slots[key].fig.layout.height = 300
        self.figures: Mapping[str, Any] = Figures(self._slots)
        self._lineage_box = self._slots["lineage"].box    # shown for ltfb only
        self._plot_boxes = [
            widgets.HBox([self.log_loss, self.smoothing,
                          widgets.HTML("<small>A legend entry shows or hides its run (double-click: only "
                                       "that run); drag to zoom, double-click to reset.</small>")],
                         layout=widgets.Layout(align_items="center", flex_flow="row wrap")),
            self._slots["progress_time"].box, self._slots["throughput"].box, self._slots["breakdown"].box,
            self._slots["lr"].box, self._slots["progress_epoch"].box, self._lineage_box]
        self.plots = widgets.VBox([widgets.HTML(
            "<p style='color:#666'>Live plots appear here when a run starts: loss and test accuracy, "
            "throughput per worker, where each worker's time goes, the lr actually used.</p>")],
            layout=widgets.Layout(flex="1 1 auto", min_width="0"))

        from ..util.machine import usable_cores
        cpus = usable_cores()   # affinity and CPU quota: a Binder pod's 2, not its host's 64
        default_ws = ",".join(str(w) for w in POWERS_OF_TWO if w <= cpus) or "1"
        self.sweep_workers = widgets.Text(value=default_ws, description="workers",
                                          tooltip="worker counts, comma-separated: one run each",
                                          style={"description_width": "60px"}, layout=widgets.Layout(width="200px"))
        self.sweep_mode = widgets.ToggleButtons(options=["strong", "weak"], value="strong",
                                                tooltips=["strong: the same global batch split over more workers",
                                                          "weak: the same batch per worker (global batch grows)"],
                                                style={"button_width": "64px"},
                                                layout=widgets.Layout(width="auto"))
        from ..analysis.costmodel import NETWORKS
        self.sweep_network = widgets.Dropdown(options=list(NETWORKS), value="10GbE", description="network",
                                              tooltip="a network to predict for, besides the calibrated one",
                                              style={"description_width": "60px"}, layout=widgets.Layout(width="200px"))
        self.sweep_button = widgets.Button(description="Sweep", button_style="info", icon="line-chart",
                                           tooltip="run the controls' config on each worker count")
        self.sweep_button.on_click(lambda _: self.sweep())
        self._scaling_slot = FigureSlot(F.scaling_figure(
            pd.DataFrame(columns=["workers", "samples_per_s", "efficiency"]), live=True))
        self.sweep_html = widgets.HTML("", layout=widgets.Layout(width="100%"))
        self.model_html = widgets.HTML("", layout=widgets.Layout(width="100%"))
        scaling = widgets.VBox([
            widgets.HTML("Run the controls' config on each worker count; the figure gains a point as each "
                         "run ends, then the cost model's predictions (calibrated on these runs, and for the "
                         "network picked) are drawn over them."),
            widgets.HBox([self.sweep_workers, widgets.Label("mode"), self.sweep_mode, self.sweep_network,
                          self.sweep_button], layout=widgets.Layout(flex_flow="row wrap", align_items="center")),
            self.model_html, self._scaling_slot.box, self.sweep_html], layout=widgets.Layout(width="100%"))
        self._scaling_slot.box.layout.display = "none"      # no empty axes before the first sweep

        self.runs_sort = widgets.Dropdown(options=["run"], value="run", description="sort by",
                                          tooltip="the column to sort the runs by",
                                          style={"description_width": "50px"}, layout=widgets.Layout(width="260px"))
        self.runs_descending = widgets.ToggleButton(value=False, description="descending", icon="sort",
                                                    tooltip="largest first", layout=widgets.Layout(width="120px"))
        self.runs_sort.observe(lambda _: self._show_runs(), names="value")
        self.runs_descending.observe(lambda _: self._show_runs(), names="value")
        self.runs_html = widgets.HTML(value="<i>no runs yet</i>", layout=widgets.Layout(width="100%"))
        runs = widgets.VBox([widgets.HBox([self.runs_sort, self.runs_descending]), self.runs_html],
                            layout=widgets.Layout(width="100%"))

        self._preview_slot: FigureSlot | None = None
        self._refresh()                                   # validates, says "ready" or what is wrong
        self._preview_slot = FigureSlot(F.as_widget(self._preview_figure(self._shown_config)))
        self._preview_slot.box.layout.width = CONTROL_WIDTH
        controls = widgets.VBox([*sections, self._preview_slot.box],
                                layout=widgets.Layout(width="370px", min_width="370px", max_height="820px",
                                                      overflow="hidden auto", padding="0 8px 0 0"))
        run_tab = widgets.HBox([controls, self.plots], layout=widgets.Layout(width="100%"))
        self.why_html = widgets.HTML("<i>after a run: what limits it (workbench explain)</i>",
                                     layout=widgets.Layout(width="100%"))
        why = widgets.VBox([widgets.HTML(
            "Why the last run is as fast as it is: its step decomposed, compared with 1 worker (the last run of "
            "the same config on another worker count, or the 1-worker step the cost model predicts), and what "
            "would change the answer. The same text as <code>python -m workbench explain RUN [RUN]</code>."),
            self.why_html], layout=widgets.Layout(width="100%"))
        self.tabs = widgets.Tab(children=[run_tab, scaling, runs, why])
        self.tabs.titles = ("run", "scaling", "runs", "why")
        bar = widgets.HBox([self.run_button, self.stop_button, self.clear_button, self.progress, self.links],
                           layout=widgets.Layout(align_items="center", flex_flow="row wrap"))
        self.widget = widgets.VBox([bar, self.status, self.tabs])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self._displayed = True
        for slot in self._all_slots():        # see plotly_widget.sync_widget: nested FigureWidgets
            if slot is self._preview_slot or (slot is self._scaling_slot and self._scaling_slot.box.layout.display
                                              != "none") or (slot in self._slots.values() and self._plots_live()):
                slot.shown()                  # show stale state unless it is sent again
        return self.widget._repr_mimebundle_(**kwargs)

    def _plots_live(self) -> bool:
        return self.plots.children and self.plots.children[0] is self._plot_boxes[0]

    def _show_plots(self) -> None:
        """Put the live figures on the page (the first run); until then there is nothing to plot."""
        if self._plots_live():
            return
        if self._displayed:
            for slot in self._slots.values():
                slot.shown()
        self.plots.children = tuple(self._plot_boxes)

    @property
    def preview(self) -> Any:
        """The lr-schedule preview FigureWidget."""
        return None if self._preview_slot is None else self._preview_slot.fig

    @property
    def scaling_figure(self) -> Any:
        """The scaling tab's FigureWidget."""
        return self._scaling_slot.fig

    def _all_slots(self) -> list[FigureSlot]:
        return [s for s in (self._preview_slot, self._scaling_slot, *self._slots.values()) if s is not None]

    def _figure_widgets(self) -> list[Any]:
        return [s.fig for s in self._all_slots()]

    # ------------------------------------------------------------------ config
    def _values(self) -> dict[str, Any]:
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        if not values.get("simulate"):
            # The simulated cluster's knobs are valid only with it (RunConfig refuses them
            # otherwise): off, they take their defaults; their controls keep what was set
            # for when the toggle goes on again.
            values.update({name: RunConfig.model_fields[name].default for name in SIM_FIELDS})
        return values

    @property
    def config(self) -> RunConfig:
        """The RunConfig the controls describe; raises ConfigError for a bad combination."""
        return self._base.replace(**self._values())

    @config.setter
    def config(self, config: RunConfig) -> None:
        self._base = config.replace(out=None)
        self._syncing = True
        try:
            for c in CONTROLS:
                w, value = self.controls[c.field], c.from_field(getattr(config, c.field))
                if isinstance(w, widgets.SelectionSlider) and value not in w.options:
                    w.options = sorted_options(tuple(w.options), value)
                w.value = value
        finally:
            self._syncing = False
        self._refresh()

    def _on_change(self, change: dict) -> None:
        if self._syncing:
            return
        changed = next((name for name, w in self.controls.items() if w is change.get("owner")), None)
        self._lr_note = ""
        if changed is not None:
            self._fill_dependents(changed)
            self._follow_lr(changed, change.get("old"))
        self._refresh()

    def _fill_dependents(self, changed: str) -> None:
        """Give the fields that `changed`'s new value makes required a value that passes
        validation (`DEPENDENTS`), without a refresh per field."""
        rules = [d for d in DEPENDENTS if changed in d.triggers]
        if not rules:
            return
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        self._syncing = True
        try:
            for d in rules:
                if d.needed(values):
                    c = next(c for c in CONTROLS if c.field == d.field)
                    values[d.field] = d.default(values)
                    w, value = self.controls[d.field], c.from_field(values[d.field])
                    if isinstance(w, widgets.SelectionSlider) and value not in w.options:
                        w.options = sorted_options(tuple(w.options), value)
                    w.value = value
        finally:
            self._syncing = False

    def _follow_lr(self, changed: str, old: Any) -> None:
        """A new update rule (or algorithm) moves lr to its default, and the status line says
        so (`controls.lr_follows`)."""
        values = {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}
        moved = lr_follows(changed, old, values)
        if moved is None:
            return
        self._syncing = True
        try:
            self.controls["lr"].value = moved[0]
        finally:
            self._syncing = False
        self._lr_note = moved[1]

    def _show_relevant(self) -> None:
        """Show the controls that apply to what the controls say now, valid or not (a
        control that would fix an invalid combination must be on the page)."""
        values = {**self._base.model_dump(), **self._values()}
        raw = RunConfig.model_construct(**values)      # unvalidated: `applies` reads plain fields
        for name, applies in RELEVANT.items():
            try:
                show = applies(raw)
            except Exception:         # a half-typed value: keep the control visible
                show = True
            self.controls[name].layout.display = None if show else "none"
        # "auto" (detect the GPUs) is no choice on a simulated cluster, which counts them
        gpus = self.controls["gpus"]
        options = list(GPU_COUNTS) if values.get("simulate") else [("auto", "auto"), *GPU_COUNTS]
        if [v for _, v in gpus._options_full] != [v for _, v in options]:
            was, self._syncing = self._syncing, True
            try:
                value = gpus.value
                gpus.options = options
                gpus.value = value if value != "auto" or not values.get("simulate") else 0
            finally:
                self._syncing = was

    def _refresh(self) -> RunConfig | None:
        """Validate the controls; redraw the schedule preview; say what is wrong, if anything.

        Leaves the status line alone when the config did not change (a frontend echoing
        a control's value back must not hide the last run's result)."""
        self._show_relevant()
        try:
            cfg = self.config
            if cfg == self._shown_config:
                return cfg
            plan = Problem.from_config(cfg).plan   # the run's own plan, built once (preflight reuses it)
        except (ConfigError, ValueError) as exc:   # DataError and schedule errors are ValueErrors
            self._shown_config = None
            self._set_status(f"error: {exc}", error=True)
            self._set_buttons(self.running)
            return None
        self._shown_config = cfg
        if cfg.simulate and self.sim_in_child and not self._sim_warmed:   # ready before Run is pressed
            from . import simproc
            self._sim_warmed = True
            simproc.warm()
        self.controls["alpha"].show_resolved(cfg.resolved_alpha(max(1, workers_of(cfg))))
        self._lineage_box.layout.display = "block" if cfg.algorithm == "ltfb" else "none"
        if self._preview_slot is not None:
            def redraw(fig: Any, series: list = figdata.planned_series(plan), title: str = plan.schedule_text) -> None:
                F.extend_series(fig, series)
                fig.layout.title.text = F.wrap_title(f"lr schedule: {title}", PREVIEW_TITLE_CHARS)
            self._preview_slot.edit(redraw)
        if not self.running:
            self._set_buttons(False)
            where = f", on {workers_of(cfg)} simulated workers" if cfg.simulate else ""
            self._set_status(f"ready: {cfg.algorithm} on {cfg.dataset}, {plan.total_steps} steps "
                             f"of {cfg.batch_size} samples{where}"
                             + (f"; {self._lr_note}" if getattr(self, "_lr_note", "") else ""))
        return cfg

    @staticmethod
    def _preview_figure(cfg: RunConfig | None) -> Any:
        """The schedule preview as a static figure (the widget is made from it once)."""
        fig = F.schedule_figure(Problem.from_config(cfg).plan) if cfg is not None else F._lr_base()
        title = f"lr schedule: {fig.layout.title.text}" if cfg is not None else "lr schedule"
        return fig.update_layout(height=250, margin={"t": 60, "b": 30, "l": 50, "r": 10},
                                 title=F.wrap_title(title, PREVIEW_TITLE_CHARS),
                                 title_font_size=11, showlegend=False)

    def _set_status(self, text: str, error: bool = False) -> None:
        state = self._current
        if state is not None:      # the run's status lines, timed from its Run (dashbench reads them)
            self.status_log.append((round(time.monotonic() - state.t0, 3), text))
        self.status_text = text
        color = "#b00020" if error else "#333"
        self.status.value = f'<span style="color:{color}">{html.escape(text, quote=False)}</span>'

    def _set_dask_link(self, client: Any) -> None:
        from ..execution.cluster import dashboard_link
        link = dashboard_link(client) if client is not None and not isinstance(client, str) else None
        if link and link != self.dask_link:
            self.dask_link = link
            self.links.value = (f'<a href="{html.escape(link)}" target="_blank" rel="noopener" '
                                f'title="the Dask dashboard of the cluster the runs use: tasks, workers, memory">'
                                f'Dask dashboard &#8599;</a>')

    # ------------------------------------------------------------------ running
    @property
    def running(self) -> bool:
        """Whether a run or a sweep is in progress."""
        return self._active is not None and self._active.is_alive()

    def _config_to_start(self) -> RunConfig | None:
        """The controls' config if nothing is running and it is valid; else None, with
        the reason in the status line."""
        if self.running:
            self._set_status("busy: a run or sweep is in progress; Stop it first", error=True)
            return None
        return self._refresh()

    def run(self) -> bool:
        """Start a run of the controls' config in the background (the Run button).

        Returns:
            True if it started; False if the config is invalid or something is running
            (the status line says why).
        """
        cfg = self._config_to_start()
        if cfg is None:
            return False
        index = self._runs_started
        self._runs_started += 1
        if self.out is not None:
            cfg = cfg.replace(out=str(free_run_dir(self.out, f"run-{index + 1}-{cfg.algorithm}")))
        label = figdata.run_name(index, cfg.to_dict(), workers_of(cfg), self._previous)   # what changed, named
        self._previous = cfg.to_dict()
        state = _Run(index=index, config=cfg, total_steps=Problem.from_config(cfg).plan.total_steps,
                     live=figdata.LiveState(label=label, color=figdata.run_color(index), n_workers=workers_of(cfg)))
        self._show_plots()
        self._reset_run_figures(state)
        self._stop.clear()
        self._current = state
        self.status_log = []
        self._set_buttons(running=True)
        self._set_status(f"starting {state.live.label} ...")
        trainer = threading.Thread(target=self._train, args=(state,), name="workbench-dashboard-run", daemon=True)
        flusher = threading.Thread(target=self._flush_loop, args=(state,), name="workbench-dashboard-plots",
                                   daemon=True)
        self._active = flusher
        trainer.start()
        flusher.start()
        return True

    def stop(self) -> None:
        """Ask the run (or sweep) to stop; it ends within about STOP_PROMISE_S, as "stopped"."""
        self._stop.set()
        if self.running:
            self._set_status("stopping ...")

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the current run or sweep has ended and the plots are final.

        Args:
            timeout: seconds; None waits as long as it takes.
        Returns:
            The run's RunResult (None if it failed: see the status line and
            `last_error`), or a sweep's table.
        Raises:
            TimeoutError: still running after `timeout` seconds.
            KeyboardInterrupt: the kernel was interrupted; the run was asked to stop first.
        """
        thread = self._active
        if thread is not None:
            try:
                thread.join(timeout)
            except KeyboardInterrupt:   # interrupting the kernel while waiting stops the run too
                self.stop()
                thread.join(10)
                raise
            if thread.is_alive():
                raise TimeoutError(f"timeout: still running after {timeout} s (dashboard.stop() ends it)")
        return self._last

    def clear(self) -> None:
        """Forget earlier runs' curves in the loss / accuracy plots (history stays)."""
        self._progress_kinds = set()
        self._off_axis = set()
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(_clear_traces)
            self._slots[key].edit(F.fit_loss_axis)

    def _fit_loss_axes(self) -> None:
        """The loss axis over the runs drawn, leaving out the diverged ones (`F.fit_loss_axis`)."""
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(functools.partial(F.fit_loss_axis, leave_out=tuple(self._off_axis)))

    def _on_log_loss(self, change: dict) -> None:
        weight = float(self.smoothing.value)
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(functools.partial(F.set_loss_scale, log=bool(change["new"])))
            self._slots[key].edit(functools.partial(F.apply_smoothing, weight=weight))   # log or linear mean
        self._fit_loss_axes()     # the range in the new scale's units

    def _on_smoothing(self, change: dict) -> None:
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(functools.partial(F.apply_smoothing, weight=float(change["new"])))

    def _set_buttons(self, running: bool) -> None:
        invalid = self._shown_config is None     # the controls describe a bad config
        self.run_button.disabled = running or invalid
        self.sweep_button.disabled = running or invalid
        self.stop_button.disabled = not running

    def _reset_run_figures(self, state: _Run) -> None:
        """Per-run figures start empty; the breakdown gets one row per worker."""
        n = max(1, min(state.live.n_workers, figdata.MAX_WORKER_ROWS))
        breakdown = self._slots["breakdown"]
        breakdown.flush()                     # the layout checked below must be the current one
        if len(breakdown.fig.layout.annotations or ()) != n + 1:
            breakdown.replace(F.live_base("breakdown", state.live.n_workers,   # a whole new state
                                          simulated=state.config.simulate))
            self._time_axes["breakdown"] = state.config.simulate
        for key in ("throughput", "breakdown", "lr", "lineage"):
            self._slots[key].edit(_clear_traces)
        if self._labels:    # earlier runs drawn: thinned, faded, at most KEEP_RUNS of them kept
            for key in ("progress_time", "progress_epoch"):
                self._slots[key].edit(functools.partial(F.retire_runs, keep=KEEP_RUNS, current=state.live.label))
        # Time axes in virtual seconds for a simulated run; the progress plots keep earlier
        # runs' curves, so they say "virtual for simulated runs" once both kinds are drawn.
        simulated = state.config.simulate
        self._progress_kinds.add(simulated)
        overlaid = "mixed" if len(self._progress_kinds) > 1 else simulated
        for key, virtual in (("throughput", simulated), ("breakdown", simulated), ("progress_time", overlaid)):
            if self._time_axes.get(key, False) != virtual:     # an edit only when the clock changes
                self._time_axes[key] = virtual
                self._slots[key].edit(functools.partial(F.mark_virtual, virtual=virtual))

    def _train(self, state: _Run) -> None:
        from .. import api
        try:
            cluster = self.cluster
            cfg = state.config
            if cfg.simulate:      # its own virtual cluster, in a child process: no Dask cluster
                cluster = None
                state.phase = f"starting: a simulated cluster of {workers_of(cfg)} virtual worker(s)"
            elif in_process(cfg):
                state.phase = "starting: loading data"
            elif cluster is None:
                from ..execution.cluster import client, session_warm
                if not session_warm(cfg.cpus, cfg.gpus, cfg.scheduler):
                    state.phase = "starting: a local Dask cluster (the session's first run)"
                cluster = client(cfg.cpus, cfg.gpus, cfg.scheduler)      # the session's, found by dask-labextension
            from ..execution.engine import transport_for  # the one choice: simulated, threads or Dask
            transport = transport_for(cfg, cluster)   # sgd: threads, in this process
            if getattr(transport, "name", None) == "dask":
                self._set_dask_link(transport.client)
                state.phase = f"starting: placing data on {workers_of(cfg)} worker(s) and starting their loops"
            from . import simproc
            if cfg.simulate and self.sim_in_child and simproc.available():   # on a core of its own
                from .simproc import run_in_process
                state.result = run_in_process(cfg, on_record=state.buffer.add, should_stop=self._stop.is_set,
                                              report=False, on_summary=functools.partial(self._ended, state))
            else:   # report.html is rendered after the status says how the run ended (`_write_report`)
                state.result = api.run(cfg, cluster=transport, on_record=state.buffer.add,
                                       should_stop=self._stop.is_set, progress=False, report=False)
        except BaseException as exc:  # shown in the status line; the flusher reports it
            state.error = exc
        finally:
            state.done.set()
            state.changed.set()

    @staticmethod
    def _ended(state: _Run, summary: dict) -> None:
        """A run in a child process ended and was saved: the status loop says how at once,
        while its complete records travel to the kernel (`simproc.run_in_process`)."""
        state.ended = summary
        state.changed.set()

    def _flush_loop(self, state: _Run) -> None:
        """The status line, FLUSH_S times a second; the figures are redrawn on a thread of
        their own (`_draw_loop`), so a slow redraw never holds the status line up."""
        drawer = threading.Thread(target=self._draw_loop, args=(state,), name="workbench-dashboard-draw",
                                  daemon=True)
        drawer.start()
        shown_end = False
        while True:
            state.changed.wait(FLUSH_S)
            state.changed.clear()
            finished = state.done.is_set()
            state.take()
            if finished:
                break
            if state.ended is not None:
                if not shown_end:     # how the run ended, from its saved summary (its records still coming)
                    self._set_status(*self._end_status(state, state.ended))
                    shown_end = True
                continue
            self._show_progress(state)
        # The status says how the run ended as soon as its records are saved (Stop promises
        # about a second); the figures' last redraw from the complete records and the run's
        # report.html (seconds of plotly on a busy machine) follow, then Run is enabled.
        self._finish(state)
        self.stop_button.disabled = True
        drawer.join()
        self._flush(state)
        self._redraw_whole(state)
        self._fit_loss_axes()
        self._flush(state, last=True)
        self._record_drawing(state)     # again, with the redraws that were in flight at _finish
        self._write_report(state)
        self.why()                      # the "why" tab: what limits this run (analysis.explain)
        self._current = None
        self._set_buttons(running=False)

    def why(self) -> str:
        """Explain the last run (against the last run of its config on another worker count,
        when there is one: `analysis.explain.pick_runs`) in the "why" tab; returns the text."""
        from ..analysis.explain import explain, pick_runs, to_html
        runs = pick_runs(self.history)
        if not runs:
            return ""
        try:
            found = explain(runs)
        except Exception as exc:      # a run it cannot read (no steady steps, ...): said in the tab
            self.why_html.value = f"<i>{html.escape(str(exc))}</i>"
            return str(exc)
        self.why_html.value = to_html(found)
        return "\n\n".join(e.text() for e in found)

    def _write_report(self, state: _Run) -> None:
        """report.html in the run's directory (`api.write_run_report`), once the run is saved."""
        result = state.result
        directory = (result.summary.get("config") or {}).get("out") if result is not None else None
        if not directory:
            return
        from .. import api
        try:
            api.write_run_report(result, directory)
        except Exception as exc:      # the run itself is committed; the report's failure is said
            self.report_errors.append(f"{type(exc).__name__}: {exc}")
            self._set_status(f"{self.status_text}; report.html not written: {exc}", error=True)
        finally:
            api.settle_steps(result, directory)

    def _redraw_whole(self, state: _Run) -> None:
        """Redraw the run's loss, accuracy and lr traces from its complete records (every
        step, not the live batches), decimated by the same extremes-keeping rule: when a
        run ends its curves are the run directory's."""
        result = state.result
        if result is None or not len(result.steps):
            return
        try:
            whole = figdata.align_to_first_step(result)
            for key, x in (("progress_time", "time"), ("progress_epoch", "epoch")):
                series = [dataclasses.replace(s, mode="replace") for s in
                          figdata.progress_series(whole.steps, whole.evals, x, state.live.label, state.live.color)]
                self._slots[key].edit(functools.partial(F.extend_series, series=series))
            lr = [dataclasses.replace(s, mode="replace") for s in figdata.lr_series(whole.steps)]
            self._slots["lr"].edit(functools.partial(F.extend_series, series=lr))
            weight = float(self.smoothing.value)
            if weight > 0:
                for key in ("progress_time", "progress_epoch"):
                    self._slots[key].edit(functools.partial(F.apply_smoothing, weight=weight, only=state.live.label))
        except Exception as exc:      # a plotting bug must not lose the run; it is reported
            self.plot_errors.append(f"{type(exc).__name__}: {exc}")

    def _draw_loop(self, state: _Run) -> None:
        """Redraw the live figures with the records taken so far: at least every
        MAX_REDRAW_S, more often while a redraw costs under FLUSH_BUDGET of a core."""
        next_draw = 0.0
        while not state.done.is_set():
            for slot in self._slots.values():     # edits held for a view that never said it drew
                slot.apply_if_ready()
            now = time.monotonic()
            # Stopping: no redraws until the run has ended (its final redraw follows), so the
            # run's end (the loops', the save's Python) does not share the interpreter with them.
            if now < next_draw or not state.pending or self._stop.is_set():
                state.done.wait(min(FLUSH_S / 2, max(0.0, next_draw - now)) or FLUSH_S / 2)
                continue
            cost = self._flush(state)
            state.redraw_log.append((now, time.monotonic()))
            next_draw = now + min(MAX_REDRAW_S, max(FLUSH_S, cost / FLUSH_BUDGET))

    def _flush(self, state: _Run, last: bool = False) -> float:
        """Draw the records taken so far; returns the CPU seconds it took."""
        cpu = time.thread_time()
        with state.lock:
            batches, state.pending = state.pending, []
        records = RecordBatch.join(batches)
        try:
            if records:
                for key, edit in F.live_edits(records, state.live).items():
                    self._slots[key].edit(edit)
                weight = float(self.smoothing.value)
                if weight > 0:   # this run's line only: the others have not changed since their end
                    for key in ("progress_time", "progress_epoch"):
                        self._slots[key].edit(functools.partial(F.apply_smoothing, weight=weight,
                                                                only=state.live.label))
                state.redraws += 1
            if last:                  # the figures' Python state must be whole when a run ends
                for slot in self._slots.values():
                    slot.flush()
        except Exception as exc:      # a plotting bug must not end the run; it is reported
            self.plot_errors.append(f"{type(exc).__name__}: {exc}")
        cost = time.thread_time() - cpu
        state.plot_cpu_s += cost
        return cost

    def _show_progress(self, state: _Run) -> None:
        if state.done.is_set():
            return
        since_run = time.monotonic() - state.t0
        stopping = " stopping ..." if self._stop.is_set() else ""
        note = f" (plot errors: {self.plot_errors[-1]})" if self.plot_errors else ""
        if state.first_time is None:
            text = f"{state.phase} ... {since_run:.1f} s ({state.live.label}){stopping}{note}"
        else:
            done = min(1.0, state.steps_seen / max(1, state.total_steps))
            self.progress.value = done
            train_s = max(0.0, state.last_time - state.first_time)
            startup = state.first_seen - state.t0
            parts = [f"running {state.live.label}: step {state.steps_seen}/{state.total_steps} ({done:.0%})",
                     f"epoch {state.epoch:.2f}"]
            rates = state.rates()
            left = max(0, state.total_steps - state.steps_seen)
            if state.config.simulate:
                # the records' clock is virtual: the rate is the simulated cluster's, the
                # time left is the simulation's own (steps per wall second since the first)
                parts.append(f"{train_s:.3g} virtual s")
                if train_s > 0:    # over the whole run so far: virtual spans are too short for a window
                    parts.append(f"{state.samples / train_s:,.0f} samples per virtual s")
                wall = time.monotonic() - state.first_seen
                if wall > 0.5 and state.steps_seen:
                    parts.append(f"~{left * wall / state.steps_seen:,.0f} s left to simulate")
            else:
                parts.append(f"{train_s:.1f} s")
                if rates is not None:
                    steps_per_s, samples_per_s = rates
                    parts.append(f"{samples_per_s:,.0f} samples/s")
                    if steps_per_s > 0:
                        parts.append(f"~{left / steps_per_s:,.0f} s left")
            parts.append(f"start-up {startup:.1f} s")
            text = ", ".join(parts) + stopping + note
        self._set_status(text)

    def _record_drawing(self, state: _Run) -> None:
        """The last run's drawing figures (redraws, their log, their CPU time) as they stand."""
        self.last_plot_cpu_s = state.plot_cpu_s
        self.last_redraws = state.redraws
        self.last_redraw_log = list(state.redraw_log)

    def _finish(self, state: _Run) -> None:
        """The final status line, the run in `history` and the runs tab (buttons: the caller)."""
        self._last = state.result
        self._record_drawing(state)
        if state.error is not None:
            self.last_error = state.error
            self._set_status(_error_text(state.error), error=True)
        else:
            r = state.result
            self.history.append(r)
            self._labels.append(state.live.label)
            s = r.summary
            if s.get("status") == "diverged" or str(s.get("learning_note") or "").startswith(
                    "did not learn: the training loss rose"):
                self._off_axis.add(state.live.label)
            text, error = self._end_status(state, r.summary)
            if text != self.status_text:      # said already when the run ended in a child process
                self._set_status(text, error=error)
            self._show_runs()

    def _end_status(self, state: _Run, s: dict) -> tuple[str, bool]:
        """The final status line of a run with summary `s`, and whether it reads as an error;
        the progress bar set to the steps it ran."""
        acc = s.get("final_test_accuracy")
        startup = s.get("startup_s")   # the summary's (measure.timing), not when records first arrived here
        train_s = s.get("train_time_s", s.get("wall_time_s", 0)) or 0
        self.progress.value = min(1.0, s.get("steps", 0) / max(1, state.total_steps))
        if s.get("simulated"):
            took = f"{train_s:.3g} virtual s (simulated in {s.get('sim_wall_s', 0):.1f} s)"
            rate = f"{s.get('samples_per_s', 0):,.0f} samples per virtual s"
        else:   # the one BLAS rule (util.blas), said where the rate is
            took, rate = f"{train_s:.1f} s", f"{s.get('samples_per_s', 0):,.0f} samples/s ({rule_text(s.get('blas_threads'))})"
        return (f"{s['status']}: {state.live.label}, {s.get('steps')} steps in {took}"
                + (f" (start-up {startup:.1f} s)" if startup is not None else "")
                + f", {rate}, "
                f"test accuracy {'n/a' if acc is None else f'{acc:.4f}'}, "
                f"comm fraction {s.get('comm_fraction', 0):.2f}"
                + "".join(f"; {n}" for n in measure.notes(s)),   # busy machine, no steady state
                s["status"] in ("failed", "diverged"))

    # ------------------------------------------------------------------ runs tab
    def runs_table(self) -> pd.DataFrame:
        """The session's runs, one row each: headline numbers, the hyper-parameters that
        differ between them, and each run's directory (the runs tab shows it)."""
        labels = self._labels if len(self._labels) == len(self.history) else None   # the names the status line said
        table = summary_table(self.history, labels=labels)
        if not len(table):
            return table
        diff = differing_config([r.summary.get("config") or {} for r in self.history])
        diff = diff.drop(columns=[c for c in diff.columns if c in table.columns or c == "out"])
        table = pd.concat([table.iloc[:, :1], diff, table.iloc[:, 1:]], axis=1)
        table["run_dir"] = [(r.summary.get("config") or {}).get("out") for r in self.history]
        return table

    def _show_runs(self) -> None:
        table = self.runs_table()
        if not len(table):
            return
        options = [c for c in table.columns if c != "run_dir"]
        if list(self.runs_sort.options) != options:
            keep = self.runs_sort.value if self.runs_sort.value in options else "run"
            self.runs_sort.options = options
            self.runs_sort.value = keep
        self.runs_html.value = runs_html(table, self.runs_sort.value, self.runs_descending.value)

    # ------------------------------------------------------------------ scaling
    def sweep(self, workers: Any = None, mode: str | None = None, network: str | None = None) -> bool:
        """Start a scaling sweep of the controls' config in the background (the Sweep button).

        Args:
            workers: worker counts (default: the scaling tab's, e.g. "1,2,4").
            mode: "strong" or "weak" (default: the tab's).
            network: a costmodel.NETWORKS name for the predicted curve (default: the tab's).
        Returns:
            True if it started (the status line says why not).
        """
        cfg = self._config_to_start()
        if cfg is None:
            return False
        from ..analysis.sweep import sweep_configs, worker_field
        ws = workers if workers is not None else [p for p in self.sweep_workers.value.replace(" ", "").split(",") if p]
        mode = mode or self.sweep_mode.value
        network = network or self.sweep_network.value
        try:
            configs = sweep_configs(cfg, ws, mode)          # every run checked before the first starts
        except (ConfigError, ValueError) as exc:
            self._set_status(f"error: {exc}", error=True)
            return False
        ws = [getattr(c, worker_field(cfg)) for c in configs]
        self.sweep_table = pd.DataFrame()
        self._sweep_results = []
        self.model_html.value = ""
        self.sweep_html.value = ""           # the table under the figure is this sweep's, from its first point
        if self._scaling_slot.box.layout.display == "none":
            if self._displayed:
                self._scaling_slot.shown()
            self._scaling_slot.box.layout.display = "block"
        def reset(fig: Any, title: str = f"{mode} scaling: {cfg.algorithm}") -> None:
            fig.data = ()
            fig.layout.title.text = title
        self._scaling_slot.edit(reset)
        self._stop.clear()
        self._set_buttons(running=True)
        self._set_status(f"sweep: {cfg.algorithm} on {ws} workers ({mode}) ...")
        thread = threading.Thread(target=self._sweep_main, args=(cfg, ws, mode, network),
                                  name="workbench-dashboard-sweep", daemon=True)
        self._active = thread
        thread.start()
        return True

    def _on_sweep_result(self, row: dict, result: Any) -> None:
        """Called by the sweep after each run: one more point on the scaling figure."""
        from ..analysis.sweep import SWEEP_COLUMNS, add_scaling
        self._sweep_results.append(result)
        self.history.append(result)
        self._labels.append(f"#{len(self.history)} sweep {figdata.run_label(result)}")
        # a later round's row (the median so far) replaces that worker count's point
        rows = [r for r in self.sweep_table.to_dict("records") if r["workers"] != row["workers"]] + [row]
        rows.sort(key=lambda r: r["workers"])
        self.sweep_table = add_scaling(pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)))
        self._scaling_slot.edit(functools.partial(F.update_scaling, table=self.sweep_table))
        self.sweep_html.value = runs_html(self.sweep_table, "workers", False)
        if not row.get("simulated"):
            from ..execution.cluster import current_client
            self._set_dask_link(self.cluster if self.cluster is not None else current_client())
        self._show_runs()
        unit = "samples per virtual s" if row.get("simulated") else "samples/s"
        self._set_status(f"sweep: {len(self._sweep_results)} run(s) done, last on {row['workers']} "
                         f"{'virtual ' if row.get('simulated') else ''}workers: "
                         f"{row['samples_per_s']:,.0f} {unit} ({row['status']})")

    def _sweep_main(self, cfg: RunConfig, ws: list[int], mode: str, network: str) -> None:
        from .. import api
        try:
            from . import simproc
            child = cfg.simulate and self.sim_in_child and simproc.available()

            def in_child(point: RunConfig, should_stop: Any = None, **_: Any) -> Any:
                """A simulated point in a child process, as a single run (`_train`)."""
                return simproc.run_in_process(point, should_stop=should_stop)
            table = api.sweep(cfg, ws, mode, cluster=None if cfg.simulate else self.cluster,
                              on_result=self._on_sweep_result, should_stop=self._stop.is_set, progress=False,
                              simulate=cfg.simulate, run_point=in_child if child else None)
            self.sweep_table = table
            self._last = table
            message = f"sweep done: {len(table)} run(s)"
            if len(table) and self._sweep_results:
                from ..analysis.sweep import fit_cost_model
                link, link_note = self._benchmarked_link(cfg, ws)
                cal, predicted, error = fit_cost_model(self._sweep_results, table, cfg, ws, mode, network, link=link)
                message += link_note
                self.predicted, self.calibration = predicted, cal
                self._scaling_slot.edit(functools.partial(F.update_scaling, table=table, predicted=predicted,
                                                          error=error))
                self.model_html.value = f"<p>{describe_calibration(cal, error, table)}</p>"
                message += f"; cost model fitted, prediction error on measured points {error:.0%} (details above the figure)"
            self._scaling_slot.flush()     # the figure's Python state is whole when a sweep ends
            self.sweep_html.value = runs_html(table, "workers", False)
            self._set_status(message)
        except BaseException as exc:
            self.last_error = exc
            self._last = None
            self._set_status(_error_text(exc), error=True)
        finally:
            self._set_buttons(running=False)


    def _benchmarked_link(self, cfg: RunConfig, ws: list[int]) -> tuple[Any, str]:
        """The link the cost model calibrates with: benchmarked on the sweep's own Dask
        cluster (`linkfit.benchmark_link`: the exchange timed alone at 3 sizes, bounded by
        memcpy / 8, with its uncertainty), as the scaling lesson and sim_validation do; None
        (the link fitted from the runs' own comm times) for a simulated sweep, one worker,
        threads, or no Dask client. Returns (LinkFit or None, a clause for the status)."""
        if cfg.simulate or max(ws) < 2 or self._stop.is_set():
            return None, ""
        from ..execution.cluster import current_client
        client = self.cluster if self.cluster is not None else current_client()
        if not (hasattr(client, "scheduler_info") and hasattr(client, "submit")):
            return None, "; link fitted from the runs (no Dask client to benchmark it on)"
        self._set_status("sweep done: timing this machine's link for the cost model (a few seconds) ...")
        try:
            from ..analysis.linkfit import benchmark_link
            return benchmark_link(client), "; link benchmarked on the sweep's cluster"
        except (ValueError, OSError) as exc:      # fewer than 2 workers, no shared memory: say so, fit from the runs
            return None, f"; link fitted from the runs (benchmark not possible: {exc})"


def _clear_traces(fig: Any) -> None:
    fig.data = ()


def _error_text(exc: BaseException) -> str:
    """One line for the status: the ConfigError text as is, else the error's type and message."""
    if isinstance(exc, (ConfigError, ValueError)):
        return f"error: {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "stopped: KeyboardInterrupt"
    return f"failed: {type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------ overhead
def live_overhead(config: RunConfig, cluster: Any = None, repeats: int = 3) -> dict[str, Any]:
    """What the dashboard's live plots cost a run, measured two ways.

    1. Throughput: `config` runs alternately through `workbench.run` (no on_record) and
       through a Dashboard (records buffered, live figures redrawn), `repeats` pairs;
       training-span throughputs (`costmodel.training_throughput`) are compared pair by
       pair, so load that drifts affects both halves of a pair alike.
    2. CPU time: the CPU seconds the dashboard's flusher spent drawing, against the CPU
       seconds of this process during the live run (all its threads). This one holds up
       on a busy machine, where throughput ratios are noisy.

    Args:
        config: the run.
        cluster: as for `workbench.run`.
        repeats: pairs of runs.
    Returns:
        {"plain", "live": samples/s per run; "pair_ratios": live / plain; "ratio": their
        median; "plot_cpu_fraction": plot CPU / process CPU of each live run; "records":
        records drawn per live run}.
    """
    from .. import api
    from ..analysis.costmodel import training_throughput

    plain, live, records, cpu_fraction = [], [], [], []
    dash = Dashboard(cluster=cluster, config=config)
    for _ in range(repeats):
        plain.append(training_throughput(api.run(config, cluster=cluster, progress=False)))
        dash.clear()
        cpu0 = time.process_time()
        if not dash.run():
            raise ConfigError("config", "a config the dashboard can run", dash.status_text)
        result = dash.wait()
        cpu = time.process_time() - cpu0
        if result is None:
            raise RuntimeError(dash.status_text)
        live.append(training_throughput(result))
        records.append(len(result.steps) + len(result.evals))
        cpu_fraction.append(dash.last_plot_cpu_s / cpu if cpu > 0 else math.nan)
    pairs = [lv / pl for lv, pl in zip(live, plain) if pl > 0]
    return {"plain": plain, "live": live, "pair_ratios": pairs,
            "ratio": statistics.median(pairs) if pairs else math.nan,
            "plot_cpu_fraction": cpu_fraction, "records": records}
