"""The interactive dashboard: a control for every knob, Run / Stop, live plots, scaling sweeps.

In a notebook, `Dashboard()` as a cell's value shows it. Without a frontend (papermill,
tests) the same object runs from code:

>>> import workbench as wb
>>> dash = Dashboard(cluster="threads", config=wb.RunConfig(algorithm="sync_sgd", steps=3))
>>> dash.run()
True
>>> dash.wait(60).status
'completed'

The only ipywidgets code of workbench. A Dashboard composes three parts, each its own
module: the form (`ui/form.py`: a control per `RunConfig` field, validated as a whole on
every change, the lr preview), the live run (`ui/liverun.py`: Run / Stop / Resume on
background threads, the live figures, the run's status line) and the sweep panel
(`ui/sweeppanel.py`: the scaling tab). What they share lives here: the status line, the
buttons' state, the session's runs (`history`, the runs tab), the "why" tab and the Stop
event. The one field without a control, `out`, is named in `controls.LEFT_TO_CODE`; a bad
combination shows its `ConfigError` text in the status line (never a traceback).

FigureWidgets inside ipywidgets containers need their whole state re-sent before they
are first shown (`plotly_widget.sync_widget`); the dashboard does that when it is displayed
and when the live plots appear at the first run. Once shown, a figure's edits wait
until its frontend can take them (`FigureSlot`).
"""
from __future__ import annotations

import html
import math
import os
import statistics
import threading
import time
from collections.abc import Mapping
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

from ..config import ConfigError, RunConfig
from .controls import applying
from .form import Form
from .liverun import LiveRun
from .plotly_widget import FigureSlot
from .report import differing_config, runs_html, summary_table
from .sweeppanel import SweepPanel

DEFAULT_ALGORITHM = "sync_sgd"   # the dashboard starts on a parallel algorithm (sgd is the reference)
# The first run a new user sees: long enough (5-15 s on 2 cores) for a curve in every panel;
# the RunConfig defaults alone (softmax, 5 epochs: 220 steps) were over in 0.1 s.
DEFAULT_RUN = {"algorithm": DEFAULT_ALGORITHM, "model": "mlp", "hidden": [512, 256], "epochs": 40.0}


class Dashboard:
    """Controls for every knob, Run / Stop, live plots, a runs table and a scaling tab.

    Args:
        cluster: passed to `workbench.run` (a Client, a cluster, an address, "threads";
            default: the session's local cluster, `workbench.client()`).
        config: the starting values (default `RunConfig(algorithm="sync_sgd")`).
        out: a folder; each run is then saved to out/run-<k>-<algorithm>.

    Usable without a frontend: `config`, `run()`, `stop()`, `wait(timeout)`,
    `sweep(workers, mode)`, `history`, `runs_table()`, `status_text`. Its parts:
    `form` (`ui.form.Form`), `live` (`ui.liverun.LiveRun`), `sweeps`
    (`ui.sweeppanel.SweepPanel`); what they share is here: the status line
    (`set_status`), the buttons (`set_buttons`), the runs tab (`labels`, `show_runs`),
    the Stop event, the running thread (`active`) and the last result (`last`).
    """

    sim_in_child = True     # simulated runs in a child process (`simproc`); False: on a thread of the kernel

    def __init__(self, cluster: Any = None, config: RunConfig | None = None, out: str | os.PathLike | None = None):
        self.cluster = cluster
        self.out = None if out is None else Path(out)
        base = (config or RunConfig(**DEFAULT_RUN)).replace(out=None)
        self.history: list[Any] = []            # RunResults of this session, in order
        self.plot_errors: list[str] = []        # live-plot failures (shown in the status line too)
        self.report_errors: list[str] = []      # report.html failures (the status line says so)
        self.last_error: BaseException | None = None
        self.status_log: list[tuple[float, str]] = []   # (seconds since Run, status line) of the last run
        self.status_text = ""
        self.dask_link: str | None = None
        self.stop_event = threading.Event()             # Stop: read by a run's and a sweep's loops
        self.active: threading.Thread | None = None    # the flusher of a run, or a sweep's thread
        self.last: Any = None                           # the last run's RunResult, or the last sweep's table
        self.displayed = False                          # the dashboard has been shown in a frontend
        self.labels: list[str] = []                     # the name of each run in `history` (legend, status, runs tab)
        self.status = widgets.HTML(value="")
        self.links = widgets.HTML(value="")

        self.form = Form(self, base)
        self.live = LiveRun(self, base)
        self.sweeps = SweepPanel(self)
        self.controls: dict[str, Any] = self.form.controls
        self.figures: Mapping[str, Any] = self.live.figures
        self.run_button, self.stop_button = self.live.run_button, self.live.stop_button
        self.resume_button, self.clear_button = self.live.resume_button, self.live.clear_button
        self.sweep_button = self.sweeps.button
        self.progress, self.log_loss, self.smoothing = self.live.progress, self.live.log_loss, self.live.smoothing
        self.model_html = self.sweeps.model_html

        self.runs_sort = widgets.Dropdown(options=["run"], value="run", description="sort by",
                                          tooltip="the column to sort the runs by",
                                          style={"description_width": "50px"}, layout=widgets.Layout(width="260px"))
        self.runs_descending = widgets.ToggleButton(value=False, description="descending", icon="sort",
                                                    tooltip="largest first", layout=widgets.Layout(width="120px"))
        self.runs_sort.observe(lambda _: self.show_runs(), names="value")
        self.runs_descending.observe(lambda _: self.show_runs(), names="value")
        self.runs_html = widgets.HTML(value="<i>no runs yet</i>", layout=widgets.Layout(width="100%"))
        runs = widgets.VBox([widgets.HBox([self.runs_sort, self.runs_descending]), self.runs_html],
                            layout=widgets.Layout(width="100%"))

        run_tab = widgets.HBox([self.form.build(), self.live.plots], layout=widgets.Layout(width="100%"))
        self.why_html = widgets.HTML("<i>after a run: what limits it (workbench explain)</i>",
                                     layout=widgets.Layout(width="100%"))
        why = widgets.VBox([widgets.HTML(
            "Why a run is as fast as it is (the last run that completed, named below): its step decomposed, "
            "compared with 1 worker (the last run of the same config on another worker count, or the 1-worker "
            "step the cost model predicts), and what would change the answer. The same text as "
            "<code>python -m workbench explain RUN [RUN]</code>."),
            self.why_html], layout=widgets.Layout(width="100%"))
        self.tabs = widgets.Tab(children=[run_tab, self.sweeps.box, runs, why])
        self.tabs.titles = ("run", "scaling", "runs", "why")
        bar = widgets.HBox([self.run_button, self.stop_button, self.resume_button, self.clear_button, self.progress,
                            self.links],
                           layout=widgets.Layout(align_items="center", flex_flow="row wrap"))
        self.widget = widgets.VBox([bar, self.status, self.tabs])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self.displayed = True
        for slot in self._all_slots():        # see plotly_widget.sync_widget: nested FigureWidgets
            if slot is self.form.preview_slot or (slot is self.sweeps.slot and self.sweeps.slot.box.layout.display
                                                  != "none") or (slot in self.live.slots.values()
                                                                 and self.live.plots_live()):
                slot.shown()                  # show stale state unless it is sent again
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def preview(self) -> Any:
        """The lr-schedule preview FigureWidget."""
        return None if self.form.preview_slot is None else self.form.preview_slot.fig

    @property
    def scaling_figure(self) -> Any:
        """The scaling tab's FigureWidget."""
        return self.sweeps.slot.fig

    def _all_slots(self) -> list[FigureSlot]:
        return [s for s in (self.form.preview_slot, self.sweeps.slot, *self.live.slots.values()) if s is not None]

    def _figure_widgets(self) -> list[Any]:
        return [s.fig for s in self._all_slots()]

    # ------------------------------------------------------------------ config
    @property
    def config(self) -> RunConfig:
        """The RunConfig the controls describe; raises ConfigError for a bad combination."""
        return self.form.config

    @config.setter
    def config(self, config: RunConfig) -> None:
        self.form.config = config

    def set_status(self, text: str, error: bool = False) -> None:
        """Say `text` in the status line (red when `error`), logged against the running run's clock."""
        state = self.live.current
        if state is not None:      # the run's status lines, timed from its Run (dashbench reads them)
            self.status_log.append((round(time.monotonic() - state.t0, 3), text))
        self.status_text = text
        color = "#b00020" if error else "#333"
        self.status.value = f'<span style="color:{color}">{html.escape(text, quote=False)}</span>'

    def set_dask_link(self, client: Any) -> None:
        """Link the Dask dashboard of `client`'s cluster beside the buttons (once it is known)."""
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
        return self.active is not None and self.active.is_alive()

    def config_to_start(self) -> RunConfig | None:
        """The controls' config if nothing is running and it is valid; else None, with
        the reason in the status line."""
        if self.running:
            self.set_status("busy: a run or sweep is in progress; Stop it first", error=True)
            return None
        return self.form.refresh()

    def resumable(self) -> str | None:
        """The last run's directory if it stopped (or failed) and holds a checkpoint to go on from."""
        return self.live.resumable()

    def resume(self) -> bool:
        """Continue the last run, stopped, from its last checkpoint (the Resume button):
        `workbench.resume` on its directory, drawn as a run of its own.

        Returns:
            True if it started; False if nothing is there to resume or something is running.
        """
        return self.live.resume()

    def run(self, resume_dir: str | None = None) -> bool:
        """Start a run of the controls' config in the background (the Run button).

        Args:
            resume_dir: a stopped run's directory to go on from instead (`resume`).
        Returns:
            True if it started; False if the config is invalid or something is running
            (the status line says why).
        """
        return self.live.run(resume_dir)

    def stop(self) -> None:
        """Ask the run (or sweep) to stop; it ends within about `liverun.STOP_PROMISE_S`, as "stopped"."""
        self.stop_event.set()
        if self.running:
            self.set_status("stopping ...")

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
        thread = self.active
        if thread is not None:
            try:
                thread.join(timeout)
            except KeyboardInterrupt:   # interrupting the kernel while waiting stops the run too
                self.stop()
                thread.join(10)
                raise
            if thread.is_alive():
                raise TimeoutError(f"timeout: still running after {timeout} s (dashboard.stop() ends it)")
        return self.last

    def clear(self) -> None:
        """Empty every plot (the Clear plots button); the runs tab's history stays."""
        self.live.clear()

    def sweep(self, workers: Any = None, mode: str | None = None, network: str | None = None) -> bool:
        """Start a scaling sweep of the controls' config in the background (the Sweep button).

        Args:
            workers: worker counts, a list or the text "1,2,4" (default: the scaling tab's).
            mode: "strong" or "weak" (default: the tab's).
            network: a costmodel.NETWORKS name for the predicted curve (default: the tab's).
        Returns:
            True if it started (the status line says why not).
        """
        return self.sweeps.sweep(workers, mode, network)

    @property
    def sweep_table(self) -> pd.DataFrame:
        """The last sweep's table (a row per worker count), as far as it has gone."""
        return self.sweeps.table

    @property
    def predicted(self) -> pd.DataFrame | None:
        """The last sweep's cost-model curves (`calibration`: the calibration behind them)."""
        return self.sweeps.predicted

    @property
    def calibration(self) -> Any:
        """The cost model's calibration on the last sweep's runs."""
        return self.sweeps.calibration

    @property
    def last_plot_cpu_s(self) -> float:
        """CPU seconds the last run's live plots took."""
        return self.live.last_plot_cpu_s

    @property
    def last_redraws(self) -> int:
        """How often the last run's figures were redrawn."""
        return self.live.last_redraws

    @property
    def last_redraw_log(self) -> list[tuple[float, float]]:
        """When the last run's figures were redrawn: (start, end) of each, monotonic seconds."""
        return self.live.last_redraw_log

    def set_buttons(self, running: bool) -> None:
        """Enable the buttons that apply: Run and Sweep while idle with a valid config, Stop while
        running, Resume while idle after a run that stopped with a checkpoint."""
        invalid = self.form.shown_config is None     # the controls describe a bad config
        self.run_button.disabled = running or invalid
        self.sweeps.button.disabled = running or invalid
        self.stop_button.disabled = not running
        self.resume_button.disabled = running or self.resumable() is None

    def why(self) -> str:
        """Explain the last run (against the last run of its config on another worker count,
        when there is one: `analysis.explain.pick_runs`) in the "why" tab; returns the text."""
        from ..analysis.explain import explain, pick_runs, to_html
        runs = pick_runs(self.history)
        if not runs:
            return ""
        try:
            found = explain(runs, round_rates=self._round_rates(runs))
        except Exception as exc:      # a run it cannot read (no steady steps, ...): said in the tab
            self.why_html.value = f"<i>{html.escape(str(exc))}</i>"
            return str(exc)
        self.why_html.value = self._why_heading(runs) + to_html(found)
        return "\n\n".join(e.text() for e in found)

    def _round_rates(self, runs: list) -> dict[int, list[float]] | None:
        """Where the runs explained are rounds of the last sweep: each worker count's rates over
        its whole rounds (`analysis.sweep.scaling_row`'s, as the sweep's table takes them), so
        the why tab gives the speed-up the scaling tab does (it gave one round's ratio: 0.38x
        beside the sweep's 0.24x, 0.09-0.52, at load 15); None otherwise."""
        from ..analysis.sweep import scaling_row
        done = [r for r in self.sweeps.results if r.summary.get("status") == "completed"]
        if not all(any(r is d for d in done) for r in runs):
            return None
        rates: dict[int, list[float]] = {}
        for r in done:
            w = len(r.summary.get("workers") or [])
            rates.setdefault(w, []).append(float(scaling_row(r, w, "strong", None)["samples_per_s"] or 0.0))
        return rates

    def _why_heading(self, runs: list) -> str:
        """Which runs the why tab explains, by the names the runs tab gives them, and why not
        the last one when it did not complete (no steady state to decompose)."""
        def name(run: Any) -> str:
            i = next(i for i, h in enumerate(self.history) if h is run)
            return self.labels[i] if len(self.labels) == len(self.history) else f"#{i + 1}"
        # the run on more workers is the one explained, the other its reference (`explain`)
        ordered = sorted(runs, key=lambda r: -len(r.summary.get("workers") or []))
        said = f"Explaining <b>{html.escape(' against '.join(name(r) for r in ordered))}</b>"
        last = self.history[-1]
        if last is not runs[-1]:
            said += (f"; the last run, {html.escape(name(last))}, ended {html.escape(str(last.summary.get('status')))}"
                     " and is not explained (a run that did not complete has no whole steady state)")
        return f"<p>{said}.</p>"

    # ------------------------------------------------------------------ runs tab
    def runs_table(self) -> pd.DataFrame:
        """The session's runs, one row each: headline numbers, the hyper-parameters that
        differ between them, and each run's directory (the runs tab shows it)."""
        labels = self.labels if len(self.labels) == len(self.history) else None   # the names the status line said
        table = summary_table(self.history, labels=labels)
        if not len(table):
            return table
        # each run's fields as its page showed them: a knob that does not apply to a run is blank in its row
        diff = differing_config([applying(r.summary.get("config") or {}) for r in self.history])
        diff = diff.drop(columns=[c for c in diff.columns if c in table.columns or c == "out"])
        table = pd.concat([table.iloc[:, :1], diff, table.iloc[:, 1:]], axis=1)
        table["run_dir"] = [(r.summary.get("config") or {}).get("out") for r in self.history]
        return table

    def show_runs(self) -> None:
        """Redraw the runs tab's table, sorted as its controls say."""
        table = self.runs_table()
        if not len(table):
            return
        options = [c for c in table.columns if c != "run_dir"]
        if list(self.runs_sort.options) != options:
            keep = self.runs_sort.value if self.runs_sort.value in options else "run"
            self.runs_sort.options = options
            self.runs_sort.value = keep
        self.runs_html.value = runs_html(table, self.runs_sort.value, self.runs_descending.value)


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

