"""The interactive dashboard: a control for every knob, Run / Stop, live plots, scaling sweeps.

    from workbench.ui import Dashboard
    dash = Dashboard()          # the cell's value shows it
    dash.run(); dash.wait()     # the same without a frontend (papermill, tests)

The only ipywidgets code of workbench. Every control is named after, and maps onto,
the `RunConfig` field of the same name (`CONTROL_FIELDS`); what the controls say is
validated as a whole on every change, and a bad combination shows its `ConfigError`
text in the status line (never a traceback). The lr schedule the controls imply is
redrawn as they change.

Threads: a run trains on a background thread (`workbench.run`), so the kernel stays
responsive and Stop works. Records arrive on the run's own thread, where `on_record`
only appends them to a buffer; a second thread flushes the buffer into the live
FigureWidgets at most 4 times a second, one `batch_update` per figure, and backs off
further when redrawing would take more than FLUSH_BUDGET of the time. Widgets are never
touched from the training thread.

FigureWidgets inside ipywidgets containers need their whole state re-sent before they
are first shown (`figures.sync_widget`); the dashboard does that when it is displayed.
Once shown, a figure's edits wait until its frontend can take them (`FigureSlot`).
"""
from __future__ import annotations

import functools
import html
import math
import os
import statistics
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ipywidgets as widgets
import pandas as pd

from . import figures as F
from .report import summary_table
from ..config import ALGORITHMS, DATASET_NAMES, MODEL_NAMES, ConfigError, RunConfig

FLUSH_S = 0.25           # live plots redraw at most 4 times a second ...
FLUSH_BUDGET = 0.03      # ... and spend at most ~3% of wall time redrawing (slow redraws back off)
POWERS_OF_TWO = tuple(2 ** k for k in range(14))   # 1 .. 8192: batch sizes on a log scale
EASGD_FAMILY = ("easgd", "async_easgd", "async_measgd", "hogwild_easgd", "sync_easgd")
RELEVANT = {"tau": EASGD_FAMILY, "alpha": EASGD_FAMILY, "trainers": ("ltfb",), "round_size": ("ltfb",)}
KNOWN_N_TRAIN = {"mnist": 60000, "fashion_mnist": 60000, "cifar10": 50000}  # official splits


# ------------------------------------------------------------------------------ controls
def _same(v: Any) -> Any:
    return v


def _tidy(v: float) -> float:
    """A float widget's value to 12 significant digits: a frontend's slider arithmetic
    (0.9 -> 0.9000000000000001) must not change the config.

    >>> _tidy(0.9000000000000001)
    0.9
    """
    return float(f"{float(v):.12g}")


def _sorted_options(options: tuple, value: Any) -> list:
    return sorted(set(options) | {value})


@dataclass(frozen=True)
class Control:
    """One widget and how its value maps onto the RunConfig field of the same name."""

    field: str
    group: str
    make: Callable[[Any], Any]                 # current field value -> widget
    to_field: Callable[[Any], Any] = _same     # widget value -> RunConfig value
    from_field: Callable[[Any], Any] = _same   # RunConfig value -> widget value


def _desc(name: str) -> dict:
    return {"description": name, "style": {"description_width": "110px"},
            "layout": widgets.Layout(width="300px")}


CONTROLS: tuple[Control, ...] = (
    # what to train
    Control("algorithm", "what", lambda v: widgets.Dropdown(options=list(ALGORITHMS), value=v, **_desc("algorithm"))),
    Control("dataset", "what", lambda v: widgets.Dropdown(options=list(DATASET_NAMES), value=v, **_desc("dataset"))),
    Control("model", "what", lambda v: widgets.Dropdown(options=list(MODEL_NAMES), value=v, **_desc("model"))),
    Control("hidden", "what", lambda v: widgets.Text(value=v, placeholder="default", **_desc("hidden")),
            to_field=lambda v: v.strip() or None, from_field=lambda v: ",".join(map(str, v)) if v else ""),
    Control("n_samples", "what", lambda v: widgets.BoundedIntText(value=v, min=10, max=10**8, **_desc("n_samples"))),
    # where to train
    Control("cpus", "where", lambda v: widgets.BoundedIntText(value=v, min=0, max=256, **_desc("cpus"))),
    Control("gpus", "where", lambda v: widgets.Dropdown(options=[("auto", "auto")] + [(str(i), i) for i in range(17)],
                                                         value=v, **_desc("gpus"))),
    Control("latency_ms", "where", lambda v: widgets.BoundedFloatText(value=v, min=0, max=10000, step=0.1,
                                                                       **_desc("latency_ms")), to_field=_tidy),
    Control("bandwidth_gbps", "where", lambda v: widgets.BoundedFloatText(value=v, min=0, max=10000, step=0.1,
                                                                           **_desc("bandwidth_gbps")),
            to_field=_tidy),
    # optimisation
    Control("batch_size", "optimisation", lambda v: widgets.SelectionSlider(
        options=_sorted_options(POWERS_OF_TWO, v), value=v, **_desc("batch_size"))),
    Control("base_batch", "optimisation", lambda v: widgets.SelectionSlider(
        options=_sorted_options(POWERS_OF_TWO, v), value=v, **_desc("base_batch"))),
    Control("lr", "optimisation", lambda v: widgets.FloatLogSlider(value=v, base=10, min=-5, max=1, step=0.05,
                                                                   readout_format=".3g", **_desc("lr")),
            to_field=_tidy),
    Control("lr_scaling", "optimisation", lambda v: widgets.Dropdown(options=["none", "linear", "sqrt"], value=v,
                                                                     **_desc("lr_scaling"))),
    Control("warmup", "optimisation", lambda v: widgets.Dropdown(options=["none", "gradual", "constant"], value=v,
                                                                 **_desc("warmup"))),
    Control("warmup_epochs", "optimisation", lambda v: widgets.BoundedFloatText(value=v, min=0, max=10000, step=0.5,
                                                                                **_desc("warmup_epochs")),
            to_field=_tidy),
    Control("decay", "optimisation", lambda v: widgets.Dropdown(options=["none", "step", "cosine"], value=v,
                                                                **_desc("decay"))),
    Control("momentum", "optimisation", lambda v: widgets.FloatSlider(value=v, min=0, max=0.99, step=0.01,
                                                                      **_desc("momentum")), to_field=_tidy),
    Control("nesterov", "optimisation", lambda v: widgets.Checkbox(value=v, indent=False, **_desc("nesterov"))),
    # algorithm knobs
    Control("tau", "algorithm", lambda v: widgets.IntSlider(value=v, min=1, max=max(64, v), **_desc("tau"))),
    Control("alpha", "algorithm", lambda v: widgets.FloatSlider(value=v, min=0, max=0.99, step=0.01,
                                                                readout_format=".2f", **_desc("alpha")),
            to_field=lambda v: _tidy(v) if v > 0 else None,     # 0 = unset: 0.9 / workers
            from_field=lambda v: 0.0 if v is None else v),
    Control("trainers", "algorithm", lambda v: widgets.IntSlider(value=v, min=1, max=max(16, v), **_desc("trainers"))),
    Control("round_size", "algorithm", lambda v: widgets.BoundedIntText(value=v, min=1, max=10**6,
                                                                        **_desc("round_size"))),
    # how long
    Control("epochs", "length", lambda v: widgets.BoundedFloatText(value=v, min=0.01, max=10**5, step=1,
                                                                   **_desc("epochs")), to_field=_tidy),
    Control("seed", "length", lambda v: widgets.BoundedIntText(value=v, min=0, max=2**31 - 1, **_desc("seed"))),
)
CONTROL_FIELDS: dict[str, str] = {c.field: c.field for c in CONTROLS}   # control name -> RunConfig field
GROUP_TITLES = {"what": "what to train", "where": "where", "optimisation": "optimisation",
                "algorithm": "algorithm knobs", "length": "length"}


def preview_n_train(config: RunConfig) -> int:
    """Training-set size for the schedule preview, without generating the data.

    Digits is loaded (bundled, cached); generated sets use load_dataset's split rule;
    downloadable sets their official sizes.
    """
    from ..data import _n_test, load_dataset

    if config.dataset == "digits":
        return load_dataset("digits").n_train
    if config.dataset in KNOWN_N_TRAIN:
        return KNOWN_N_TRAIN[config.dataset]
    return config.n_samples - _n_test(config.n_samples, 0.2)


def _workers_of(config: RunConfig) -> int:
    if config.n_workers is not None:
        return config.n_workers
    from ..backend import gpu_count
    return config.cpus + gpu_count()


# ------------------------------------------------------------------------------ figures
READY_WAIT_S = 30.0   # a shown figure no view reports in for gets its edits after this (no browser)
_REPORTS = ["_js2py_traceDeltas"]   # plotly's view sets it after its first draw and after each edit


class FigureSlot:
    """A FigureWidget in its own Box, edited only once its frontend model takes edits.

    A FigureWidget's frontend model sets up plotly's code asynchronously (it waits for
    plotly's module: `plotly_widget`); an edit that arrives before that (traces added
    or deleted, a relayout) changes the model's traits with nobody listening, so a view
    drawn later shows the figure without it, and later edits address traces it does
    not have. So, once the figure has been shown:

    - edits queue until a view reports in: plotly's view draws only after plotly's
      model code is set up, and reports right after its first draw; queued edits are
      then applied in order, and later ones at once;
    - with no report READY_WAIT_S after showing (papermill, no browser), or when
      forced (a run's last flush), edits apply anyway, so the Python figure is whole.

    Never shown (tests, headless use), edits apply at once. Thread-safe: the flusher
    edits from its thread while reports arrive on the kernel's.
    """

    def __init__(self, fig: Any, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.box = widgets.Box([fig])
        self._lock = threading.RLock()
        self._pending: list[Callable[[Any], Any]] = []
        self._shown = False
        self._attach(fig)

    @property
    def fig(self) -> Any:
        """The current FigureWidget (`replace` changes it)."""
        return self._fig

    @property
    def pending(self) -> int:
        """Edits waiting for the frontend."""
        return len(self._pending)

    @property
    def viewed(self) -> bool:
        """Whether a view has reported in since the figure was shown."""
        return self._viewed

    def _attach(self, fig: Any) -> None:
        self._fig = fig
        self._since = self._clock()            # when its whole state last went out
        self._viewed = False
        fig.observe(self._on_report, names=_REPORTS)

    def shown(self) -> None:
        """The figure is being displayed: send its whole state again (`figures.sync_widget`)
        and hold later edits until a view reports in."""
        with self._lock:
            F.sync_widget(self._fig)
            self._shown, self._since = True, self._clock()

    def ready(self) -> bool:
        """Whether an edit made now reaches the frontend's copy of the figure."""
        return not self._shown or self._viewed or self._clock() - self._since >= READY_WAIT_S

    def edit(self, fn: Callable[[Any], Any]) -> None:
        """Apply `fn(fig)` (inside one batch_update) now, or once the frontend is ready;
        edits apply in the order given."""
        with self._lock:
            self._pending.append(fn)
            if self.ready():
                self._apply()

    def flush(self) -> None:
        """Apply queued edits now, ready or not (a run's last flush)."""
        with self._lock:
            self._apply()

    def replace(self, fig: Any) -> None:
        """Show `fig` instead (its whole state goes out with it); queued edits apply to it."""
        with self._lock:
            self._fig.unobserve(self._on_report, names=_REPORTS)
            self._attach(fig)
            self.box.children = (fig,)

    def _apply(self) -> None:
        if not self._pending:
            return
        edits, self._pending = self._pending, []
        with self._fig.batch_update():
            for fn in edits:
                fn(self._fig)

    def _on_report(self, change: dict) -> None:
        if self._viewed or not change.get("new"):
            return
        with self._lock:
            self._viewed = True
            self._apply()


class _Figures(Mapping):
    """FIGURE_KEYS -> the current FigureWidget of each slot (`FigureSlot.replace` changes it)."""

    def __init__(self, slots: dict[str, FigureSlot]):
        self._slots = slots

    def __getitem__(self, key: str) -> Any:
        return self._slots[key].fig

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)


# ------------------------------------------------------------------------------ runs
class _Buffer:
    """Records handed over from the training thread; taking them is atomic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[dict] = []

    def add(self, records: list[dict]) -> None:
        with self._lock:
            self._items.extend(records)

    def take(self) -> list[dict]:
        with self._lock:
            items, self._items = self._items, []
        return items


@dataclass
class _Run:
    """One run started from the dashboard, while it lasts."""

    index: int
    config: RunConfig
    total_steps: int
    live: F.LiveState
    buffer: _Buffer = field(default_factory=_Buffer)
    done: threading.Event = field(default_factory=threading.Event)
    t0: float = field(default_factory=time.perf_counter)
    samples: int = 0
    plot_cpu_s: float = 0.0      # CPU time the flusher spent drawing this run
    result: Any = None
    error: BaseException | None = None


class Dashboard:
    """Controls for every knob, Run / Stop, live plots, a runs table and a scaling tab.

    Args:
        cluster: passed to `workbench.run` (a Client, a cluster, an address, "threads";
            default: the session's local cluster).
        config: the starting values (default `RunConfig()`); fields without a control
            keep this config's value.
        out: a folder; each run is then saved to out/run-<k>-<algorithm>.

    Usable without a frontend: `config`, `run()`, `stop()`, `wait(timeout)`,
    `sweep(workers, mode)`, `history`, `runs_table()`, `status_text`.
    """

    def __init__(self, cluster: Any = None, config: RunConfig | None = None, out: str | os.PathLike | None = None):
        self.cluster = cluster
        self.out = None if out is None else Path(out)
        self._base = (config or RunConfig()).replace(out=None)
        self.history: list[Any] = []            # RunResults of this session, in order
        self.plot_errors: list[str] = []        # live-plot failures (shown in the status line too)
        self.last_error: BaseException | None = None
        self.last_plot_cpu_s = 0.0              # CPU seconds the last run's live plots took
        self.sweep_table = pd.DataFrame()
        self.status_text = ""
        self._stop = threading.Event()
        self._active: threading.Thread | None = None   # the flusher of a run, or a sweep's thread
        self._current: _Run | None = None
        self._last: Any = None
        self._runs_started = 0
        self._syncing = False
        self._shown_config: RunConfig | None = None     # the config the preview and status show
        self._sweep_results: list[Any] = []
        self.predicted: pd.DataFrame | None = None      # the last sweep's cost-model curves
        self.calibration: Any = None                    # ... and the calibration behind them
        self._build()

    # ------------------------------------------------------------------ widgets
    def _build(self) -> None:
        base = self._base
        self.controls: dict[str, Any] = {}
        groups: dict[str, list] = {g: [] for g in GROUP_TITLES}
        for c in CONTROLS:
            w = c.make(c.from_field(getattr(base, c.field)))
            w.observe(self._on_change, names="value")
            self.controls[c.field] = w
            groups[c.group].append(w)
        columns = [widgets.VBox([widgets.HTML(f"<b>{GROUP_TITLES[g]}</b>"), *ws]) for g, ws in groups.items()]
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.clear_button = widgets.Button(description="Clear plots", tooltip="forget earlier runs' curves")
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.clear_button.on_click(lambda _: self.clear())
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="300px"))
        self.status = widgets.HTML(value="")
        self.runs_html = widgets.HTML(value="<i>no runs yet</i>")

        self._slots = {k: FigureSlot(F.live_base(k, _workers_of(base) if k == "breakdown" else 1))
                       for k in F.FIGURE_KEYS}
        self.figures: Mapping[str, Any] = _Figures(self._slots)
        self._lineage_box = self._slots["lineage"].box    # shown for ltfb only
        plots = widgets.VBox([self._slots[k].box for k in ("progress_time", "progress_epoch", "throughput",
                                                           "breakdown", "lr", "lineage")])

        cpus = max(1, os.cpu_count() or 1)
        default_ws = ",".join(str(w) for w in POWERS_OF_TWO if w <= cpus) or "1"
        self.sweep_workers = widgets.Text(value=default_ws, **_desc("workers"))
        self.sweep_mode = widgets.ToggleButtons(options=["strong", "weak"], value="strong", description="mode")
        from ..costmodel import NETWORKS
        self.sweep_network = widgets.Dropdown(options=list(NETWORKS), value="10GbE", **_desc("network"))
        self.sweep_button = widgets.Button(description="Sweep", button_style="info", icon="line-chart")
        self.sweep_button.on_click(lambda _: self.sweep())
        self._scaling_slot = FigureSlot(F.scaling_figure(
            pd.DataFrame(columns=["workers", "samples_per_s", "efficiency"]), live=True))
        self.sweep_html = widgets.HTML("")
        scaling = widgets.VBox([
            widgets.HTML("Run the controls' config on each worker count; the figure gains a point as each "
                         "run ends, then the cost model's predictions (calibrated on these runs, and for the "
                         "network picked) are drawn over them."),
            widgets.HBox([self.sweep_workers, self.sweep_mode, self.sweep_network, self.sweep_button]),
            self._scaling_slot.box, self.sweep_html])

        self._preview_slot: FigureSlot | None = None
        self._refresh()                                   # validates, says "ready" or what is wrong
        self._preview_slot = FigureSlot(F.as_widget(self._preview_figure(self._shown_config)))
        run_tab = widgets.VBox([widgets.HBox(columns, layout=widgets.Layout(flex_flow="row wrap")),
                                self._preview_slot.box])
        self.tabs = widgets.Tab(children=[run_tab, scaling, self.runs_html])
        self.tabs.titles = ("run", "scaling", "runs")
        bar = widgets.HBox([self.run_button, self.stop_button, self.clear_button, self.progress])
        self.widget = widgets.VBox([self.tabs, bar, self.status, plots])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        for slot in self._all_slots():        # see figures.sync_widget: nested FigureWidgets
            slot.shown()                      # show stale state unless it is sent again
        return self.widget._repr_mimebundle_(**kwargs)

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
        return {c.field: c.to_field(self.controls[c.field].value) for c in CONTROLS}

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
                    w.options = _sorted_options(tuple(w.options), value)
                w.value = value
        finally:
            self._syncing = False
        self._refresh()

    def _on_change(self, change: dict) -> None:
        if not self._syncing:
            self._refresh()

    def _refresh(self) -> RunConfig | None:
        """Validate the controls; redraw the schedule preview; say what is wrong, if anything.

        Leaves the status line alone when the config did not change (a frontend echoing
        a control's value back must not hide the last run's result)."""
        try:
            cfg = self.config
            if cfg == self._shown_config:
                return cfg
            from ..optim import make_plan
            plan = make_plan(cfg, preview_n_train(cfg))
        except (ConfigError, ValueError) as exc:   # DataError and schedule errors are ValueErrors
            self._shown_config = None
            self._set_status(f"error: {exc}", error=True)
            self._set_buttons(self.running)
            return None
        self._shown_config = cfg
        for name, algorithms in RELEVANT.items():
            self.controls[name].disabled = cfg.algorithm not in algorithms
        self._lineage_box.layout.display = None if cfg.algorithm == "ltfb" else "none"
        if self._preview_slot is not None:
            def redraw(fig: Any, series: list = F.planned_series(plan), title: str = plan.schedule_text) -> None:
                F.extend_series(fig, series)
                fig.layout.title.text = f"lr schedule: {title}"
            self._preview_slot.edit(redraw)
        if not self.running:
            self._set_buttons(False)
            self._set_status(f"ready: {cfg.algorithm} on {cfg.dataset}, {plan.total_steps} steps "
                             f"of {cfg.batch_size} samples")
        return cfg

    @staticmethod
    def _preview_figure(cfg: RunConfig | None) -> Any:
        """The schedule preview as a static figure (the widget is made from it once)."""
        from ..optim import make_plan
        fig = F.schedule_figure(make_plan(cfg, preview_n_train(cfg))) if cfg is not None else F._lr_base()
        title = f"lr schedule: {fig.layout.title.text}" if cfg is not None else "lr schedule"
        return fig.update_layout(height=260, margin={"t": 40, "b": 30}, title=title)

    def _set_status(self, text: str, error: bool = False) -> None:
        self.status_text = text
        color = "#b00020" if error else "#333"
        self.status.value = f'<span style="color:{color}">{html.escape(text, quote=False)}</span>'

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
        from ..optim import make_plan
        index = self._runs_started
        self._runs_started += 1
        if self.out is not None:
            cfg = cfg.replace(out=str(self.out / f"run-{index + 1}-{cfg.algorithm}"))
        state = _Run(index=index, config=cfg, total_steps=make_plan(cfg, preview_n_train(cfg)).total_steps,
                     live=F.LiveState(label=f"#{index + 1} {cfg.algorithm} P={_workers_of(cfg)} B={cfg.batch_size}",
                                      color=F.run_color(index), n_workers=_workers_of(cfg)))
        self._reset_run_figures(state)
        self._stop.clear()
        self._current = state
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
        """Ask the run (or sweep) to stop; it ends within about a second, as "stopped"."""
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
        for key in ("progress_time", "progress_epoch"):
            self._slots[key].edit(_clear_traces)

    def _set_buttons(self, running: bool) -> None:
        invalid = self._shown_config is None     # the controls describe a bad config
        self.run_button.disabled = running or invalid
        self.sweep_button.disabled = running or invalid
        self.stop_button.disabled = not running

    def _reset_run_figures(self, state: _Run) -> None:
        """Per-run figures start empty; the breakdown gets one row per worker."""
        n = max(1, min(state.live.n_workers, F.MAX_WORKER_ROWS))
        breakdown = self._slots["breakdown"]
        breakdown.flush()                     # the layout checked below must be the current one
        if len(breakdown.fig.layout.annotations or ()) != n + 1:
            breakdown.replace(F.live_base("breakdown", state.live.n_workers))   # a whole new state
        for key in ("throughput", "breakdown", "lr", "lineage"):
            self._slots[key].edit(_clear_traces)

    def _train(self, state: _Run) -> None:
        from .. import api
        try:
            state.result = api.run(state.config, cluster=self.cluster, on_record=state.buffer.add,
                                   should_stop=self._stop.is_set, progress=False)  # its own plots
        except BaseException as exc:  # shown in the status line; the flusher reports it
            state.error = exc
        finally:
            state.done.set()

    def _flush_loop(self, state: _Run) -> None:
        interval = FLUSH_S
        while True:
            finished = state.done.wait(interval)
            t = time.perf_counter()
            self._flush(state, last=finished)
            interval = max(FLUSH_S, (time.perf_counter() - t) / FLUSH_BUDGET)
            if finished:
                break
        self._finish(state)

    def _flush(self, state: _Run, last: bool = False) -> None:
        cpu = time.thread_time()
        records = state.buffer.take()
        try:
            if records:
                state.samples += sum(r.get("samples", 0) for r in records if r.get("kind") == "step")
                for key, series in F.live_series(records, state.live).items():
                    if series:
                        self._slots[key].edit(functools.partial(F.extend_series, series=series))
            if last:                  # the figures' Python state must be whole when a run ends
                for slot in self._slots.values():
                    slot.flush()
        except Exception as exc:      # a plotting bug must not end the run; it is reported
            self.plot_errors.append(f"{type(exc).__name__}: {exc}")
        self._show_progress(state)
        state.plot_cpu_s += time.thread_time() - cpu

    def _show_progress(self, state: _Run) -> None:
        if state.done.is_set():
            return
        elapsed = time.perf_counter() - state.t0
        done = min(1.0, state.live.steps_seen / max(1, state.total_steps))
        self.progress.value = done
        left = f", ~{elapsed * (1 - done) / done:.0f} s left" if done > 0 else ""
        rate = f", {state.samples / elapsed:,.0f} samples/s" if elapsed > 0 and state.samples else ""
        note = f" (plot errors: {self.plot_errors[-1]})" if self.plot_errors else ""
        stopping = " stopping ..." if self._stop.is_set() else ""
        self._set_status(f"running {state.live.label}: step {state.live.steps_seen}/{state.total_steps} "
                         f"({done:.0%}), {elapsed:.1f} s{left}{rate}{stopping}{note}")

    def _finish(self, state: _Run) -> None:
        self._current = None
        self._last = state.result
        self.last_plot_cpu_s = state.plot_cpu_s
        if state.error is not None:
            self.last_error = state.error
            self._set_status(_error_text(state.error), error=True)
        else:
            r = state.result
            self.history.append(r)
            self._show_runs()
            s = r.summary
            acc = s.get("final_test_accuracy")
            self.progress.value = min(1.0, s.get("steps", 0) / max(1, state.total_steps))
            self._set_status(f"{s['status']}: {state.live.label}, {s.get('steps')} steps in "
                             f"{s.get('wall_time_s', 0):.1f} s, {s.get('samples_per_s', 0):,.0f} samples/s, "
                             f"test accuracy {'n/a' if acc is None else f'{acc:.4f}'}, "
                             f"comm fraction {s.get('comm_fraction', 0):.2f}",
                             error=s["status"] in ("failed", "diverged"))
        self._set_buttons(running=False)

    def runs_table(self) -> pd.DataFrame:
        """The session's runs, one row each (the runs tab shows it)."""
        return summary_table(self.history)

    def _show_runs(self) -> None:
        table = self.runs_table()
        self.runs_html.value = table.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")

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
        from ..sweep import sweep_configs
        ws = workers if workers is not None else [p for p in self.sweep_workers.value.replace(" ", "").split(",") if p]
        mode = mode or self.sweep_mode.value
        network = network or self.sweep_network.value
        try:
            configs = sweep_configs(cfg, ws, mode)          # every run checked before the first starts
        except (ConfigError, ValueError) as exc:
            self._set_status(f"error: {exc}", error=True)
            return False
        ws = [c.cpus if c.cpus else c.gpus for c in configs]
        self.sweep_table = pd.DataFrame()
        self._sweep_results = []
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
        from ..sweep import SWEEP_COLUMNS, add_scaling
        self._sweep_results.append(result)
        self.history.append(result)
        rows = self.sweep_table.to_dict("records") + [row]
        self.sweep_table = add_scaling(pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)))
        self._scaling_slot.edit(functools.partial(F.update_scaling, table=self.sweep_table))
        self._show_runs()
        self._set_status(f"sweep: {len(rows)} run(s) done, last on {row['workers']} workers: "
                         f"{row['samples_per_s']:,.0f} samples/s ({row['status']})")

    def _sweep_main(self, cfg: RunConfig, ws: list[int], mode: str, network: str) -> None:
        from .. import costmodel
        from ..sweep import sweep
        try:
            table = sweep(cfg, ws, mode, cluster=self.cluster, on_result=self._on_sweep_result,
                          should_stop=self._stop.is_set, progress=False)
            self.sweep_table = table
            self._last = table
            message = f"sweep done: {len(table)} run(s)"
            if len(table) and self._sweep_results:
                cal = costmodel.calibrate(self._sweep_results)
                top = max(64, 8 * max(ws))
                pred_ws = sorted({ws[0], *[w for w in POWERS_OF_TWO if ws[0] <= w <= top]})
                predicted = costmodel.predict(cal, cfg.algorithm, pred_ws, cfg.batch_size, mode,
                                              networks=[costmodel.MEASURED, network], tau=cfg.tau,
                                              round_size=cfg.round_size, tournament_size=cfg.tournament_size)
                _, error = costmodel.compare(cal, table, cfg.algorithm, tau=cfg.tau, round_size=cfg.round_size,
                                             tournament_size=cfg.tournament_size)
                self.predicted, self.calibration = predicted, cal
                self._scaling_slot.edit(functools.partial(F.update_scaling, table=table, predicted=predicted,
                                                          error=error))
                message += f"; cost model: {cal.describe()}; prediction error on measured points {error:.0%}"
            self._scaling_slot.flush()     # the figure's Python state is whole when a sweep ends
            self.sweep_html.value = table.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")
            self._set_status(message)
        except BaseException as exc:
            self.last_error = exc
            self._last = None
            self._set_status(_error_text(exc), error=True)
        finally:
            self._set_buttons(running=False)


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
    from ..costmodel import training_throughput

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
