"""The dashboard's sweep panel: a scaling sweep of the controls' config, drawn as it runs.

The scaling tab runs the controls' config on each worker count (`workbench.sweep`, every
point checked before the first starts); the figure gains a point as each run ends, then
the cost model's predictions (`analysis.sweep.fit_cost_model`, calibrated on these runs
and for the network picked, with a link benchmarked on the sweep's Dask cluster) are
drawn over them.
"""
from __future__ import annotations

import functools
import threading
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..analysis.sweep import describe_calibration
from ..config import ConfigError, RunConfig
from . import figdata
from . import figures as F
from .controls import POWERS_OF_TWO
from .liverun import error_text
from .plotly_widget import FigureSlot
from .report import runs_html


class SweepPanel:
    """The scaling tab of a `Dashboard`: worker counts, mode, network, Sweep, the figure.

    Args:
        host: the dashboard: its status line, buttons, history and runs tab, its cluster,
            the Stop event shared with a run.
    """

    def __init__(self, host: Any) -> None:
        self._host = host
        self._stop = host.stop_event                    # the dashboard's Stop, for a run and a sweep alike
        self.table = pd.DataFrame()                     # the sweep's rows so far (a row per worker count)
        self.results: list[Any] = []                    # its RunResults, every round's
        self.predicted: pd.DataFrame | None = None      # the last sweep's cost-model curves
        self.calibration: Any = None                    # ... and the calibration behind them
        from ..util.machine import usable_cores
        cpus = usable_cores()   # affinity and CPU quota: a Binder pod's 2, not its host's 64
        default_ws = ",".join(str(w) for w in POWERS_OF_TWO if w <= cpus) or "1"
        self.workers_text = widgets.Text(value=default_ws, description="workers",
                                         tooltip="worker counts, comma-separated: one run each",
                                         style={"description_width": "60px"}, layout=widgets.Layout(width="200px"))
        self.mode_buttons = widgets.ToggleButtons(options=["strong", "weak"], value="strong",
                                                  tooltips=["strong: the same global batch split over more workers",
                                                            "weak: the same batch per worker (global batch grows)"],
                                                  style={"button_width": "64px"},
                                                  layout=widgets.Layout(width="auto"))
        from ..analysis.costmodel import NETWORKS
        self.network_menu = widgets.Dropdown(options=list(NETWORKS), value="10GbE", description="network",
                                             tooltip="a network to predict for, besides the calibrated one",
                                             style={"description_width": "60px"}, layout=widgets.Layout(width="200px"))
        self.button = widgets.Button(description="Sweep", button_style="info", icon="line-chart",
                                     tooltip="run the controls' config on each worker count")
        self.button.on_click(lambda _: self.sweep())
        self.slot = FigureSlot(F.scaling_figure(
            pd.DataFrame(columns=["workers", "samples_per_s", "efficiency"]), live=True))
        self.table_html = widgets.HTML("", layout=widgets.Layout(width="100%"))
        self.model_html = widgets.HTML("", layout=widgets.Layout(width="100%"))
        self.box = widgets.VBox([
            widgets.HTML("Run the controls' config on each worker count; the figure gains a point as each "
                         "run ends, then the cost model's predictions (calibrated on these runs, and for the "
                         "network picked) are drawn over them."),
            widgets.HBox([self.workers_text, widgets.Label("mode"), self.mode_buttons, self.network_menu,
                          self.button], layout=widgets.Layout(flex_flow="row wrap", align_items="center")),
            self.model_html, self.slot.box, self.table_html], layout=widgets.Layout(width="100%"))

        self.slot.box.layout.display = "none"      # no empty axes before the first sweep

    def sweep(self, workers: Any = None, mode: str | None = None, network: str | None = None) -> bool:
        """Start a scaling sweep of the controls' config in the background (the Sweep button).

        Args:
            workers: worker counts, a list or the text "1,2,4" (default: the scaling tab's).
            mode: "strong" or "weak" (default: the tab's).
            network: a costmodel.NETWORKS name for the predicted curve (default: the tab's).
        Returns:
            True if it started (the status line says why not).
        """
        cfg = self._host.config_to_start()
        if cfg is None:
            return False
        from ..analysis.sweep import sweep_configs, worker_field
        ws = workers if workers is not None else [p for p in self.workers_text.value.replace(" ", "").split(",") if p]
        mode = mode or self.mode_buttons.value
        network = network or self.network_menu.value
        try:
            configs = sweep_configs(cfg, ws, mode)          # every run checked before the first starts
        except (ConfigError, ValueError) as exc:
            self._host.set_status(f"error: {exc}", error=True)
            return False
        ws = [getattr(c, worker_field(cfg)) for c in configs]
        self.table = pd.DataFrame()
        self.results = []
        self.model_html.value = ""
        self.table_html.value = ""           # the table under the figure is this sweep's, from its first point
        if self.slot.box.layout.display == "none":
            if self._host.displayed:
                self.slot.shown()
            self.slot.box.layout.display = "block"
        def reset(fig: Any, title: str = f"{mode} scaling: {cfg.algorithm}") -> None:
            fig.data = ()
            fig.layout.title.text = title
        self.slot.edit(reset)
        self._stop.clear()
        self._host.set_buttons(running=True)
        self._host.set_status(f"sweep: {cfg.algorithm} on {ws} workers ({mode}) ...")
        thread = threading.Thread(target=self._main, args=(cfg, ws, mode, network),
                                  name="workbench-dashboard-sweep", daemon=True)
        self._host.active = thread
        thread.start()
        return True

    def on_result(self, row: dict, result: Any) -> None:
        """Called by the sweep after each run: one more point on the scaling figure."""
        from ..analysis.sweep import SWEEP_COLUMNS, add_scaling
        self.results.append(result)
        self._host.history.append(result)
        self._host.labels.append(f"#{len(self._host.history)} sweep {figdata.run_label(result)}")
        # a later round's row (the median so far) replaces that worker count's point
        rows = [r for r in self.table.to_dict("records") if r["workers"] != row["workers"]] + [row]
        rows.sort(key=lambda r: r["workers"])
        self.table = add_scaling(pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)))
        self.slot.edit(functools.partial(F.update_scaling, table=self.table))
        self.table_html.value = runs_html(self.table, "workers", False)
        if not row.get("simulated"):
            from ..execution.cluster import current_client
            self._host.set_dask_link(self._host.cluster if self._host.cluster is not None else current_client())
        self._host.show_runs()
        unit = "samples per virtual s" if row.get("simulated") else "samples/s"
        self._host.set_status(f"sweep: {len(self.results)} run(s) done ({len(self.table)} point(s), rounds "
                              f"interleaved), last on {row['workers']} "
                              f"{'virtual ' if row.get('simulated') else ''}worker{'' if row['workers'] == 1 else 's'}: "
                              f"{row['samples_per_s']:,.0f} {unit} ({row['status']})")

    def _main(self, cfg: RunConfig, ws: list[int], mode: str, network: str) -> None:
        """The sweep's thread: `workbench.sweep` over `ws`, then the cost model's fit."""
        from .. import api
        try:
            from . import simproc
            child = cfg.simulate and self._host.sim_in_child and simproc.available()

            def in_child(point: RunConfig, should_stop: Any = None, **_: Any) -> Any:
                """A simulated point in a child process, as a single run (`_train`)."""
                return simproc.run_in_process(point, should_stop=should_stop)
            table = api.sweep(cfg, ws, mode, cluster=None if cfg.simulate else self._host.cluster,
                              on_result=self.on_result, should_stop=self._stop.is_set, progress=False,
                              simulate=cfg.simulate, run_point=in_child if child else None,
                              out=self._sweep_dir(cfg))
            self.table = table
            self._host.last = table
            message = f"sweep done: {len(table)} point(s) from {len(self.results)} run(s)"
            if len(table) and self.results:
                from ..analysis.sweep import fit_cost_model
                link, link_note = self._benchmarked_link(cfg, ws)
                cal, predicted, error = fit_cost_model(self.results, table, cfg, ws, mode, network, link=link)
                message += link_note
                self.predicted, self.calibration = predicted, cal
                self.slot.edit(functools.partial(F.update_scaling, table=table, predicted=predicted, error=error))
                self.model_html.value = f"<p>{describe_calibration(cal, error, table)}</p>"
                message += f"; cost model fitted, prediction error on measured points {error:.0%} (details above the figure)"
            self.slot.flush()     # the figure's Python state is whole when a sweep ends
            self.table_html.value = runs_html(table, "workers", False)
            self._host.why()      # the why tab follows the session's last runs, a sweep's too
            self._host.set_status(message)
        except BaseException as exc:
            self._host.last_error = exc
            self._host.last = None
            self._host.set_status(error_text(exc), error=True)
        finally:
            self._host.set_buttons(running=False)

    def _sweep_dir(self, cfg: RunConfig) -> Any:
        """Where the sweep's runs and sweep.csv go: a new folder beside the dashboard's runs
        (`Dashboard(out=...)`: out/sweep-<k>-<algorithm>, each point's rounds as w{P}, w{P}-r{k}),
        so the runs tab links each of its runs' folders and reports; None without `out`."""
        if self._host.out is None:
            return None
        from ..results import free_run_dir  # a second session in the same folder keeps the first one's sweep
        return free_run_dir(self._host.out, f"sweep-{len(self._host.history) + 1}-{cfg.algorithm}", marker="sweep.csv")

    def _benchmarked_link(self, cfg: RunConfig, ws: list[int]) -> tuple[Any, str]:
        """The link the cost model calibrates with: benchmarked on the sweep's own Dask
        cluster (`linkfit.benchmark_link`: the exchange timed alone at 3 sizes, bounded by
        memcpy / 8, with its uncertainty), as the scaling lesson and sim_validation do; None
        (the link fitted from the runs' own comm times) for a simulated sweep, one worker,
        threads, or no Dask client. Returns (LinkFit or None, a clause for the status)."""
        if cfg.simulate or max(ws) < 2 or self._stop.is_set():
            return None, ""
        from ..execution.cluster import current_client
        client = self._host.cluster if self._host.cluster is not None else current_client()
        if not (hasattr(client, "scheduler_info") and hasattr(client, "submit")):
            return None, "; link fitted from the runs (no Dask client to benchmark it on)"
        self._host.set_status("sweep: runs done; timing this machine's link for the cost model (a few seconds) ...")
        try:
            from ..analysis.linkfit import benchmark_link
            return benchmark_link(client), "; link benchmarked on the sweep's cluster"
        except (ValueError, OSError) as exc:      # fewer than 2 workers, no shared memory: say so, fit from the runs
            return None, f"; link fitted from the runs (benchmark not possible: {exc})"
