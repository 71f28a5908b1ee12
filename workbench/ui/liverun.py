"""The dashboard's live run: Run / Stop / Resume, the live plots and the run's status line.

A run trains on a background thread (`workbench.run`), so the kernel stays responsive
and Stop works. Records arrive on the run's own thread, where `on_record` only appends
them to a buffer. A second thread wakes FLUSH_S times a second: it takes the new records
(a cheap count of steps, samples and their clock), rewrites the status line (step, epoch,
the steady samples/s so far by the summary's own rule, `measure.LiveSteady`, so the last
number shown is the one the run ends with, and an ETA from the rate over the last
RATE_WINDOW_S of the run's own clock),
and a third redraws the live FigureWidgets when due: at least every MAX_REDRAW_S, more
often only while drawing costs under FLUSH_BUDGET of a core (CPU time, which other
processes on a busy machine do not inflate). Each redraw costs about the same however
long the run: workers stream at most `results.LIVE_ROWS` step blocks each over a whole
run, and a trace keeps at most `figdata.LIVE_POINTS`. Widgets are never touched from the
training thread.

Before the first step a run shows its start-up as its own phase ("starting: cluster",
"starting: placing data ..."); its curves start at the first step (t = 0). The final status
says the start-up as the summary measures it (from the run's call to its first step's start,
`measure.timing`), and how long starting a local cluster took before that; the running line
says neither (the first records reach the page later than the first step starts).
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as widgets

from .. import measure
from ..config import ConfigError, RunConfig
from ..learning import accuracy_text
from ..problem import Problem
from ..results import RecordBatch, RunTally, free_run_dir
from ..results.result import why_ended
from ..util.blas import rule_text
from . import figdata
from . import figures as F
from . import traces as T
from .controls import applying, in_process, workers_of
from .plotly_widget import Figures, FigureSlot

STOP_PROMISE_S = 1.0     # Stop: "stopped" in the status line this soon (the tooltip's promise; dashbench times it)
FLUSH_S = 0.25           # the status line follows 4 times a second ...
MAX_REDRAW_S = 1.0       # ... every live figure redraws at least once a second ...
FLUSH_BUDGET = 0.03      # ... and more often only while drawing costs under ~3% of a core (CPU time)
RATE_WINDOW_S = 10.0     # the ETA: step rate over the last 10 s of the run's own clock
DEFAULT_SMOOTHING = 0.6  # EMA weight of the live train-loss line (TensorBoard's default)
PROGRESS_HEIGHT_PX = 460  # the loss figures' height with up to two rows of legend (more rows: taller, T.fit_legend_height)
KEEP_RUNS = 20           # a long session's loss plots keep this many runs' curves (older ones thinned and faded)


def cluster_text(cluster_s: float | None) -> str:
    """What starting a local cluster for a run took, said after its start-up (which counts
    from the run's call: `measure.timing`, the summary's `startup_s`); "" when one was running.

    >>> cluster_text(5.43), cluster_text(None)
    (', after 5.4 s starting the cluster', '')
    """
    return "" if cluster_s is None else f", after {cluster_s:.1f} s starting the cluster"


def cluster_phase(cfg: Any, running: bool) -> str:
    """The status while a run waits for its Dask cluster: the session's first, or a new one
    because the run asks for other workers than the running one has.

    >>> from workbench.config import RunConfig
    >>> cluster_phase(RunConfig(algorithm="sync_sgd", cpus=2), running=False)
    "starting: a local Dask cluster of 2 worker(s) (the session's first)"
    >>> cluster_phase(RunConfig(algorithm="sync_sgd", cpus=1), running=True)
    'starting: a new local Dask cluster of 1 worker(s) (this run asks for other workers than the running one)'
    >>> cluster_phase(RunConfig(scheduler="tcp://h:8786"), running=False)
    'starting: connecting to the Dask scheduler at tcp://h:8786'
    """
    if cfg.scheduler:
        return f"starting: connecting to the Dask scheduler at {cfg.scheduler}"
    if running:
        return (f"starting: a new local Dask cluster of {workers_of(cfg)} worker(s) (this run asks for other "
                "workers than the running one)")
    return f"starting: a local Dask cluster of {workers_of(cfg)} worker(s) (the session's first)"


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
    cluster_s: float | None = None     # seconds spent starting a local Dask cluster for it (None: one was running)
    phase: str = "starting"            # "starting: <what>" until the first step, then "running"
    pending: list = field(default_factory=list)          # record batches taken, not drawn yet
    lock: threading.Lock = field(default_factory=threading.Lock)   # pending: status thread -> draw thread
    tally: RunTally = field(default_factory=lambda: RunTally(window_s=RATE_WINDOW_S))   # steps, epoch, samples, rate
    steady: measure.LiveSteady = field(default_factory=measure.LiveSteady)   # the summary's samples/s, live
    first_seen: float | None = None    # monotonic time the first step arrived here
    redraws: int = 0
    redraw_log: list = field(default_factory=list)       # (start, end) of each timed redraw, monotonic
    plot_cpu_s: float = 0.0            # CPU time the flusher spent drawing this run
    result: Any = None
    error: BaseException | None = None
    ended: dict | None = None          # the run's summary once it is saved, before its records are here (simproc)
    changed: threading.Event = field(default_factory=threading.Event)   # done or ended: the status loop wakes
    resume_dir: str | None = None      # a stopped run's directory, continued from its last checkpoint (Resume)
    note: str = ""                     # the status line's word on controls changed since Run (`next_run_note`)

    def take(self) -> None:
        """Move the buffer's records to `pending` and count them (`results.RunTally`)."""
        records = self.buffer.take()
        if not records:
            return
        with self.lock:
            self.pending.append(records)
        self.tally.add(records)
        self.steady.add(records)
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


class LiveRun:
    """The run half of a `Dashboard`: its buttons, the live figures, the run's threads and
    the status line while it runs.

    Args:
        host: the dashboard: its status line, its history and runs tab, its cluster and
            run folder, the Stop event shared with a sweep.
        base: the starting config (the breakdown figure's first worker count).
    """

    def __init__(self, host: Any, base: RunConfig) -> None:
        self._host = host
        self._stop = host.stop_event                    # the dashboard's Stop, for a run and a sweep alike
        self.current: _Run | None = None                # the run in progress (None between runs)
        self.last_plot_cpu_s = 0.0                      # CPU seconds the last run's live plots took
        self.last_redraws = 0                           # how often the last run's figures were redrawn
        self.last_redraw_log: list[tuple[float, float]] = []   # ... and when: (start, end), monotonic
        self._previous: dict | None = None              # the last run's config: its successor's name says what changed
        self.off_axis: set[str] = set()                 # runs kept off the loss axis's range (diverged, loss rose)
        self._progress_kinds: set[bool] = set()         # simulated or not, of the runs in the progress plots
        self._time_axes: dict[str, bool | str] = {}     # live figure -> what its time axis says (mark_virtual)

        self.run_button = widgets.Button(description="Run", button_style="success", icon="play",
                                         tooltip="train the controls' config; live plots follow")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True,
                                          tooltip=f"end the run: the status says stopped within about {STOP_PROMISE_S:g} s "
                                                  f"(more on a busy machine); it is kept as stopped")
        self.clear_button = widgets.Button(description="Clear plots", tooltip="empty every plot (the runs tab keeps the runs)")
        self.resume_button = widgets.Button(description="Resume", icon="repeat", disabled=True,
                                            tooltip="continue the stopped run from its last checkpoint (a Dashboard "
                                                    "with out=...; docs/checkpoints.md)")
        self.resume_button.on_click(lambda _: host.resume())
        self.run_button.on_click(lambda _: host.run())
        self.stop_button.on_click(lambda _: host.stop())
        self.clear_button.on_click(lambda _: host.clear())
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="240px"))
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

        self.slots = {k: FigureSlot(F.live_base(k, workers_of(base) if k == "breakdown" else 1))
                      for k in figdata.FIGURE_KEYS}
        self._progress_height = PROGRESS_HEIGHT_PX
        for key in ("progress_time", "progress_epoch"):
            self.slots[key].fig.layout.height = self._progress_height
            T.set_loss_scale(self.slots[key].fig, self.log_loss.value)
        for key in ("throughput", "lr"):
            self.slots[key].fig.layout.height = 300
        self.figures: Mapping[str, Any] = Figures(self.slots)
        self.lineage_box = self.slots["lineage"].box    # shown for ltfb only
        self._plot_boxes = [
            widgets.HBox([self.log_loss, self.smoothing,
                          widgets.HTML("<small>A legend entry shows or hides its run (double-click: only "
                                       "that run); drag to zoom, double-click to reset.</small>")],
                         layout=widgets.Layout(align_items="center", flex_flow="row wrap")),
            self.slots["progress_time"].box, self.slots["throughput"].box, self.slots["breakdown"].box,
            self.slots["lr"].box, self.slots["progress_epoch"].box, self.lineage_box]
        self.plots = widgets.VBox([widgets.HTML(
            "<p style='color:#666'>Live plots appear here when a run starts: loss and test accuracy, "
            "throughput per worker, where each worker's time goes, the lr actually used.</p>")],
            layout=widgets.Layout(flex="1 1 auto", min_width="0"))

    def plots_live(self) -> bool:
        """Whether the live figures are on the page (they are from the first run on)."""
        return self.plots.children and self.plots.children[0] is self._plot_boxes[0]

    def show_plots(self) -> None:
        """Put the live figures on the page (the first run); until then there is nothing to plot."""
        if self.plots_live():
            return
        if self._host.displayed:
            for slot in self.slots.values():
                slot.shown()
        self.plots.children = tuple(self._plot_boxes)

    def resumable(self) -> str | None:
        """The last run's directory if it stopped (or failed) and holds a checkpoint to go on from."""
        r = self._host.last
        s = getattr(r, "summary", None) or {}
        out = (s.get("config") or {}).get("out")
        if s.get("status") not in ("stopped", "failed") or not out:
            return None
        from ..checkpoint import listed
        return out if listed(out) else None

    def resume(self) -> bool:
        """Continue the last run, stopped, from its last checkpoint (the Resume button):
        `workbench.resume` on its directory, drawn as a run of its own.

        Returns:
            True if it started; False if nothing is there to resume or something is running.
        """
        where = self.resumable()
        if where is None or self._host.running:
            self._host.set_status("nothing to resume: the last run did not stop with a checkpoint", error=True)
            return False
        return self.run(resume_dir=where)

    def run(self, resume_dir: str | None = None) -> bool:
        """Start a run of the controls' config in the background (the Run button).

        Returns:
            True if it started; False if the config is invalid or something is running
            (the status line says why).
        """
        if resume_dir is not None:
            cfg = RunConfig.from_dict(self._host.last.summary["config"])
        else:
            cfg = self._host.config_to_start()
        if cfg is None:
            return False
        # its number in the runs tab: the session's runs so far, a sweep's included (a sweep's runs
        # took #7-#17 and the next dashboard run was named #7 again)
        index = len(self._host.history)
        if self._host.out is not None and resume_dir is None:
            cfg = cfg.replace(out=str(free_run_dir(self._host.out, f"run-{index + 1}-{cfg.algorithm}")))
        shown = applying(cfg.to_dict())    # the fields the page shows for it: a knob that does not apply is no change
        label = figdata.run_name(index, shown, workers_of(cfg), self._previous)   # what changed, named
        if resume_dir is not None:
            label = f"{label} (resumed)"
        self._previous = shown
        state = _Run(index=index, config=cfg, total_steps=Problem.from_config(cfg).plan.total_steps,
                     live=figdata.LiveState(label=label, color=figdata.run_color(index), n_workers=workers_of(cfg)),
                     resume_dir=resume_dir)
        self.show_plots()
        self._reset_run_figures(state)
        self._stop.clear()
        self.current = state
        self._host.status_log = []
        self._host.set_buttons(running=True)
        self._host.set_status(f"starting {state.live.label} ...")
        trainer = threading.Thread(target=self._train, args=(state,), name="workbench-dashboard-run", daemon=True)
        flusher = threading.Thread(target=self._flush_loop, args=(state,), name="workbench-dashboard-plots",
                                   daemon=True)
        self._host.active = flusher
        trainer.start()
        flusher.start()
        return True

    def clear(self) -> None:
        """Empty every plot: the runs' loss / accuracy curves and the last run's own figures
        (throughput, where the time goes, lr, lineage); the runs tab's history stays."""
        self._progress_kinds = set()
        self.off_axis = set()
        for key in ("progress_time", "progress_epoch"):
            self.slots[key].edit(_clear_traces)
            self.slots[key].edit(T.fit_loss_axis)
            self.slots[key].edit(functools.partial(T.log_decades, axis="y"))   # the last runs' tick values go
            self.slots[key].edit(functools.partial(T.fit_legend_height, base_px=self._progress_height))
        for key in ("throughput", "breakdown", "lr", "lineage"):
            self.slots[key].edit(_clear_traces)
        for slot in self.slots.values():    # the next run's time, epochs and steps from its own start
            slot.edit(_autorange_x)

    def _fit_loss_axes(self) -> None:
        """The loss axis over the runs drawn, leaving out the diverged ones (`T.fit_loss_axis`),
        and the figure's height to its legend of runs (`T.fit_legend_height`)."""
        for key in ("progress_time", "progress_epoch"):
            self.slots[key].edit(functools.partial(T.fit_loss_axis, leave_out=tuple(self.off_axis)))
            self.slots[key].edit(functools.partial(T.fit_legend_height, base_px=self._progress_height))
            # the data drawn now is whole: a narrow log axis labelled 0.5, 1, 2 rather than plotly's bare digits
            self.slots[key].edit(functools.partial(T.log_decades, axis="y", narrow_ticks=True))

    def _on_log_loss(self, change: dict) -> None:
        weight = float(self.smoothing.value)
        for key in ("progress_time", "progress_epoch"):
            self.slots[key].edit(functools.partial(T.set_loss_scale, log=bool(change["new"])))
            self.slots[key].edit(functools.partial(T.apply_smoothing, weight=weight))   # log or linear mean
        self._fit_loss_axes()     # the range in the new scale's units

    def _on_smoothing(self, change: dict) -> None:
        for key in ("progress_time", "progress_epoch"):
            self.slots[key].edit(functools.partial(T.apply_smoothing, weight=float(change["new"])))

    def _reset_run_figures(self, state: _Run) -> None:
        """Per-run figures start empty; the breakdown gets one row per worker (the first MAX_WORKER_ROWS)."""
        breakdown = self.slots["breakdown"]
        breakdown.flush()                     # the layout checked below must be the current one
        if [a.text for a in breakdown.fig.layout.annotations or ()] != F.breakdown_titles(state.live.n_workers):
            breakdown.replace(F.live_base("breakdown", state.live.n_workers,   # a whole new state
                                          simulated=state.config.simulate))
            self._time_axes["breakdown"] = state.config.simulate
        for key in ("throughput", "breakdown", "lr", "lineage"):
            self.slots[key].edit(_clear_traces)
        if self._host.labels:    # earlier runs drawn: thinned, faded, at most KEEP_RUNS of them kept
            for key in ("progress_time", "progress_epoch"):
                self.slots[key].edit(functools.partial(T.retire_runs, keep=KEEP_RUNS, current=state.live.label))
        for key in ("progress_time", "progress_epoch"):   # plotly's own loss ticks while data arrives
            if self.slots[key].fig.layout.yaxis.tickmode == "array":   # (an edit only where the last run set some)
                self.slots[key].edit(functools.partial(T.log_decades, axis="y", narrow_ticks=False))
        # Time axes in virtual seconds for a simulated run; the progress plots keep earlier
        # runs' curves, so they say "virtual for simulated runs" once both kinds are drawn.
        simulated = state.config.simulate
        self._progress_kinds.add(simulated)
        overlaid = "mixed" if len(self._progress_kinds) > 1 else simulated
        for key, virtual in (("throughput", simulated), ("breakdown", simulated), ("progress_time", overlaid)):
            if self._time_axes.get(key, False) != virtual:     # an edit only when the clock changes
                self._time_axes[key] = virtual
                self.slots[key].edit(functools.partial(F.mark_virtual, virtual=virtual))

    def _train(self, state: _Run) -> None:
        from .. import api
        try:
            cluster = self._host.cluster
            cfg = state.config
            if cfg.simulate:      # its own virtual cluster, in a child process: no Dask cluster
                cluster = None
                state.phase = f"starting: a simulated cluster of {workers_of(cfg)} virtual worker(s)"
            elif in_process(cfg):
                state.phase = "starting: loading data"
            elif cluster is None:
                from ..execution.cluster import client, current_client, session_warm
                warm, t = session_warm(cfg.cpus, cfg.gpus, cfg.scheduler), time.monotonic()
                if not warm:   # why there is one to wait for
                    state.phase = cluster_phase(cfg, current_client() is not None)
                cluster = client(cfg.cpus, cfg.gpus, cfg.scheduler)      # the session's, found by dask-labextension
                if not warm:   # said beside the run's start-up, which counts from its call (measure.timing)
                    state.cluster_s = time.monotonic() - t
            from ..execution.engine import transport_for  # the one choice: simulated, threads or Dask
            transport = transport_for(cfg, cluster)   # sgd: threads, in this process
            if getattr(transport, "name", None) == "dask":
                self._host.set_dask_link(transport.client)
                state.phase = f"starting: placing data on {workers_of(cfg)} worker(s) and starting their loops"
            from . import simproc
            if state.resume_dir is not None:   # Resume: its directory goes on from its last checkpoint
                state.result = api.resume(state.resume_dir, cluster=None if cfg.simulate else transport,
                                          on_record=state.buffer.add, should_stop=self._stop.is_set, progress=False,
                                          report=False)
            elif cfg.simulate and self._host.sim_in_child and simproc.available():   # on a core of its own
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
                    self._host.set_status(*self._end_status(state, state.ended))
                    shown_end = True
                continue
            self._show_progress(state)
        # The status says how the run ended as soon as its records are saved (Stop promises
        # about a second); the figures' last redraw from the complete records and the run's
        # report.html (seconds of plotly on a busy machine) follow, then Run is enabled.
        self.finish(state)
        self.stop_button.disabled = True
        drawer.join()
        self._flush(state)
        self._redraw_whole(state)
        self._fit_loss_axes()
        self._flush(state, last=True)
        self._record_drawing(state)     # again, with the redraws that were in flight at _finish
        self._write_report(state)
        self._host.why()                      # the "why" tab: what limits this run (analysis.explain)
        self.current = None
        self._host.set_buttons(running=False)
        self._renew_note(state)

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
            self._host.report_errors.append(f"{type(exc).__name__}: {exc}")
            self._host.set_status(f"{self._host.status_text}; report.html not written: {exc}", error=True)
        finally:
            api.settle_steps(result, directory)

    def _redraw_whole(self, state: _Run) -> None:
        """Redraw the run's loss, accuracy, lr, throughput and time-breakdown traces from its
        complete records (every step, not the live batches), decimated by the same
        extremes-keeping rule: when a run ends its curves are the run directory's and its
        report's."""
        result = state.result
        if result is None or not len(result.steps):
            return
        try:
            whole = figdata.align_to_first_step(result)
            for key, x in (("progress_time", "time"), ("progress_epoch", "epoch")):
                series = [dataclasses.replace(s, mode="replace") for s in
                          figdata.progress_series(whole.steps, whole.evals, x, state.live.label, state.live.color)]
                self.slots[key].edit(functools.partial(T.extend_series, series=series))
            lr = [dataclasses.replace(s, mode="replace") for s in figdata.lr_series(whole.steps)]
            self.slots["lr"].edit(functools.partial(T.extend_series, series=lr))
            # throughput and where the time goes as the report draws them (`figures.throughput_figure`,
            # `breakdown_figure`: the steps in time bins), not the live batches' windows: a simulated run
            # of 500 steps arrives in two batches, which left each worker's share of time one point
            bins = figdata.time_bins(whole.steps)
            rows = max(1, min(state.live.n_workers, figdata.MAX_WORKER_ROWS))
            for key, series in (("throughput", figdata.throughput_series(bins)),
                                ("breakdown", figdata.breakdown_series(figdata.breakdown_totals(whole.steps),
                                                                       bins, rows))):
                series = [dataclasses.replace(s, mode="replace") for s in series]
                self.slots[key].edit(functools.partial(T.extend_series, series=series))
            weight = float(self.smoothing.value)
            if weight > 0:
                for key in ("progress_time", "progress_epoch"):
                    self.slots[key].edit(functools.partial(T.apply_smoothing, weight=weight, only=state.live.label))
        except Exception as exc:      # a plotting bug must not lose the run; it is reported
            self._host.plot_errors.append(f"{type(exc).__name__}: {exc}")

    def _draw_loop(self, state: _Run) -> None:
        """Redraw the live figures with the records taken so far: at least every
        MAX_REDRAW_S, more often while a redraw costs under FLUSH_BUDGET of a core."""
        next_draw = 0.0
        while not state.done.is_set():
            for slot in self.slots.values():     # edits held for a view that never said it drew
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
                    self.slots[key].edit(edit)
                weight = float(self.smoothing.value)
                if weight > 0:   # this run's line only: the others have not changed since their end
                    for key in ("progress_time", "progress_epoch"):
                        self.slots[key].edit(functools.partial(T.apply_smoothing, weight=weight,
                                                               only=state.live.label))
                state.redraws += 1
            if last:                  # the figures' Python state must be whole when a run ends,
                for slot in self.slots.values():   # and so must the state a notebook saves of them
                    slot.flush(whole=True)
        except Exception as exc:      # a plotting bug must not end the run; it is reported
            self._host.plot_errors.append(f"{type(exc).__name__}: {exc}")
        cost = time.thread_time() - cpu
        state.plot_cpu_s += cost
        return cost

    def _show_progress(self, state: _Run) -> None:
        if state.done.is_set():
            return
        since_run = time.monotonic() - state.t0
        stopping = " stopping ..." if self._stop.is_set() else ""
        note = f" (plot errors: {self._host.plot_errors[-1]})" if self._host.plot_errors else ""
        if state.first_time is None:
            text = f"{state.phase} ... {since_run:.1f} s ({state.live.label}){stopping}{note}"
        else:
            done = min(1.0, state.steps_seen / max(1, state.total_steps))
            self.progress.value = done
            train_s = max(0.0, state.last_time - state.first_time)
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
                steady = state.steady.recent_rate()   # the summary's rule so far, as the terminal's bar
                parts.append("warming up" if steady is None else f"{steady:,.0f} samples/s steady so far")
                if rates is not None and rates[0] > 0:
                    parts.append(f"~{left / rates[0]:,.0f} s left")
            text = ", ".join(parts) + stopping + note
        state.note = self.next_run_note(state)
        self._host.set_status(text + state.note)

    def next_run_note(self, state: _Run) -> str:
        """What the controls say now, when it is not the config `state` runs: a change made
        while a run goes applies to the next Run, not to this one (the status line kept
        naming the running config while the algorithm dropdown showed another, and the
        next Run ran the dropdown's without a word). Blank when nothing changed; else e.g.
        "; the controls changed (algorithm=sync_easgd): they apply to the next Run, not this one".
        """
        form = self._host.form
        if form.error is not None:
            return f"; the controls changed and cannot run as they are ({form.error}): not this run's config"
        shown = form.shown_config
        if shown is None or state.resume_dir is not None:
            return ""
        was = applying(state.config.replace(out=None).to_dict())
        now = applying(shown.to_dict())
        def differs(k: str) -> bool:   # a knob the running config did not have: named off its default
            if k in was:
                return now[k] != was[k]
            field = RunConfig.model_fields.get(k)
            return field is None or now[k] != field.default
        changed = [k for k in now if k != "out" and differs(k)]
        if not changed:
            return ""
        said = " ".join(f"{k}={figdata._knob_text(now[k])}" for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        return f"; the controls changed ({said}{more}): they apply to the next Run, not this one"

    def _renew_note(self, state: _Run) -> None:
        """After the run has quite ended: the status line's word on the controls as they are
        now (changed while its figures and report were finished, the form left it alone)."""
        if state.error is not None or state.result is None:
            return
        old, new = state.note, self.next_run_note(state)
        text = self._host.status_text
        if old != new and old and text.endswith(old):
            state.note = new
            self._host.set_status(text[:len(text) - len(old)] + new,
                                  error=state.result.summary.get("status") in ("failed", "diverged"))

    def _record_drawing(self, state: _Run) -> None:
        """The last run's drawing figures (redraws, their log, their CPU time) as they stand."""
        self.last_plot_cpu_s = state.plot_cpu_s
        self.last_redraws = state.redraws
        self.last_redraw_log = list(state.redraw_log)

    def finish(self, state: _Run) -> None:
        """The final status line, the run in `history` and the runs tab (buttons: the caller)."""
        self._host.last = state.result
        self._record_drawing(state)
        if state.error is not None:
            self._host.last_error = state.error
            self._host.set_status(error_text(state.error), error=True)
        else:
            r = state.result
            self._host.history.append(r)
            self._host.labels.append(state.live.label)
            s = r.summary
            if s.get("status") == "diverged" or str(s.get("learning_note") or "").startswith(
                    "did not learn: the training loss rose"):
                self.off_axis.add(state.live.label)
            text, error = self._end_status(state, r.summary)
            if text != self._host.status_text:      # said already when the run ended in a child process
                self._host.set_status(text, error=error)
            self._host.show_runs()

    def _end_status(self, state: _Run, s: dict) -> tuple[str, bool]:
        """The final status line of a run with summary `s`, and whether it reads as an error;
        the progress bar set to the steps it ran."""
        startup = s.get("startup_s")   # the summary's (measure.timing), not when records first arrived here
        train_s = s.get("train_time_s", s.get("wall_time_s", 0)) or 0
        self.progress.value = min(1.0, s.get("steps", 0) / max(1, state.total_steps))
        if s.get("simulated"):   # its start-up on the virtual clock too (it read "start-up 0.00 us")
            took = f"{train_s:.3g} virtual s (simulated in {s.get('sim_wall_s', 0):.1f} s)"
            rate = f"{s.get('samples_per_s', 0):,.0f} samples per virtual s"
            started = None if startup is None else f"{startup:.3g} virtual s"
        else:   # the one BLAS rule (util.blas), said where the rate is
            took = measure.duration_text(train_s)   # a teaching run's 40 steps take milliseconds, not "0.0 s"
            rate = f"{s.get('samples_per_s', 0):,.0f} samples/s steady ({rule_text(s.get('blas_threads'))})"
            started = None if startup is None else measure.duration_text(startup)
        return (f"{s['status']}: {state.live.label}, {s.get('steps')} steps in {took}"
                + (f" (start-up {started}{cluster_text(state.cluster_s)})" if started is not None else "")
                + f", {rate}, "
                f"{accuracy_text(s)}, "
                + measure.comm_fraction_text(s)
                + "".join(f"; {n}" for n in measure.notes(s))    # busy machine, no steady state
                + "".join(f"; warning: {w}" for w in s.get("warnings") or ())   # what preflight said of the config
                + (f"; {why}" if (why := why_ended(s, "the run's events")) else "")   # what ended it: the model's error, a lost worker
                + self._end_note(state),
                s["status"] in ("failed", "diverged"))

    def _end_note(self, state: _Run) -> str:
        state.note = self.next_run_note(state)
        return state.note

    # ------------------------------------------------------------------ runs tab


def _clear_traces(fig: Any) -> None:
    fig.data = ()


def _autorange_x(fig: Any) -> None:
    """Every x axis back to autorange (a range zoomed or drawn for the runs cleared goes)."""
    fig.for_each_xaxis(lambda ax: ax.update(autorange=True))


def error_text(exc: BaseException) -> str:
    """One line for the status: the ConfigError text as is, else the error's type and message."""
    if isinstance(exc, (ConfigError, ValueError)):
        return f"error: {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "stopped: KeyboardInterrupt"
    return f"failed: {type(exc).__name__}: {exc}"
